//! The bookkeeping of a held lease of any kind: the grant, its local clock
//! and the replication count, with what renew and release record, none of
//! which depends on how the command is sent.

use std::fmt;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::now;
use crate::core::core::LeaseId;
use crate::core::lease::{RenewResult, SharedClock};
use crate::core::multi::KeyFences;
use crate::core::names::KeyId;
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::driver::metrics::HoldTimer;
use crate::driver::ops::Granted;
use crate::error::Error;
use crate::lost::Lost;

pub(crate) struct Held {
    pub(crate) id: LeaseId,
    pub(crate) fence: Fence,
    /// The semaphore slot of a permit; `None` for a lock.
    pub(crate) slot: Option<u32>,
    /// A multi-key lease's keys and fences, in its caller's order.
    multi: Option<KeyFences>,
    /// Shared with the core while it extends a grant taken without its
    /// claim.
    clock: SharedClock,
    /// `None` before any replication check ran.
    replicas: Mutex<Option<u32>>,
    /// The hold time's metric (feature `metrics`).
    hold: HoldTimer,
}

impl Held {
    /// A lease as an acquire handed it out, with its replication count.
    pub(crate) fn granted(granted: Granted) -> Self {
        let (grant, replicas) = (granted.grant, granted.replicas);
        Held {
            id: grant.lease,
            fence: grant.fence,
            slot: grant.slot,
            multi: grant.multi,
            clock: grant.clock,
            replicas: Mutex::new(replicas),
            hold: granted.hold,
        }
    }

    /// A multi-key lease's fences, in its caller's order (empty for the
    /// other kinds).
    pub(crate) fn fences(&self) -> &[Fence] {
        self.multi.as_ref().map_or(&[], |(_, fences)| fences)
    }

    /// A multi-key lease's fence of the key whose digest is `id`.
    pub(crate) fn fence_of(&self, id: KeyId) -> Option<Fence> {
        let (members, fences) = self.multi.as_ref()?;
        let i = members.iter().position(|m| *m == id)?;
        fences.get(i).copied()
    }

    pub(crate) fn is_valid(&self) -> bool {
        self.clock.lock().is_valid(now())
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.clock.lock().remaining(now())
    }

    pub(crate) fn replicas(&self) -> Option<u32> {
        *self.replicas.lock()
    }

    pub(crate) fn set_replicas(&self, n: u32) {
        *self.replicas.lock() = Some(n);
    }

    /// The local deadline; `None` once ended (`Some(None)`: beyond any instant).
    pub(crate) fn valid_until(&self) -> Option<Option<Instant>> {
        self.clock.lock().valid_until()
    }

    /// The lease length this lease was granted with.
    pub(crate) fn lease_length(&self) -> Duration {
        self.clock.lock().lease()
    }

    /// Starts a renew at `now`: the lease in ms to send, or the outcome at
    /// once for a lease that already ended (it is never sent again, so it
    /// never becomes valid again).
    pub(crate) fn begin_renew(&self, now: Instant) -> Result<u64, RenewOutcome> {
        let mut clock = self.clock.lock();
        match clock.ended() {
            Some(Some(ReleaseOutcome::Conflict)) => return Err(RenewOutcome::Conflict),
            Some(_) => return Err(RenewOutcome::Expired),
            None => {}
        }
        clock.renew_submitted(now);
        // Bounded by the lease validation (at most 15 digits of ms).
        Ok(clock.lease().as_millis() as u64)
    }

    pub(crate) fn handle_renew(&self, result: RenewResult, retrying: bool) {
        if let RenewResult::Outcome(outcome) = result {
            self.hold.renewed(outcome);
        }
        let mut clock = self.clock.lock();
        match retrying {
            true => clock.handle_renew_retrying(result),
            false => clock.handle_renew(result),
        }
    }

    /// Records a release's result; the lease is never valid afterwards.
    pub(crate) fn handle_release(&self, result: &Result<ReleaseOutcome, Error>) {
        self.hold.released(result);
        let outcome = result.as_ref().ok().copied();
        self.clock.lock().handle_release(outcome);
    }

    /// The loss signal of a `with_lock` closure on this lease (armed only
    /// with `extend`).
    pub(crate) fn lost_signal(&self, armed: bool) -> Lost {
        let until = self.valid_until().flatten();
        Lost::new(armed, until, self.hold.lost_counter())
    }

    /// What `release` reports when the core no longer tracks the lease: the
    /// outcome of the release the locker made on its own (after a failed
    /// replication check) while running, or `no_call` (shutdown did it).
    pub(crate) fn already_released(
        &self,
        no_call: Error,
        shutting_down: bool,
    ) -> Result<ReleaseOutcome, Error> {
        match self.clock.lock().released_as() {
            Some(outcome) if !shutting_down => Ok(outcome),
            _ => Err(no_call),
        }
    }

    /// `Debug` of a lease, as the type `name` whose grant number is called
    /// `number` (a read lease's is its epoch): what it is worth to know,
    /// never its key or token.
    pub(crate) fn debug_as(
        &self,
        f: &mut fmt::Formatter<'_>,
        name: &str,
        number: &str,
    ) -> fmt::Result {
        let mut d = f.debug_struct(name);
        if let Some(slot) = self.slot {
            d.field("slot", &slot);
        }
        match &self.multi {
            Some((_, fences)) => d.field(number, fences),
            None => d.field(number, &self.fence),
        }
        .field("valid", &self.is_valid())
        .field("remaining", &self.remaining())
        .field("replicas", &self.replicas())
        .finish_non_exhaustive()
    }
}

/// A lease that ends without a release, renew or loss seen: `dropped`, or
/// `expired` when its local deadline had passed.
impl Drop for Held {
    fn drop(&mut self) {
        let clock = self.clock.lock();
        self.hold.dropped(|now| !clock.is_valid(now));
    }
}
