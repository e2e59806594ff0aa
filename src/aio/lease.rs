//! `aio::Lease`: a held lock, its fence, local validity, renew and release,
//! each a shared operation driven inside the caller's future. Dropping it
//! never blocks: the token goes back to the locker.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::locker::Shared;
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::driver::held::Held;
use crate::driver::ops::{Granted, Release, Renew};
use crate::error::Error;

/// A lock held through an async [`Locker`](super::Locker).
///
/// Semantics as [`blocking::Lease`](crate::blocking::Lease), except that
/// dropping it does not release it at once: the locker releases its token
/// within one round trip when one of its waiters waits for the key, else at
/// its next operation or at shutdown (and the TTL ends it in any case).
#[must_use = "a dropped lease is released only later, by the locker"]
pub struct Lease {
    shared: Arc<Shared>,
    held: Held,
    /// Serialises renew and release of this lease.
    op: futures::lock::Mutex<()>,
    released: bool,
}

impl Lease {
    pub(crate) fn new(shared: Arc<Shared>, granted: Granted) -> Self {
        Lease {
            shared,
            held: Held::granted(granted),
            op: futures::lock::Mutex::new(()),
            released: false,
        }
    }

    /// The fencing token of this grant.
    pub fn fence(&self) -> Fence {
        self.held.fence()
    }

    /// Whether the lease is still held, by the local estimate.
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
    /// # Errors
    ///
    /// As [`blocking::Lease::renew`](crate::blocking::Lease::renew).
    pub async fn renew(&self) -> Result<RenewOutcome, Error> {
        let _serial = self.op.lock().await;
        self.shared
            .drive(Renew::new(&self.shared.state, &self.held))
            .await
    }

    /// Releases the lease: deletes the lock if it is still ours and notifies
    /// waiters.
    ///
    /// # Errors
    ///
    /// As [`blocking::Lease::release`](crate::blocking::Lease::release).
    pub async fn release(mut self) -> Result<ReleaseOutcome, Error> {
        let result = {
            let _serial = self.op.lock().await;
            self.shared
                .drive(Release::new(&self.shared.state, &self.held))
                .await
        };
        // Only now: a release future dropped midway hands the token back
        // to the locker like a dropped lease.
        self.released = true;
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            let id = self.held.id;
            self.shared
                .state
                .with_core(|core| core.abandon_lease(id));
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.held.debug(f)
    }
}
