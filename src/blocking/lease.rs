//! `blocking::Lease`: a held lock, its fence, local validity, renew and
//! release (also on drop), each a shared operation driven on this thread.

use std::sync::Arc;

use parking_lot::Mutex;

use super::connection::Commands;
use super::drive::drive;
use super::locker::Shared;
use crate::core::outcome::{ReleaseOutcome, RenewOutcome};
use crate::driver::held::{lease_common, LeaseState};
use crate::driver::ops::{Granted, Release, Renew};
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
#[must_use = "if unused the lease is released at once"]
pub struct Lease(LeaseState<Commands, Mutex<()>>);

lease_common!(Lease);

impl Lease {
    pub(crate) fn new(shared: Arc<Shared>, granted: Granted) -> Self {
        Lease(LeaseState::new(shared, granted))
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
        let lease = &self.0;
        let _serial = lease.op.lock();
        drive(&lease.shared, Renew::new(&lease.shared.state, &lease.held))
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
        self.0.released = true;
        self.release_now()
    }

    fn release_now(&self) -> Result<ReleaseOutcome, Error> {
        let lease = &self.0;
        let _serial = lease.op.lock();
        drive(
            &lease.shared,
            Release::new(&lease.shared.state, &lease.held),
        )
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.0.released {
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
