//! `aio::Lease`: a held lock, its fence, local validity, renew and release,
//! each a shared operation driven inside the caller's future. Dropping it
//! never blocks: the token goes back to the locker.

use std::sync::Arc;

use super::connection::Commands;
use super::drive::drive;
use super::locker::Shared;
use crate::core::outcome::{ReleaseOutcome, RenewOutcome};
use crate::driver::held::{lease_common, LeaseState};
use crate::driver::ops::{Granted, Release, Renew};
use crate::error::Error;

/// A lock held through an async [`Locker`](super::Locker).
///
/// Semantics as [`blocking::Lease`](crate::blocking::Lease), except that
/// dropping it does not release it at once: the locker releases its token
/// within one round trip when one of its waiters waits for the key, else at
/// its next operation or at shutdown (and the TTL ends it in any case).
#[must_use = "if unused the lease goes back to the locker, which releases it soon after"]
pub struct Lease(LeaseState<Commands, futures::lock::Mutex<()>>);

lease_common!(Lease);

impl Lease {
    pub(crate) fn new(shared: Arc<Shared>, granted: Granted) -> Self {
        Lease(LeaseState::new(shared, granted))
    }

    /// Extends the lease to its full length, counted from now.
    ///
    /// # Errors
    ///
    /// As [`blocking::Lease::renew`](crate::blocking::Lease::renew).
    pub async fn renew(&self) -> Result<RenewOutcome, Error> {
        let lease = &self.0;
        let _serial = lease.op.lock().await;
        drive(&lease.shared, Renew::new(&lease.shared.state, &lease.held)).await
    }

    /// Releases the lease: deletes the lock if it is still ours and notifies
    /// waiters.
    ///
    /// # Errors
    ///
    /// As [`blocking::Lease::release`](crate::blocking::Lease::release).
    pub async fn release(mut self) -> Result<ReleaseOutcome, Error> {
        let result = {
            let lease = &self.0;
            let _serial = lease.op.lock().await;
            drive(
                &lease.shared,
                Release::new(&lease.shared.state, &lease.held),
            )
            .await
        };
        // Only now: a release future dropped midway hands the token back
        // to the locker like a dropped lease.
        self.0.released = true;
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.0.released {
            let id = self.0.held.id;
            self.0.shared.state.with_core(|core| core.abandon_lease(id));
        }
    }
}
