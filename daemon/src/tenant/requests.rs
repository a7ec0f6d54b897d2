//! Decoding and answering the tenant ioctls.
//!
//! Pure functions of the request bytes, the caller's [`Identity`] and the
//! [`CounterView`]: nothing here touches the FUSE session, so the same
//! entry point ([`dispatch`]) serves the node and can be driven directly.
//!
//! Order of checks, the same for every ioctl: the command number, then the
//! shape of the argument (size, version, reserved fields, flags, id
//! ranges), then authorisation against the caller's own VMs, and only then
//! anything that depends on whether the scope exists.

use gpupm_client::config::Limits;
use gpupm_uapi::events;
use gpupm_uapi::ioc;
use gpupm_uapi::tenant::OpenSampling;
use gpupm_uapi::tenant::{
    counter_flags, scope, CtxEntry, EventInfo, ListContexts, OpenStream, ReadCounters, ReadRates,
    Whoami, LIST_PAGE, MAX_CALLER_VMS, RATE_SAMPLES, TENANT_IOCTLS, TENANT_IOC_EVENT_INFO,
    TENANT_IOC_KEY_STATE, TENANT_IOC_LIST_CONTEXTS, TENANT_IOC_MAGIC, TENANT_IOC_OPEN_SAMPLING,
    TENANT_IOC_OPEN_STREAM, TENANT_IOC_READ_COUNTERS, TENANT_IOC_READ_INSTANCE,
    TENANT_IOC_READ_INSTANCE_RATES, TENANT_IOC_READ_RATES, TENANT_IOC_REKEY, TENANT_IOC_WHOAMI,
    TENANT_STRUCT_VERSION,
};
use gpupm_uapi::tenant::{
    OpenRi, RiStatus, TENANT_IOC_OPEN_RI, TENANT_IOC_RI_EMIT, TENANT_IOC_RI_STATUS,
};
use gpupm_uapi::tenant::{RiResume, TENANT_IOC_RI_RESUME};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::answer::{
    check_no_flags, check_reserved, check_version, checked_events, ctx_state_code,
    fill_rate_samples, CounterAnswer,
};
use super::authz::{missing, recheck, resolve, shown};
pub use super::error::RequestError;
use super::instance::{read_instance, read_instance_rates};
use super::keys;
use super::policy::Identity;
use super::ranges;
use super::ri;
pub use super::ri::RiGrant;
use super::sampling::open_sampling;
pub use super::sampling::SamplingGrant;
use super::Served;
use crate::feed::FeedReceiver;
use crate::view::{Caller, CounterView, CtxId, DeltaSample, Scope, Totals, VmId};
use gpupm_uapi::tenant::{
    TENANT_IOC_ADD_RANGE, TENANT_IOC_READ_CALL_EDGES, TENANT_IOC_READ_CALL_KERNELS,
    TENANT_IOC_READ_CALL_STACKS, TENANT_IOC_READ_RANGES, TENANT_IOC_REMOVE_RANGE,
};

/// A stream session the caller was granted.
#[derive(Debug)]
pub struct StreamGrant {
    /// VM the session's records must belong to.
    pub vm: VmId,
    /// Context they must belong to, for a context scope.
    pub ctx: Option<CtxId>,
    /// Partition slot of the VM (for the plaintext record header).
    pub partition: u16,
    /// The feed.
    pub feed: FeedReceiver<DeltaSample>,
}

/// What an ioctl answers.
#[derive(Debug)]
pub enum Answer {
    /// Bytes to copy back (the whole argument struct, or nothing).
    Data(Vec<u8>),
    /// Turn the handle into a stream session.
    Stream(StreamGrant),
    /// Turn the handle into a sampling session.
    Sampling(SamplingGrant),
    /// Turn the handle into an RI session.
    Ri(RiGrant),
    /// RIEMIT this value into the handle's RI session.
    RiEmit(u32),
    /// Answer the handle's RI session status.
    RiStatus,
    /// Re-enable the handle's halted RI session (ABI 1.8).
    RiResume,
}

/// Answers ioctl `cmd` with argument bytes `input` (as the kernel copied
/// them in) for a caller with `identity`; `out_size` is how many bytes the
/// kernel will copy back.
pub fn dispatch(
    served: &Served,
    identity: &Identity,
    limits: &Limits,
    caller: Caller,
    cmd: u32,
    input: &[u8],
    out_size: u32,
) -> Result<Answer, RequestError> {
    let view = served.view.as_ref();
    let out = |bytes: &[u8]| -> Result<Answer, RequestError> {
        if usize::try_from(out_size).map_or(true, |n| n < bytes.len()) {
            return Err(RequestError::Invalid("output buffer too small"));
        }
        Ok(Answer::Data(bytes.to_vec()))
    };
    match cmd {
        TENANT_IOC_WHOAMI => out(whoami(view, identity, caller, decode(input)?)?.as_bytes()),
        TENANT_IOC_LIST_CONTEXTS => out(list_contexts(view, identity, decode(input)?)?.as_bytes()),
        TENANT_IOC_READ_COUNTERS => out(read_counters(view, identity, decode(input)?)?.as_bytes()),
        TENANT_IOC_READ_RATES => out(read_rates(view, identity, decode(input)?)?.as_bytes()),
        TENANT_IOC_OPEN_STREAM => open_stream(view, identity, *decode(input)?).map(Answer::Stream),
        TENANT_IOC_EVENT_INFO => out(event_info(decode(input)?)?.as_bytes()),
        TENANT_IOC_READ_INSTANCE => out(read_instance(view, identity, decode(input)?)?.as_bytes()),
        TENANT_IOC_READ_INSTANCE_RATES => {
            out(read_instance_rates(view, identity, decode(input)?)?.as_bytes())
        }
        TENANT_IOC_OPEN_SAMPLING => {
            if usize::try_from(out_size).map_or(true, |n| n < size_of::<OpenSampling>()) {
                return Err(RequestError::Invalid("output buffer too small"));
            }
            open_sampling(view, identity, decode(input)?).map(Answer::Sampling)
        }
        TENANT_IOC_OPEN_RI => {
            if usize::try_from(out_size).map_or(true, |n| n < size_of::<OpenRi>()) {
                return Err(RequestError::Invalid("output buffer too small"));
            }
            ri::open_ri(view, identity, decode(input)?).map(Answer::Ri)
        }
        TENANT_IOC_RI_EMIT => ri::emit(&*decode(input)?).map(Answer::RiEmit),
        TENANT_IOC_RI_STATUS => {
            if usize::try_from(out_size).map_or(true, |n| n < size_of::<RiStatus>()) {
                return Err(RequestError::Invalid("output buffer too small"));
            }
            ri::status(&*decode(input)?).map(|()| Answer::RiStatus)
        }
        TENANT_IOC_RI_RESUME => {
            if usize::try_from(out_size).map_or(true, |n| n < size_of::<RiResume>()) {
                return Err(RequestError::Invalid("output buffer too small"));
            }
            ri::resume(&*decode(input)?).map(|()| Answer::RiResume)
        }
        TENANT_IOC_KEY_STATE => out(keys::key_state(view, identity, decode(input)?)?.as_bytes()),
        TENANT_IOC_REKEY => {
            keys::rekey(view, identity, &*decode(input)?).map(|()| Answer::Data(Vec::new()))
        }
        gpupm_uapi::tenant::TENANT_IOC_CC_KEY_EXCHANGE => {
            out(keys::key_exchange(view, identity, decode(input)?)?.as_bytes())
        }
        gpupm_uapi::tenant::TENANT_IOC_CC_FINISH => {
            out(keys::finish(view, identity, decode(input)?)?.as_bytes())
        }
        TENANT_IOC_ADD_RANGE => {
            out(ranges::add_range(served, identity, limits, decode(input)?)?.as_bytes())
        }
        TENANT_IOC_READ_RANGES => {
            out(ranges::read_ranges(served, identity, decode(input)?)?.as_bytes())
        }
        TENANT_IOC_REMOVE_RANGE => ranges::remove_range(served, identity, &*decode(input)?)
            .map(|()| Answer::Data(Vec::new())),
        TENANT_IOC_READ_CALL_EDGES => {
            out(ranges::read_call_edges(served, identity, decode(input)?)?.as_bytes())
        }
        TENANT_IOC_READ_CALL_KERNELS => {
            out(ranges::read_call_kernels(served, identity, decode(input)?)?.as_bytes())
        }
        TENANT_IOC_READ_CALL_STACKS => {
            out(ranges::read_call_stacks(served, identity, decode(input)?)?.as_bytes())
        }
        // The type byte 'T' is shared with the legacy terminal ioctls
        // (0x54xx, no direction), which must stay ENOTTY.
        _ if ioc::ty(cmd) == TENANT_IOC_MAGIC
            && ioc::dir(cmd) != ioc::Dir::None
            && TENANT_IOCTLS
                .iter()
                .any(|&(_, known)| ioc::nr(known) == ioc::nr(cmd)) =>
        {
            Err(RequestError::Invalid(
                "wrong size or direction for a tenant ioctl",
            ))
        }
        _ => Err(RequestError::UnknownIoctl),
    }
}

/// Whether `cmd` reads (or writes) the device, a persisted file or a
/// device-backed plane: what a tenant's `device_reads_per_s` bucket is
/// asked for before it is answered, and pays for unless it was refused
/// for its shape or its scope (EINVAL, ENOTTY, EACCES: answered before
/// anything is read). Table lookups (`WHOAMI`, `LIST_CONTEXTS`,
/// `READ_RATES`, `EVENT_INFO`) and session reads are free.
pub fn reads_device(cmd: u32) -> bool {
    matches!(
        cmd,
        TENANT_IOC_READ_COUNTERS
            | TENANT_IOC_READ_INSTANCE
            | TENANT_IOC_OPEN_SAMPLING
            | TENANT_IOC_OPEN_RI
            | TENANT_IOC_RI_EMIT
            | TENANT_IOC_RI_STATUS
            | TENANT_IOC_RI_RESUME
            | TENANT_IOC_KEY_STATE
            | TENANT_IOC_REKEY
            | TENANT_IOC_ADD_RANGE
            | TENANT_IOC_READ_RANGES
            | TENANT_IOC_REMOVE_RANGE
            | TENANT_IOC_READ_CALL_EDGES
            | TENANT_IOC_READ_CALL_KERNELS
            | TENANT_IOC_READ_CALL_STACKS
    )
}

/// Decodes an argument struct; anything but exactly its size is EINVAL.
fn decode<T: FromBytes + KnownLayout + Immutable>(input: &[u8]) -> Result<Box<T>, RequestError> {
    T::read_from_bytes(input)
        .map(Box::new)
        .map_err(|_| RequestError::Invalid("argument size"))
}

fn whoami(
    view: &dyn CounterView,
    identity: &Identity,
    caller: Caller,
    arg: Box<Whoami>,
) -> Result<Box<Whoami>, RequestError> {
    check_version(arg.version)?;
    let mut vms = view.vms();
    vms.retain(|&vm| identity.may_see_vm(vm));
    vms.sort_unstable();
    vms.dedup();
    vms.truncate(MAX_CALLER_VMS);
    let mut ans = Box::new(Whoami::new_zeroed());
    ans.version = TENANT_STRUCT_VERSION;
    ans.admin = u32::from(identity.is_admin());
    ans.uid = caller.uid;
    ans.n_vms = u32::try_from(vms.len()).unwrap_or(0);
    ans.vms[..vms.len()].copy_from_slice(&vms);
    Ok(ans)
}

fn list_contexts(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<ListContexts>,
) -> Result<Box<ListContexts>, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    let r = resolve(view, identity, scope::VM, arg.vm, false)?;
    let Scope::Vm(vm) = r.scope else {
        return Err(RequestError::Internal("VM scope resolved to another kind"));
    };
    let mut ctxs = view.contexts(vm).ok_or_else(|| missing(identity))?;
    ctxs.retain(|c| shown(view, identity, c));
    ctxs.sort_unstable_by_key(|c| (c.ctx, c.created_cycle));
    let start = usize::try_from(arg.offset)
        .unwrap_or(usize::MAX)
        .min(ctxs.len());
    let page = &ctxs[start..ctxs.len().min(start.saturating_add(LIST_PAGE))];
    arg.total = u32::try_from(ctxs.len()).unwrap_or(u32::MAX);
    arg.count = u32::try_from(page.len()).unwrap_or(0);
    arg.ctxs = [CtxEntry::default(); LIST_PAGE];
    for (slot, c) in arg.ctxs.iter_mut().zip(page) {
        *slot = CtxEntry {
            ctx: c.ctx,
            state: ctx_state_code(c.state),
            created_cycle: c.created_cycle,
        };
    }
    Ok(arg)
}

fn read_counters(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<ReadCounters>,
) -> Result<Box<ReadCounters>, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    let n = checked_events(arg.n_events, &arg.events)?;
    let r = resolve(view, identity, arg.scope, arg.id, true)?;
    let totals = view.totals(r.scope).ok_or_else(|| missing(identity))?;
    recheck(view, identity, r)?;
    let answer = CounterAnswer::of(totals, &arg.events[..n])?;
    arg.flags = answer.flags;
    arg.commit_seq = answer.commit_seq;
    arg.cycle = answer.cycle;
    arg.values = answer.values;
    arg.sealed = answer.sealed;
    Ok(arg)
}

fn read_rates(
    view: &dyn CounterView,
    identity: &Identity,
    mut arg: Box<ReadRates>,
) -> Result<Box<ReadRates>, RequestError> {
    check_version(arg.version)?;
    check_reserved(arg.reserved)?;
    let max = usize::try_from(arg.max).unwrap_or(usize::MAX);
    if !(1..=RATE_SAMPLES).contains(&max) {
        return Err(RequestError::Invalid("max samples out of range"));
    }
    let r = resolve(view, identity, arg.scope, arg.id, false)?;
    let samples = view.recent(r.scope, max).ok_or_else(|| missing(identity))?;
    let sealed = matches!(view.totals(r.scope), Some(Totals::Sealed(_)))
        || samples.iter().any(|s| s.sealed.is_some());
    recheck(view, identity, r)?;
    arg.count = 0;
    arg.flags = 0;
    arg.clock_khz = view.clock_khz();
    arg.samples = FromZeros::new_zeroed();
    if sealed {
        arg.flags = counter_flags::SEALED;
        return Ok(arg);
    }
    let ctx = match r.scope {
        Scope::Ctx(c) => Some(c),
        _ => None,
    };
    arg.count = fill_rate_samples(&mut arg.samples, &samples, max, |s| {
        Some(s.vm) == r.vm && ctx.is_none_or(|c| s.ctx == c)
    });
    Ok(arg)
}

fn open_stream(
    view: &dyn CounterView,
    identity: &Identity,
    arg: OpenStream,
) -> Result<StreamGrant, RequestError> {
    check_version(arg.version)?;
    check_no_flags(arg.flags)?;
    let r = resolve(view, identity, arg.scope, arg.id, false)?;
    let vm =
        r.vm.ok_or(RequestError::Internal("stream scope without a VM"))?;
    let feed = view.subscribe(r.scope).ok_or_else(|| missing(identity))?;
    recheck(view, identity, r)?;
    let partition = view
        .vm_partition(vm)
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0);
    let ctx = match r.scope {
        Scope::Ctx(c) => Some(c),
        _ => None,
    };
    Ok(StreamGrant {
        vm,
        ctx,
        partition,
        feed,
    })
}

/// Copies `s` into a NUL-padded field, always leaving a terminating NUL.
fn padded<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N.saturating_sub(1));
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

fn event_info(arg: Box<EventInfo>) -> Result<Box<EventInfo>, RequestError> {
    check_version(arg.version)?;
    check_reserved(u32::from(arg.reserved))?;
    check_reserved(arg.reserved2)?;
    let info = u16::try_from(arg.id)
        .ok()
        .and_then(events::by_id)
        .ok_or(RequestError::Invalid("event id out of range"))?;
    let mut ans = arg;
    ans.unit_type = info.unit as u8;
    ans.multibit = u8::from(info.multibit);
    ans.scope = info.unit.scope().code();
    ans.name = padded(info.name);
    ans.measure = padded(info.measure);
    ans.description = padded(info.description);
    Ok(ans)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gpupm_uapi::events::MAX_EVENTS;

    use super::*;

    /// A device with no VMs at all.
    struct Empty;

    impl CounterView for Empty {
        fn vms(&self) -> Vec<VmId> {
            Vec::new()
        }
        fn vm_partition(&self, _: VmId) -> Option<u32> {
            None
        }
        fn contexts(&self, _: VmId) -> Option<Vec<crate::view::CtxInfo>> {
            None
        }
        fn ctx_vm(&self, _: CtxId) -> Option<VmId> {
            None
        }
        fn totals(&self, _: Scope) -> Option<Totals> {
            None
        }
        fn recent(&self, _: Scope, _: usize) -> Option<Vec<DeltaSample>> {
            None
        }
        fn subscribe(&self, _: Scope) -> Option<FeedReceiver<DeltaSample>> {
            None
        }
        fn clock_khz(&self) -> u32 {
            1
        }
    }

    fn errno(identity: &Identity, cmd: u32, input: &[u8]) -> i32 {
        let caller = Caller {
            uid: 7,
            gid: 7,
            pid: 0,
        };
        match dispatch(
            &Served::counters(Arc::new(Empty)),
            identity,
            &Limits::default(),
            caller,
            cmd,
            input,
            u32::MAX,
        ) {
            Ok(_) => 0,
            Err(e) => e.errno(),
        }
    }

    #[allow(clippy::cast_possible_truncation)]
    #[test]
    fn near_valid_commands_are_einval_and_foreign_ones_enotty() {
        let wrong_size = nix::request_code_readwrite!(TENANT_IOC_MAGIC, 0x00, 8) as u32;
        let wrong_dir =
            nix::request_code_read!(TENANT_IOC_MAGIC, 0x04, size_of::<OpenStream>()) as u32;
        let other_nr = nix::request_code_readwrite!(TENANT_IOC_MAGIC, 0x40, 8) as u32;
        let admin = Identity::Admin;
        assert_eq!(errno(&admin, wrong_size, &[0; 8]), libc::EINVAL);
        assert_eq!(errno(&admin, wrong_dir, &[]), libc::EINVAL);
        assert_eq!(errno(&admin, other_nr, &[0; 8]), libc::ENOTTY);
        assert_eq!(errno(&admin, 0x5401, &[]), libc::ENOTTY);
        assert_eq!(errno(&admin, TENANT_IOC_WHOAMI, &[1, 0, 0]), libc::EINVAL);
    }

    #[test]
    fn missing_scopes_are_enoent_for_the_admin_and_eacces_for_a_tenant() {
        let open = |identity: &Identity, arg: &OpenStream| {
            errno(identity, TENANT_IOC_OPEN_STREAM, arg.as_bytes())
        };
        let mut arg = OpenStream {
            version: TENANT_STRUCT_VERSION,
            scope: scope::VM,
            id: 5,
            flags: 0,
        };
        assert_eq!(open(&Identity::Admin, &arg), libc::ENOENT);
        assert_eq!(open(&Identity::Tenant(vec![5]), &arg), libc::EACCES);
        assert_eq!(open(&Identity::Tenant(vec![]), &arg), libc::EACCES);
        arg.scope = scope::CONTEXT;
        assert_eq!(open(&Identity::Admin, &arg), libc::ENOENT);
        assert_eq!(open(&Identity::Tenant(vec![5]), &arg), libc::EACCES);
        arg.id = 0;
        assert_eq!(open(&Identity::Tenant(vec![5]), &arg), libc::EINVAL);
        arg.id = 5;
        arg.flags = 1;
        assert_eq!(open(&Identity::Admin, &arg), libc::EINVAL);
    }

    #[test]
    fn instance_reads_check_shape_before_existence_and_hide_it_from_tenants() {
        use gpupm_uapi::tenant::{instance_flags, ReadInstance, ReadInstanceRates};

        let mut arg = ReadInstance::new_zeroed();
        arg.version = TENANT_STRUCT_VERSION;
        arg.scope = scope::CONTEXT;
        arg.id = 7;
        arg.created_cycle = 1234;
        let call = |identity: &Identity, a: &ReadInstance| {
            errno(identity, TENANT_IOC_READ_INSTANCE, a.as_bytes())
        };
        let tenant = Identity::Tenant(vec![1]);
        assert_eq!(call(&Identity::Admin, &arg), libc::ENOENT);
        assert_eq!(call(&tenant, &arg), libc::EACCES);
        assert_eq!(call(&Identity::Tenant(vec![]), &arg), libc::EACCES);
        arg.flags = instance_flags::LATEST;
        assert_eq!(call(&Identity::Admin, &arg), libc::ENOENT);
        assert_eq!(call(&tenant, &arg), libc::EACCES);
        for bad in [
            ReadInstance {
                flags: 1 << 7,
                ..arg
            },
            ReadInstance { reserved: 1, ..arg },
            ReadInstance {
                reserved2: 1,
                ..arg
            },
            ReadInstance { version: 2, ..arg },
            ReadInstance {
                scope: scope::VM,
                ..arg
            },
            ReadInstance { id: 0, ..arg },
            ReadInstance {
                id: u32::MAX,
                ..arg
            },
            ReadInstance {
                n_events: 65,
                ..arg
            },
            ReadInstance {
                n_events: 1,
                events: [u16::MAX; MAX_EVENTS],
                ..arg
            },
        ] {
            assert_eq!(call(&tenant, &bad), libc::EINVAL, "{bad:?}");
            assert_eq!(call(&Identity::Admin, &bad), libc::EINVAL, "{bad:?}");
        }
        let mut rates = ReadInstanceRates::new_zeroed();
        rates.version = TENANT_STRUCT_VERSION;
        rates.scope = scope::CONTEXT;
        rates.id = 7;
        rates.max = 1;
        let call = |identity: &Identity, a: &ReadInstanceRates| {
            errno(identity, TENANT_IOC_READ_INSTANCE_RATES, a.as_bytes())
        };
        assert_eq!(call(&Identity::Admin, &rates), libc::ENOENT);
        assert_eq!(call(&tenant, &rates), libc::EACCES);
        for bad in [
            ReadInstanceRates { max: 0, ..rates },
            ReadInstanceRates { max: 17, ..rates },
            ReadInstanceRates { flags: 2, ..rates },
            ReadInstanceRates {
                reserved: 1,
                ..rates
            },
            ReadInstanceRates {
                scope: scope::SYSTEM,
                ..rates
            },
        ] {
            assert_eq!(call(&tenant, &bad), libc::EINVAL);
        }
        assert_eq!(
            errno(&tenant, TENANT_IOC_READ_INSTANCE, &[0; 16]),
            libc::EINVAL
        );
    }

    #[test]
    fn padded_fields_keep_a_terminating_nul() {
        let f: [u8; 4] = padded("abcdef");
        assert_eq!(&f, b"abc\0");
        let g: [u8; 8] = padded("ab");
        assert_eq!(&g, b"ab\0\0\0\0\0\0");
    }

    #[test]
    fn every_catalogue_text_fits_its_field() {
        for e in events::CATALOGUE {
            assert!(
                e.name.len() < 32 && e.measure.len() < 16 && e.description.len() < 96,
                "{}",
                e.name
            );
        }
    }
}
