//! `blocking::Lease`: a held lock, its fence, local validity, renew and
//! release (also on drop).

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::locker::Shared;
use crate::clock::now;
use crate::core::core::{Grant, LeaseId};
use crate::core::lease::{LeaseClock, LeaseEnd};
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::error::Error;

/// A lock held through a [`Locker`](super::Locker).
///
/// Pass [`fence`](Self::fence) to every store the lease protects. The
/// validity shown by [`is_valid`](Self::is_valid) and
/// [`remaining`](Self::remaining) is a conservative local estimate counted
/// from when the acquire (or last renew) was sent.
///
/// Dropping a lease releases it (best effort, blocking for one round trip);
/// call [`release`](Self::release) to learn the outcome.
pub struct Lease {
    shared: Arc<Shared>,
    id: LeaseId,
    fence: Fence,
    clock: Mutex<LeaseClock>,
    /// Serialises renew and release of this lease.
    op: Mutex<()>,
    replicas: AtomicU32,
    released: bool,
}

/// `replicas` before any replication check ran.
const NO_REPLICAS: u32 = u32::MAX;

impl Lease {
    pub(crate) fn new(shared: Arc<Shared>, grant: Grant) -> Self {
        Lease {
            shared,
            id: grant.lease,
            fence: grant.fence,
            clock: Mutex::new(grant.clock),
            op: Mutex::new(()),
            replicas: AtomicU32::new(NO_REPLICAS),
            released: false,
        }
    }

    /// The fencing token of this grant.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// Whether the lease is still held, by the local estimate. Once false
    /// because Redis reported it gone or taken, or a renew's outcome was
    /// unknown, it stays false.
    pub fn is_valid(&self) -> bool {
        self.clock.lock().is_valid(now())
    }

    /// The time left by the local estimate (zero when not valid).
    pub fn remaining(&self) -> Duration {
        self.clock.lock().remaining(now())
    }

    /// How many replicas acknowledged the last acquire or renew, when
    /// [`Config::min_replicas`](crate::Config::min_replicas) is set.
    pub fn replicas(&self) -> Option<u32> {
        match self.replicas.load(Ordering::SeqCst) {
            NO_REPLICAS => None,
            n => Some(n),
        }
    }

    pub(crate) fn set_replicas(&self, n: u32) {
        self.replicas
            .store(n.min(NO_REPLICAS - 1), Ordering::SeqCst);
    }

    /// The local deadline; `None` once ended (`Some(None)`: beyond any instant).
    pub(crate) fn valid_until(&self) -> Option<Option<std::time::Instant>> {
        self.clock.lock().valid_until()
    }

    /// The lease length this lease was granted with.
    pub(crate) fn lease_length(&self) -> Duration {
        self.clock.lock().lease()
    }

    /// Extends the lease to its full length, counted from now.
    ///
    /// A lease already seen expired or taken, or whose previous renew had
    /// an unknown outcome, is not sent again and reports `Expired` or
    /// `Conflict`: it never becomes valid again.
    ///
    /// # Errors
    ///
    /// `ProviderFailed` (not applied; the lease keeps its old deadline),
    /// `OutcomeUnknown` (the lease is no longer valid locally),
    /// `ShuttingDown` after the locker released it at shutdown.
    pub fn renew(&self) -> Result<RenewOutcome, Error> {
        let _serial = self.op.lock();
        let lease_ms = {
            let mut clock = self.clock.lock();
            match clock.ended() {
                Some(LeaseEnd::Conflict) => return Ok(RenewOutcome::Conflict),
                Some(_) => return Ok(RenewOutcome::Expired),
                None => {}
            }
            clock.renew_submitted(now());
            // Bounded by the lease validation (at most 15 digits of ms).
            clock.lease().as_millis() as u64
        };
        let call = self
            .shared
            .with_core(|core| core.renew_call(self.id, lease_ms));
        let call = match call {
            Ok(call) => call,
            Err(e) => {
                self.clock.lock().handle_release(None);
                return Err(e);
            }
        };
        let wait_cmd = self.shared.replication.map(|r| r.wait_cmd());
        let (reply, acks) =
            self.shared
                .commands
                .run_then(&call, &self.shared.counters, wait_cmd.as_ref());
        let (result, outcome) = self
            .shared
            .with_core(|core| core.handle_renew_reply(self.id, reply));
        self.clock.lock().handle_renew(result);
        if let (Ok(RenewOutcome::Renewed), Some(replication)) = (&outcome, self.shared.replication)
        {
            match replication.verdict(acks.unwrap_or(Ok(redis::Value::Int(0)))) {
                Ok(acked) => self.set_replicas(acked),
                Err(e) => {
                    drop(_serial);
                    // Not replicated enough to count as held.
                    let _ = self.release_now();
                    return Err(e);
                }
            }
        }
        outcome
    }

    /// Releases the lease: deletes the lock if it is still ours and notifies
    /// waiters.
    ///
    /// # Errors
    ///
    /// `ProviderFailed` or `OutcomeUnknown` when Redis failed (the token is
    /// then released again at shutdown, and the TTL ends it in any case);
    /// `ShuttingDown` when shutdown already released it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// use redlease::ReleaseOutcome;
    /// let lease = locker.acquire("job:42")?;
    /// match lease.release()? {
    ///     ReleaseOutcome::Released => {}
    ///     other => eprintln!("the lease had ended before its release: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<ReleaseOutcome, Error> {
        self.released = true;
        self.release_now()
    }

    fn release_now(&self) -> Result<ReleaseOutcome, Error> {
        let _serial = self.op.lock();
        let call = self.shared.with_core(|core| core.release_call(self.id));
        let result = match call {
            Ok(call) => {
                let reply = self.shared.commands.run(&call, &self.shared.counters);
                self.shared
                    .with_core(|core| core.handle_release_reply(self.id, reply))
            }
            Err(e) => self.already_released().unwrap_or(Err(e)),
        };
        self.clock
            .lock()
            .handle_release(result.as_ref().ok().copied());
        result
    }

    /// The outcome of a release the locker did on its own while running
    /// (after a failed replication check); `None` when shutdown did it.
    fn already_released(&self) -> Option<Result<ReleaseOutcome, Error>> {
        if self.shared.cell().read(|core| core.is_shutting_down()) {
            return None;
        }
        self.clock.lock().released_as().map(Ok)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(e) = self.release_now() {
            if !matches!(e, Error::ShuttingDown) {
                log::debug!(
                    target: "redlease",
                    "LOCK_RELEASE_FAILED: release on drop failed ({}); the TTL will end the lease",
                    e.code()
                );
            }
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("fence", &self.fence)
            .field("valid", &self.is_valid())
            .field("remaining", &self.remaining())
            .field("replicas", &self.replicas())
            .finish_non_exhaustive()
    }
}
