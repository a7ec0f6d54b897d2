//! A debug ledger answer (`GPUPM_IOC_LEDGER`) for a confidential VM or one
//! of its contexts: its counts — `generated`, `masked`, `remainder`, in
//! that order, [`LEDGER_SEALED_LEN`] bytes — are sealed like a slot's
//! payload, the envelope and tag stored in the answer.

use gpupm_uapi::ioctl::{ledger_flags, LedgerQuery, LEDGER_SEALED_LEN};
use gpupm_uapi::layout::{envelope_flags, Envelope};
use zerocopy::IntoBytes;

use crate::envelope::{open, OpenError, Tag};
use crate::schedule::Key;

/// Seals `q`'s counts in place with `seal` (the device's sealing of the
/// VM's next slot: encrypt in place, return envelope and tag) and marks
/// the answer sealed — and withheld when `seal` withheld it.
pub fn seal_ledger(q: &mut LedgerQuery, seal: impl FnOnce(&mut [u8]) -> (Envelope, Tag)) {
    let mut payload = counts_bytes(q);
    let (envelope, tag) = seal(&mut payload);
    set_counts_bytes(q, &payload);
    q.envelope = envelope;
    q.tag = tag;
    q.flags |= ledger_flags::SEALED;
    if envelope.flags & envelope_flags::WITHHELD != 0 {
        q.flags |= ledger_flags::WITHHELD;
    }
}

/// Opens a sealed ledger answer in place with the VM's key (a no-op for an
/// answer that is not sealed).
pub fn open_ledger(q: &mut LedgerQuery, vm_key: &Key) -> Result<(), OpenError> {
    if q.flags & ledger_flags::SEALED == 0 {
        return Ok(());
    }
    let mut payload = counts_bytes(q);
    open(vm_key, &q.envelope, &mut payload, &q.tag)?;
    set_counts_bytes(q, &payload);
    q.flags &= !ledger_flags::SEALED;
    Ok(())
}

fn counts_bytes(q: &LedgerQuery) -> [u8; LEDGER_SEALED_LEN] {
    let mut out = [0u8; LEDGER_SEALED_LEN];
    let third = LEDGER_SEALED_LEN / 3;
    out[..third].copy_from_slice(q.generated.as_bytes());
    out[third..2 * third].copy_from_slice(q.masked.as_bytes());
    out[2 * third..].copy_from_slice(q.remainder.as_bytes());
    out
}

fn set_counts_bytes(q: &mut LedgerQuery, bytes: &[u8; LEDGER_SEALED_LEN]) {
    let third = LEDGER_SEALED_LEN / 3;
    q.generated.as_mut_bytes().copy_from_slice(&bytes[..third]);
    q.masked
        .as_mut_bytes()
        .copy_from_slice(&bytes[third..2 * third]);
    q.remainder
        .as_mut_bytes()
        .copy_from_slice(&bytes[2 * third..]);
}

#[cfg(test)]
mod tests {
    use gpupm_uapi::ioctl::IOCTL_STRUCT_VERSION;
    use zerocopy::FromZeros;

    use super::*;
    use crate::envelope::{withheld, SessionCipher};

    fn answer() -> LedgerQuery {
        let mut q = LedgerQuery::new_zeroed();
        q.version = IOCTL_STRUCT_VERSION;
        q.generated[0] = 1;
        q.masked[7] = u64::MAX;
        q.remainder[63] = 31;
        q
    }

    #[test]
    fn a_sealed_answer_opens_under_its_key_only_and_round_trips() {
        let plain = answer();
        let mut q = plain;
        let c = SessionCipher::new(&[8; 32], 2, 77, 1);
        seal_ledger(&mut q, |p| c.seal(1, p));
        assert_eq!(q.flags, ledger_flags::SEALED);
        assert_ne!(
            (q.generated, q.masked, q.remainder),
            (plain.generated, plain.masked, plain.remainder)
        );
        assert_eq!(q.envelope.session(), 77);
        let mut wrong = q;
        assert_eq!(
            open_ledger(&mut wrong, &[9; 32]),
            Err(OpenError::Authentication)
        );
        let mut moved = q;
        moved.generated.swap(0, 1);
        assert_eq!(
            open_ledger(&mut moved, &[8; 32]),
            Err(OpenError::Authentication),
            "the counts are authenticated"
        );
        open_ledger(&mut q, &[8; 32]).unwrap();
        assert_eq!(
            q,
            LedgerQuery {
                envelope: q.envelope,
                tag: q.tag,
                ..plain
            }
        );
    }

    #[test]
    fn an_unsealed_answer_is_left_alone_and_a_withheld_one_says_so() {
        let plain = answer();
        let mut q = plain;
        open_ledger(&mut q, &[0; 32]).unwrap();
        assert_eq!(q, plain);
        seal_ledger(&mut q, |p| {
            p.fill(0);
            (withheld(2), [0; 16])
        });
        assert_eq!(q.flags, ledger_flags::SEALED | ledger_flags::WITHHELD);
        assert_eq!(q.generated, [0; 64]);
        assert_eq!(open_ledger(&mut q, &[8; 32]), Err(OpenError::Withheld));
    }
}
