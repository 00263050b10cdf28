//! How one plain (non-transactional) call runs: it consumes a fault aimed
//! at its operation, is refused while it touches an item a transaction
//! holds, applies its write unless the fault prevents it, checks the
//! invariants and runs a hook aimed at it; and how a write whose answer was
//! lost is sent again, as the SDK does.

use std::time::Duration;

use super::MemoryStore;
use super::chaos::{Fault, Op};
use super::locks::{LockKey, conflict};
use super::stream::Stream;
use super::tables::Tables;
use crate::error::{CancelReason, StoreError};

impl MemoryStore {
    /// Runs one plain call: consumes a fault aimed at `op`, refuses it if
    /// it touches an item held by a transaction, applies `write` unless the
    /// fault prevents it, checks the invariants when it touches items (a
    /// write of counted items), then runs a hook aimed at `op`.
    pub(super) fn call<T>(
        &self,
        op: Op,
        touches: &[LockKey],
        write: impl FnOnce(&mut Tables, &mut Stream) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.call_with(op, touches, true, write)
    }

    /// A write sent as `resend` says ([`crate::store::sends`]): a call that
    /// draws [`Fault::AppliedThenResent`] is applied, then (for
    /// [`Resend::BySdk`](crate::store::Resend::BySdk)) sent again after
    /// [`super::Chaos::resend_delay`] without a fault of its own, and the caller
    /// gets the re-send's answer; a write sent once gets a 500.
    pub(super) async fn resendable(
        &self,
        op: Op,
        resend: crate::store::Resend,
        touches: &[LockKey],
        write: impl Fn(&mut Tables, &mut Stream) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let first = self.call(op, touches, &write);
        let delay = {
            let mut inner = self.inner.lock().unwrap();
            if inner.resend_pending.take() != Some(op) || resend == crate::store::Resend::Never {
                return first;
            }
            match inner.faults.chaos.as_mut() {
                Some((chaos, rng)) if !chaos.resend_delay.is_zero() => {
                    let max = u64::try_from(chaos.resend_delay.as_micros()).unwrap_or(u64::MAX);
                    Duration::from_micros(rng.u64(0..=max))
                }
                _ => Duration::ZERO,
            }
        };
        if delay.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(delay).await;
        }
        self.call_with(op, touches, false, &write)
    }

    fn call_with<T>(
        &self,
        op: Op,
        touches: &[LockKey],
        faults: bool,
        write: impl FnOnce(&mut Tables, &mut Stream) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut inner = self.inner.lock().unwrap();
        inner.calls.push(op);
        inner.stamp();
        let fault = if faults { inner.faults.next(op) } else { None };
        if matches!(
            fault,
            None | Some(Fault::AppliedThenUnavailable | Fault::AppliedThenConditionFailed | Fault::AppliedThenResent)
        ) && inner.locks.any_held(touches)
        {
            inner.locks.conflicts += 1;
            return Err(conflict("the item"));
        }
        let inner = &mut *inner;
        let result = match fault {
            Some(Fault::Unavailable) => return Err(StoreError::Unavailable("injected 500".into())),
            Some(Fault::Throttled) => return Err(StoreError::Transient("injected throttle".into())),
            Some(Fault::Rejected) => return Err(StoreError::Rejected("injected validation error".into())),
            Some(Fault::Conflict | Fault::ConflictOnCounter) if op == Op::Transact => {
                return Err(StoreError::Cancelled {
                    reasons: vec![CancelReason::TransactionConflict],
                });
            }
            Some(Fault::Conflict | Fault::ConflictOnCounter) => {
                return Err(StoreError::Transient("injected conflict".into()));
            }
            Some(Fault::AppliedThenUnavailable) => {
                let _ = write(&mut inner.tables, &mut inner.stream);
                Err(StoreError::Unavailable(
                    "injected 500 after the write was applied".into(),
                ))
            }
            Some(Fault::AppliedThenConditionFailed) => {
                let _ = write(&mut inner.tables, &mut inner.stream);
                Err(StoreError::ConditionFailed)
            }
            Some(Fault::AppliedThenResent) => {
                let applied = write(&mut inner.tables, &mut inner.stream);
                if applied.is_ok() {
                    inner.check(op);
                    inner.run_hook(op);
                }
                inner.resend_pending = Some(op);
                return Err(StoreError::Unavailable(
                    "injected 500 after the write was applied (the answer was lost)".into(),
                ));
            }
            // Only reads of the stream are cut short.
            Some(Fault::ShortRead) | None => write(&mut inner.tables, &mut inner.stream),
        };
        if !touches.is_empty() {
            inner.check(op);
        }
        if result.is_ok() {
            inner.run_hook(op);
        }
        result
    }
}
