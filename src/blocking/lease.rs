//! `blocking::Lease`: a held lock, its fence, local validity, renew and
//! release (also on drop).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::locker::Shared;
use crate::core::core::Grant;
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::error::Error;
use crate::held::Held;

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
    held: Held,
    /// Serialises renew and release of this lease.
    op: Mutex<()>,
    released: bool,
}

impl Lease {
    pub(crate) fn new(shared: Arc<Shared>, grant: Grant) -> Self {
        Lease {
            shared,
            held: Held::new(grant),
            op: Mutex::new(()),
            released: false,
        }
    }

    /// The fencing token of this grant.
    pub fn fence(&self) -> Fence {
        self.held.fence()
    }

    /// Whether the lease is still held, by the local estimate. Once false
    /// because Redis reported it gone or taken, or a renew's outcome was
    /// unknown, it stays false.
    pub fn is_valid(&self) -> bool {
        self.held.is_valid()
    }

    /// The time left by the local estimate (zero when not valid).
    pub fn remaining(&self) -> Duration {
        self.held.remaining()
    }

    /// How many replicas acknowledged the last acquire or renew, when
    /// [`Config::min_replicas`](crate::Config::min_replicas) is set.
    pub fn replicas(&self) -> Option<u32> {
        self.held.replicas()
    }

    pub(crate) fn set_replicas(&self, n: u32) {
        self.held.set_replicas(n);
    }

    pub(crate) fn valid_until(&self) -> Option<Option<Instant>> {
        self.held.valid_until()
    }

    pub(crate) fn lease_length(&self) -> Duration {
        self.held.lease_length()
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
    /// `ReplicationFailed` (too few replicas acknowledged; the lease was
    /// released), `ShuttingDown` after the locker released it at shutdown.
    pub fn renew(&self) -> Result<RenewOutcome, Error> {
        let serial = self.op.lock();
        let lease_ms = match self.held.begin_renew() {
            Ok(ms) => ms,
            Err(outcome) => return Ok(outcome),
        };
        let id = self.held.id;
        let call = match self.shared.with_core(|core| core.renew_call(id, lease_ms)) {
            Ok(call) => call,
            Err(e) => {
                self.held.handle_release(&Err(e.duplicate()));
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
            .with_core(|core| core.handle_renew_reply(id, reply));
        self.held.handle_renew(result);
        if let Err(e) = self
            .held
            .check_renew_replication(&outcome, self.shared.replication, acks)
        {
            drop(serial);
            // Not replicated enough to count as held.
            let _ = self.release_now();
            return Err(e);
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
        let id = self.held.id;
        let result = match self.shared.with_core(|core| core.release_call(id)) {
            Ok(call) => {
                let reply = self.shared.commands.run(&call, &self.shared.counters);
                self.shared
                    .with_core(|core| core.handle_release_reply(id, reply))
            }
            Err(e) => {
                let shutting_down = self.shared.cell().read(|core| core.is_shutting_down());
                self.held.already_released(e, shutting_down)
            }
        };
        self.held.handle_release(&result);
        result
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
        self.held.debug(f)
    }
}
