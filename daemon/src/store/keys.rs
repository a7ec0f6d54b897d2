//! The device's key registers and key-exchange ioctls of confidential VMs,
//! as the tenant node's key requests reach them ([`VmKeys`] for [`Store`]).
//! The daemon moves only public bytes: blobs sealed under keys it does not
//! hold, and the two messages of the key exchange.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use gpupm_client::{ops, DevError};
use gpupm_uapi::cc::{Finish, KeyExchange};
use gpupm_uapi::regs::{self, vm_flags, MAX_VMS};
use nix::errno::Errno;

use super::Store;
use crate::view::{KeyError, KeyStatus, RekeyWords, VmId, VmKeys};

/// Key exchanges a VM may start at once.
pub const EXCHANGE_BURST: u32 = 8;
/// One more exchange becomes possible per this interval.
pub const EXCHANGE_REFILL: Duration = Duration::from_millis(250);

/// A token bucket per VM: each exchange costs the device a signature and
/// a Diffie–Hellman under its lock, so a tenant may not start them faster
/// than [`EXCHANGE_BURST`] at once and one per [`EXCHANGE_REFILL`] after.
/// Bounded: one entry per possible VM id.
#[derive(Debug)]
pub struct ExchangeBudget {
    buckets: Mutex<Vec<(u32, Option<Instant>)>>,
}

impl Default for ExchangeBudget {
    fn default() -> Self {
        ExchangeBudget {
            buckets: Mutex::new(vec![(EXCHANGE_BURST, None); MAX_VMS as usize]),
        }
    }
}

impl ExchangeBudget {
    /// Takes one exchange of VM `vm` at `now`; false when its bucket is
    /// empty.
    pub fn take(&self, vm: VmId, now: Instant) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let Some((tokens, since)) = buckets.get_mut(vm as usize) else {
            return false;
        };
        if let Some(t) = *since {
            let elapsed = now.saturating_duration_since(t);
            let refill = elapsed.as_millis() / EXCHANGE_REFILL.as_millis();
            let refill = u32::try_from(refill).unwrap_or(u32::MAX);
            if refill > 0 {
                *tokens = tokens.saturating_add(refill).min(EXCHANGE_BURST);
                *since = Some(t + EXCHANGE_REFILL * refill.min(EXCHANGE_BURST));
            }
        }
        if *tokens == 0 {
            return false;
        }
        if *tokens == EXCHANGE_BURST {
            *since = Some(now);
        }
        *tokens -= 1;
        true
    }
}

/// The device's answer to a key-exchange message, as a [`KeyError`].
fn exchange_error(e: DevError) -> KeyError {
    match e {
        DevError::Ioctl {
            source: Errno::EINVAL,
            ..
        } => KeyError::Refused,
        DevError::Ioctl {
            source: Errno::EBUSY,
            ..
        } => KeyError::SessionExists,
        DevError::Ioctl {
            source: Errno::ENODEV,
            ..
        } => KeyError::NoIdentity,
        other => other.into(),
    }
}

impl VmKeys for Store {
    fn key_status(&self, vm: VmId) -> Result<KeyStatus, KeyError> {
        let mut batch = [
            ops::read32(regs::vm(vm, regs::VM_FLAGS)),
            ops::read32(regs::vm(vm, regs::VM_KEY_EPOCH)),
            ops::read64(regs::vm(vm, regs::VM_KEY_SESSION)),
        ];
        self.dev.batch(&mut batch)?;
        let flags = ops::reg32(batch[0].value);
        Ok(KeyStatus {
            confidential: flags & vm_flags::CONFIDENTIAL != 0,
            established: flags & vm_flags::SESSION != 0,
            epoch: ops::reg32(batch[1].value),
            session: batch[2].value,
        })
    }

    fn commit_rekey(&self, vm: VmId, blob: &RekeyWords) -> Result<(), KeyError> {
        match self.dev.batch(&mut ops::rekey_writes(vm, blob)) {
            Ok(()) => Ok(()),
            Err(DevError::Ioctl {
                source: Errno::EINVAL,
                ..
            }) => Err(KeyError::Refused),
            Err(e) => Err(e.into()),
        }
    }

    fn key_exchange(&self, msg: &mut KeyExchange) -> Result<(), KeyError> {
        if !self.exchanges.take(msg.vm, Instant::now()) {
            return Err(KeyError::RateLimited);
        }
        self.dev.cc_key_exchange(msg).map_err(exchange_error)
    }

    fn finish(&self, msg: &mut Finish) -> Result<(), KeyError> {
        self.dev.cc_finish(msg).map_err(exchange_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_gets_its_burst_then_one_exchange_per_interval() {
        let budget = ExchangeBudget::default();
        let t0 = Instant::now();
        for i in 0..EXCHANGE_BURST {
            assert!(budget.take(3, t0), "exchange {i} of the burst");
        }
        assert!(!budget.take(3, t0), "the burst is spent");
        assert!(budget.take(4, t0), "another VM has its own bucket");
        assert!(!budget.take(3, t0 + EXCHANGE_REFILL / 2));
        assert!(budget.take(3, t0 + EXCHANGE_REFILL));
        assert!(!budget.take(3, t0 + EXCHANGE_REFILL));
        let later = t0 + EXCHANGE_REFILL * 100;
        for _ in 0..EXCHANGE_BURST {
            assert!(budget.take(3, later));
        }
        assert!(!budget.take(3, later), "refills stop at the burst");
        assert!(!budget.take(MAX_VMS, later), "ids out of range have none");
    }
}
