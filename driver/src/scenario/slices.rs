//! Checks and resolves the GPU slices: partitions and the VMs bound to them.

use gpupm_uapi::regs::{MAX_PARTITION_SLOTS, MAX_VMS};
use gpupm_uapi::ri::RGS_MAX;
use toml::Spanned;

use super::error::SpanError;
use super::raw::{RawPartition, RawVm};
use super::spec::{PartitionSpec, TopologySpec, VmSpec};
use super::time::Clock;

/// Resolves the `[[partition]]` tables against the topology.
pub(super) fn partitions(
    raw: &[Spanned<RawPartition>],
    topology: &TopologySpec,
    time: Clock,
) -> Result<Vec<PartitionSpec>, SpanError> {
    if raw.is_empty() {
        return Err(SpanError::new(
            0..0,
            "no partition is configured; add a [[partition]]",
        ));
    }
    let mut gpc_owner = vec![None; topology.sms_per_gpc.len()];
    let mut slice_owner = vec![None; topology.memory_slices as usize];
    let mut out: Vec<PartitionSpec> = Vec::with_capacity(raw.len());
    for p in raw.iter().map(Spanned::get_ref) {
        let slot = *p.slot.get_ref();
        if !(1..MAX_PARTITION_SLOTS).contains(&slot) {
            return Err(SpanError::new(
                p.slot.span(),
                format!(
                    "partition slot {slot} is out of range; slots are 1..={}",
                    MAX_PARTITION_SLOTS - 1
                ),
            ));
        }
        if out.iter().any(|q| q.slot == slot) {
            return Err(SpanError::new(
                p.slot.span(),
                format!("partition slot {slot} is configured twice"),
            ));
        }
        let gpcs = claim(slot, "GPC", &p.gpcs, &mut gpc_owner)?;
        let memory_slices = claim(slot, "memory slice", &p.memory_slices, &mut slice_owner)?;
        out.push(PartitionSpec {
            slot,
            gpcs,
            memory_slices,
            ctx_timeslice_cycles: time.time_u32(
                "ctx_timeslice",
                &p.ctx_timeslice_us,
                &p.ctx_timeslice_cycles,
                2_000,
            )?,
            vm_timeslice_cycles: time.time_u32(
                "vm_timeslice",
                &p.vm_timeslice_us,
                &p.vm_timeslice_cycles,
                4_000,
            )?,
            ri_version: ri_key(&p.ri_version, "ri_version", 1, 255)?,
            ri_max_rgs: ri_key(&p.ri_max_rgs, "ri_max_rgs", RGS_MAX, RGS_MAX)?,
        });
    }
    Ok(out)
}

/// A partition's runtime-instrumentation characteristic `key`:
/// `default` when absent, else in `0..=max` (`ri_version` is a byte).
fn ri_key<T: TryFrom<u32>>(
    raw: &Option<Spanned<u32>>,
    key: &str,
    default: T,
    max: u32,
) -> Result<T, SpanError> {
    let Some(v) = raw else {
        return Ok(default);
    };
    let value = *v.get_ref();
    if value > max {
        return Err(SpanError::new(
            v.span(),
            format!("{key} {value} is out of range; it must lie in 0..={max}"),
        ));
    }
    T::try_from(value).map_err(|_| SpanError::new(v.span(), format!("{key} does not fit")))
}

/// Gives partition `slot` the units `wanted`, each an index into `owner`.
fn claim(
    slot: u32,
    kind: &str,
    wanted: &Spanned<Vec<Spanned<u32>>>,
    owner: &mut [Option<u32>],
) -> Result<Vec<u32>, SpanError> {
    if wanted.get_ref().is_empty() {
        return Err(SpanError::new(
            wanted.span(),
            format!("partition slot {slot} owns no {kind}; give at least one"),
        ));
    }
    let count = owner.len();
    for w in wanted.get_ref() {
        let i = *w.get_ref();
        let entry = owner.get_mut(i as usize).ok_or_else(|| {
            SpanError::new(
                w.span(),
                format!(
                    "{kind} {i} does not exist; the topology has {count} (0..={})",
                    count.saturating_sub(1)
                ),
            )
        })?;
        match *entry {
            Some(o) if o == slot => {
                return Err(SpanError::new(
                    w.span(),
                    format!("{kind} {i} is listed twice"),
                ))
            }
            Some(o) => {
                return Err(SpanError::new(
                    w.span(),
                    format!("{kind} {i} is already owned by partition slot {o}"),
                ))
            }
            None => *entry = Some(slot),
        }
    }
    Ok(wanted.get_ref().iter().map(|w| *w.get_ref()).collect())
}

/// Resolves the `[[vm]]` tables against the configured partitions.
pub(super) fn vms(raw: &[RawVm], partitions: &[PartitionSpec]) -> Result<Vec<VmSpec>, SpanError> {
    if raw.is_empty() {
        return Err(SpanError::new(0..0, "no VM is configured; add a [[vm]]"));
    }
    let mut out: Vec<VmSpec> = Vec::with_capacity(raw.len());
    for v in raw {
        let id = *v.id.get_ref();
        if !(1..MAX_VMS).contains(&id) {
            return Err(SpanError::new(
                v.id.span(),
                format!("VM id {id} is out of range; ids are 1..={}", MAX_VMS - 1),
            ));
        }
        if out.iter().any(|w| w.id == id) {
            return Err(SpanError::new(
                v.id.span(),
                format!("VM id {id} is configured twice"),
            ));
        }
        let partition = *v.partition.get_ref();
        if !partitions.iter().any(|p| p.slot == partition) {
            return Err(SpanError::new(
                v.partition.span(),
                format!("VM {id} is bound to partition slot {partition}, which is not configured"),
            ));
        }
        let confidential_key = v.confidential_key.as_ref().map(hex_key).transpose()?;
        if let (Some(flag), Some(_)) = (&v.confidential, &confidential_key) {
            if !flag.get_ref() {
                return Err(SpanError::new(
                    flag.span(),
                    format!("VM {id} has a confidential_key but confidential = false"),
                ));
            }
        }
        let confidential =
            v.confidential.as_ref().is_some_and(|f| *f.get_ref()) || confidential_key.is_some();
        out.push(VmSpec {
            id,
            partition,
            confidential,
            confidential_key,
        });
    }
    Ok(out)
}

/// Decodes a 64-hex-digit AES-256 key.
fn hex_key(text: &Spanned<String>) -> Result<[u8; 32], SpanError> {
    let s = text.get_ref();
    let bad = |why: String| {
        SpanError::new(
            text.span(),
            format!("confidential_key {why}; it must be 64 hex digits"),
        )
    };
    if let Some((i, c)) = s.chars().enumerate().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(bad(format!(
            "has the non-hex character {c:?} at position {}",
            i + 1
        )));
    }
    if s.len() != 64 {
        return Err(bad(format!("has {} digits", s.len())));
    }
    let mut key = [0u8; 32];
    for (byte, pair) in key.iter_mut().zip(s.as_bytes().chunks_exact(2)) {
        let digits = std::str::from_utf8(pair).map_err(|e| bad(e.to_string()))?;
        *byte = u8::from_str_radix(digits, 16).map_err(|e| bad(e.to_string()))?;
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use crate::scenario::test_support::{assert_at, err, err_raw, ok};

    const TWO_SLOTS: &str = "[[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = [1]\n";

    #[test]
    fn scenario_without_partition_is_rejected() {
        assert_at(
            &err_raw("seed = 1\n[[vm]]\nid = 1\npartition = 1\n"),
            1,
            "no partition",
        );
    }

    #[test]
    fn partition_slot_outside_range_is_rejected() {
        let e = err("[[partition]]\nslot = 0\ngpcs = [1]\nmemory_slices = [1]\n");
        assert_at(&e, 2, "slot 0 is out of range; slots are 1..=15");
        let e = err("[[partition]]\nslot = 16\ngpcs = [1]\nmemory_slices = [1]\n");
        assert_at(&e, 2, "slot 16 is out of range");
    }

    #[test]
    fn duplicate_partition_slot_is_rejected() {
        let e = err(&format!(
            "{TWO_SLOTS}[[partition]]\nslot = 2\ngpcs = [2]\nmemory_slices = [2]\n"
        ));
        assert_at(&e, 6, "partition slot 2 is configured twice");
    }

    #[test]
    fn gpc_index_outside_topology_is_rejected() {
        let e = err("[topology]\nsms_per_gpc = [16, 16]\n[[partition]]\nslot = 2\ngpcs = [2]\nmemory_slices = [1]\n");
        assert_at(&e, 5, "GPC 2 does not exist; the topology has 2 (0..=1)");
        assert_eq!(e.column, 9);
    }

    #[test]
    fn gpc_owned_by_two_partitions_is_rejected() {
        let e = err(&format!(
            "{TWO_SLOTS}[[partition]]\nslot = 3\ngpcs = [2, 1]\nmemory_slices = [2]\n"
        ));
        assert_at(&e, 7, "GPC 1 is already owned by partition slot 2");
        assert_eq!(e.column, 12);
    }

    #[test]
    fn gpc_listed_twice_is_rejected() {
        let e = err("[[partition]]\nslot = 2\ngpcs = [1, 1]\nmemory_slices = [1]\n");
        assert_at(&e, 3, "GPC 1 is listed twice");
    }

    #[test]
    fn memory_slice_index_outside_topology_is_rejected() {
        let e = err("[topology]\nmemory_slices = 2\n[[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = [1, 2]\n");
        assert_at(&e, 6, "memory slice 2 does not exist");
    }

    #[test]
    fn memory_slice_owned_by_two_partitions_is_rejected() {
        let e = err(&format!(
            "{TWO_SLOTS}[[partition]]\nslot = 3\ngpcs = [2]\nmemory_slices = [1]\n"
        ));
        assert_at(&e, 8, "memory slice 1 is already owned by partition slot 2");
    }

    #[test]
    fn partition_without_gpcs_or_memory_slices_is_rejected() {
        let e = err("[[partition]]\nslot = 2\ngpcs = []\nmemory_slices = [1]\n");
        assert_at(&e, 3, "partition slot 2 owns no GPC");
        let e = err("[[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = []\n");
        assert_at(&e, 4, "owns no memory slice");
    }

    #[test]
    fn timeslice_that_overflows_u32_is_rejected() {
        let e = err("[[partition]]\nslot = 2\ngpcs = [1]\nmemory_slices = [1]\nctx_timeslice_us = 10000000\n");
        assert_at(
            &e,
            5,
            "ctx_timeslice of 19800000000 cycles does not fit in 32 bits",
        );
        let e = err("[[partition]]\nslot = 2\ngpcs = [1]\nvm_timeslice_us = 1\nvm_timeslice_cycles = 1\nmemory_slices = [1]\n");
        assert_at(&e, 5, "both `vm_timeslice_us` and `vm_timeslice_cycles`");
    }

    #[test]
    fn scenario_without_vm_is_rejected() {
        let e = err_raw("[[partition]]\nslot = 1\ngpcs = [0]\nmemory_slices = [0]\n");
        assert_at(&e, 1, "no VM is configured");
    }

    #[test]
    fn vm_id_outside_range_is_rejected() {
        assert_at(
            &err("[[vm]]\nid = 0\npartition = 1\n"),
            2,
            "VM id 0 is out of range; ids are 1..=63",
        );
        assert_at(
            &err("[[vm]]\nid = 64\npartition = 1\n"),
            2,
            "VM id 64 is out of range",
        );
    }

    #[test]
    fn duplicate_vm_id_is_rejected() {
        let e = err("[[vm]]\nid = 2\npartition = 1\n[[vm]]\nid = 2\npartition = 1\n");
        assert_at(&e, 5, "VM id 2 is configured twice");
    }

    #[test]
    fn vm_bound_to_unconfigured_partition_is_rejected() {
        let e = err("[[vm]]\nid = 2\npartition = 7\n");
        assert_at(&e, 3, "partition slot 7, which is not configured");
    }

    #[test]
    fn confidential_key_must_be_64_hex_digits() {
        let e = err("[[vm]]\nid = 2\npartition = 1\nconfidential_key = \"abc\"\n");
        assert_at(&e, 4, "has 3 digits; it must be 64 hex digits");
        assert_eq!(e.column, 20);
        let bad = format!(
            "[[vm]]\nid = 2\npartition = 1\nconfidential_key = \"{}g\"\n",
            "0".repeat(63)
        );
        assert_at(&err(&bad), 4, "non-hex character 'g' at position 64");
    }

    #[test]
    fn confidential_key_decodes_to_bytes() {
        let good = format!(
            "[[vm]]\nid = 2\npartition = 1\nconfidential_key = \"{}\"\n",
            "0fA1".repeat(16)
        );
        let s = ok(&good);
        let key = s.vms[0].confidential_key;
        assert_eq!(key.map(|k| (k[0], k[1], k[31])), Some((0x0f, 0xa1, 0xa1)));
        assert!(s.vms[0].confidential, "a key makes the VM confidential");
        assert_eq!(s.vms[1].confidential_key, None);
    }

    #[test]
    fn a_vm_is_confidential_without_a_key() {
        let s = ok("[[vm]]\nid = 2\npartition = 1\nconfidential = true\n");
        assert!(s.vms[0].confidential);
        assert_eq!(s.vms[0].confidential_key, None);
        assert!(!s.vms[1].confidential);
        let e = err(&format!(
            "[[vm]]\nid = 2\npartition = 1\nconfidential = false\nconfidential_key = \"{}\"\n",
            "00".repeat(32)
        ));
        assert_at(&e, 4, "has a confidential_key but confidential = false");
    }
}
