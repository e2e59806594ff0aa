//! `blocking::Lease`: a held lock, its fence, local validity, renew and
//! release (also on drop), each a shared operation driven on this thread.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::locker::Shared;
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::driver::held::Held;
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
#[must_use = "dropping a lease releases it at once"]
pub struct Lease {
    shared: Arc<Shared>,
    held: Held,
    /// Serialises renew and release of this lease.
    op: Mutex<()>,
    released: bool,
}

impl Lease {
    pub(crate) fn new(shared: Arc<Shared>, granted: Granted) -> Self {
        Lease {
            shared,
            held: Held::granted(granted),
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

    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
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
        let _serial = self.op.lock();
        self.shared.drive(Renew::new(&self.shared.state, &self.held))
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
        self.shared.drive(Release::new(&self.shared.state, &self.held))
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
