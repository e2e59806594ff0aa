//! `aio::Lease`: a held lock, its fence, local validity, renew and release.
//! Dropping it never blocks: the token goes back to the locker.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::locker::Shared;
use crate::core::core::Grant;
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::error::Error;
use crate::held::Held;

/// A lock held through an async [`Locker`](super::Locker).
///
/// Semantics as [`blocking::Lease`](crate::blocking::Lease), except that
/// dropping it does not release it at once: the locker releases its token at
/// its next operation or at shutdown (and the TTL ends it in any case).
pub struct Lease {
    shared: Arc<Shared>,
    held: Held,
    /// Serialises renew and release of this lease.
    op: futures::lock::Mutex<()>,
    released: bool,
}

impl Lease {
    pub(crate) fn new(shared: Arc<Shared>, grant: Grant) -> Self {
        Lease {
            shared,
            held: Held::new(grant),
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
    /// # Errors
    ///
    /// As [`blocking::Lease::renew`](crate::blocking::Lease::renew).
    pub async fn renew(&self) -> Result<RenewOutcome, Error> {
        let serial = self.op.lock().await;
        let lease_ms = match self.held.begin_renew() {
            Ok(ms) => ms,
            Err(outcome) => return Ok(outcome),
        };
        let id = self.held.id;
        let call = match self
            .shared
            .with_core_no_start(|core| core.renew_call(id, lease_ms))
        {
            Ok(call) => call,
            Err(e) => {
                self.held.handle_release(&Err(e.duplicate()));
                return Err(e);
            }
        };
        let wait_cmd = self.shared.replication.map(|r| r.wait_cmd());
        let (reply, acks) = self
            .shared
            .commands
            .run_then(&call, &self.shared.counters, wait_cmd.as_ref())
            .await;
        let (result, outcome) = self
            .shared
            .with_core_no_start(|core| core.handle_renew_reply(id, reply));
        self.held.handle_renew(result);
        if let Err(e) = self
            .held
            .check_renew_replication(&outcome, self.shared.replication, acks)
        {
            drop(serial);
            // Not replicated enough to count as held.
            let _ = self.release_now().await;
            return Err(e);
        }
        outcome
    }

    /// Releases the lease: deletes the lock if it is still ours and notifies
    /// waiters.
    ///
    /// # Errors
    ///
    /// As [`blocking::Lease::release`](crate::blocking::Lease::release).
    pub async fn release(mut self) -> Result<ReleaseOutcome, Error> {
        self.released = true;
        self.shared.maintain().await;
        self.release_now().await
    }

    async fn release_now(&self) -> Result<ReleaseOutcome, Error> {
        let _serial = self.op.lock().await;
        let id = self.held.id;
        let result = match self.shared.with_core_no_start(|core| core.release_call(id)) {
            Ok(call) => {
                let reply = self.shared.commands.run(&call, &self.shared.counters).await;
                self.shared
                    .with_core_no_start(|core| core.handle_release_reply(id, reply))
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
        if !self.released {
            let id = self.held.id;
            self.shared
                .with_core_no_start(|core| core.abandon_lease(id));
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.held.debug(f)
    }
}
