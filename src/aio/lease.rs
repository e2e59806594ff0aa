//! `aio::Lease`: a held lock, its fence, local validity, renew and release.
//! Dropping it never blocks: the token goes back to the locker.

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

/// A lock held through an async [`Locker`](super::Locker).
///
/// Semantics as [`blocking::Lease`](crate::blocking::Lease), except that
/// dropping it does not release it at once: the locker releases its token at
/// its next operation or at shutdown (and the TTL ends it in any case).
pub struct Lease {
    shared: Arc<Shared>,
    id: LeaseId,
    fence: Fence,
    clock: Mutex<LeaseClock>,
    /// Serialises renew and release of this lease.
    op: futures::lock::Mutex<()>,
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
            op: futures::lock::Mutex::new(()),
            replicas: AtomicU32::new(NO_REPLICAS),
            released: false,
        }
    }

    /// The fencing token of this grant.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// Whether the lease is still held, by the local estimate.
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
    /// # Errors
    ///
    /// As [`blocking::Lease::renew`](crate::blocking::Lease::renew).
    pub async fn renew(&self) -> Result<RenewOutcome, Error> {
        let _serial = self.op.lock().await;
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
        let call = match self
            .shared
            .with_core_no_start(|core| core.renew_call(self.id, lease_ms))
        {
            Ok(call) => call,
            Err(e) => {
                self.clock.lock().handle_release(None);
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
            .with_core_no_start(|core| core.handle_renew_reply(self.id, reply));
        self.clock.lock().handle_renew(result);
        if let (Ok(RenewOutcome::Renewed), Some(replication)) = (&outcome, self.shared.replication)
        {
            if let Err(e) = replication
                .verdict(acks.unwrap_or(Ok(redis::Value::Int(0))))
                .map(|acked| self.set_replicas(acked))
            {
                drop(_serial);
                // Not replicated enough to count as held.
                self.release_by_token().await;
                return Err(e);
            }
        }
        outcome
    }

    /// Releases after a failed replication check, keeping `self` usable.
    async fn release_by_token(&self) {
        let _serial = self.op.lock().await;
        if let Ok(call) = self
            .shared
            .with_core_no_start(|core| core.release_call(self.id))
        {
            let reply = self.shared.commands.run(&call, &self.shared.counters).await;
            let result = self
                .shared
                .with_core_no_start(|core| core.handle_release_reply(self.id, reply));
            self.clock.lock().handle_release(result.ok());
        }
    }

    /// Releases the lease: deletes the lock if it is still ours and notifies
    /// waiters.
    ///
    /// # Errors
    ///
    /// As [`blocking::Lease::release`](crate::blocking::Lease::release).
    pub async fn release(mut self) -> Result<ReleaseOutcome, Error> {
        self.released = true;
        let _serial = self.op.lock().await;
        self.shared.maintain().await;
        let result = match self
            .shared
            .with_core_no_start(|core| core.release_call(self.id))
        {
            Ok(call) => {
                let reply = self.shared.commands.run(&call, &self.shared.counters).await;
                self.shared
                    .with_core_no_start(|core| core.handle_release_reply(self.id, reply))
            }
            // Released on its own after a failed replication check, unless
            // shutdown did it.
            Err(e) => match self.shared.cell().read(|core| core.is_shutting_down()) {
                false => self.clock.lock().released_as().map(Ok).unwrap_or(Err(e)),
                true => Err(e),
            },
        };
        self.clock
            .lock()
            .handle_release(result.as_ref().ok().copied());
        result
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            self.shared
                .with_core_no_start(|core| core.abandon_lease(self.id));
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
