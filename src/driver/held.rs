//! The state both front ends' `Lease` types share: the grant, its local
//! clock and the replication count, with the bookkeeping around renew and
//! release that does not depend on how the command is sent.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::now;
use crate::core::core::{Grant, LeaseId};
use crate::core::lease::{LeaseClock, LeaseEnd, RenewResult};
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::driver::metrics::HoldTimer;
use crate::driver::ops::Granted;
use crate::driver::state::Shared;
use crate::error::Error;
use crate::lost::Lost;

/// `replicas` before any replication check ran.
const NO_REPLICAS: u32 = u32::MAX;

pub(crate) struct Held {
    pub(crate) id: LeaseId,
    fence: Fence,
    slot: Option<u32>,
    clock: Mutex<LeaseClock>,
    replicas: AtomicU32,
    /// The hold time's metric (feature `metrics`).
    hold: HoldTimer,
}

impl Held {
    fn new(grant: Grant, hold: HoldTimer) -> Self {
        Held {
            id: grant.lease,
            fence: grant.fence,
            slot: grant.slot,
            clock: Mutex::new(grant.clock),
            replicas: AtomicU32::new(NO_REPLICAS),
            hold,
        }
    }

    /// A lease as an acquire handed it out, with its replication count.
    pub(crate) fn granted(granted: Granted) -> Self {
        let held = Held::new(granted.grant, granted.hold);
        if let Some(n) = granted.replicas {
            held.set_replicas(n);
        }
        held
    }

    pub(crate) fn fence(&self) -> Fence {
        self.fence
    }

    /// The semaphore slot of a permit; `None` for a lock.
    pub(crate) fn slot(&self) -> Option<u32> {
        self.slot
    }

    pub(crate) fn is_valid(&self) -> bool {
        self.clock.lock().is_valid(now())
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.clock.lock().remaining(now())
    }

    pub(crate) fn replicas(&self) -> Option<u32> {
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
            Some(LeaseEnd::Conflict) => return Err(RenewOutcome::Conflict),
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
        if retrying {
            clock.handle_renew_retrying(result);
        } else {
            clock.handle_renew(result);
        }
    }

    /// Records a release's result; the lease is never valid afterwards.
    pub(crate) fn handle_release(&self, result: &Result<ReleaseOutcome, Error>) {
        self.hold.released(result);
        self.clock
            .lock()
            .handle_release(result.as_ref().ok().copied());
    }

    /// The loss signal of a `with_lock` closure on this lease (armed only
    /// with `extend`).
    pub(crate) fn lost_signal(&self, armed: bool) -> Lost {
        Lost::new(
            armed,
            self.valid_until().flatten(),
            self.hold.lost_counter(),
        )
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

    /// `Debug` of a lease: what it is worth to know, never its key or token.
    /// (Also `Held`'s own `Debug`.)
    pub(crate) fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slot {
            Some(_) => self.debug_as(f, "Permit", "fence"),
            None => self.debug_as(f, "Lease", "fence"),
        }
    }

    /// As [`debug`](Self::debug), for the type `name` whose grant number is
    /// called `number` (a read lease's is its epoch).
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
        d.field(number, &self.fence)
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
        let clock = self.clock.get_mut();
        self.hold.dropped(|now| !clock.is_valid(now));
    }
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.debug(f)
    }
}

/// The state of a front end's `Lease`: its locker's shared state (`C`: the
/// front end's connections), the grant's bookkeeping, the lock (`M`) that
/// serialises its renew and release, and whether it was released on
/// purpose. The two `Lease` types wrap it and differ only in how they send.
#[derive(Debug)]
pub(crate) struct LeaseState<C, M> {
    pub(crate) shared: Arc<Shared<C>>,
    pub(crate) held: Held,
    pub(crate) op: M,
    pub(crate) released: bool,
}

impl<C, M: Default> LeaseState<C, M> {
    pub(crate) fn new(shared: Arc<Shared<C>>, granted: Granted) -> Self {
        LeaseState {
            shared,
            held: Held::granted(granted),
            op: M::default(),
            released: false,
        }
    }
}

/// The read-only half of a lease's API and its `Debug`, the same on both
/// front ends' `Lease(LeaseState<..>)` types.
macro_rules! lease_common {
    ($lease:ident) => {
        impl $lease {
            /// The fencing token of this grant.
            pub fn fence(&self) -> $crate::Fence {
                self.0.held.fence()
            }

            /// Whether the lease is still held, by the local estimate. Once
            /// false because Redis reported it gone or taken, or a renew's
            /// outcome was unknown, it stays false.
            pub fn is_valid(&self) -> bool {
                self.0.held.is_valid()
            }

            /// The time left by the local estimate (zero when not valid).
            pub fn remaining(&self) -> std::time::Duration {
                self.0.held.remaining()
            }

            /// How many replicas acknowledged the last acquire or renew,
            /// when [`Config::min_replicas`](crate::Config::min_replicas) is
            /// set.
            pub fn replicas(&self) -> Option<u32> {
                self.0.held.replicas()
            }

            pub(crate) fn held(&self) -> &$crate::driver::held::Held {
                &self.0.held
            }

            pub(crate) fn shared(&self) -> &std::sync::Arc<Shared> {
                &self.0.shared
            }
        }

        impl std::fmt::Debug for $lease {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.held.debug(f)
            }
        }
    };
}
pub(crate) use lease_common;

/// The read-only half of a permit's API, its `Debug` and its semaphore
/// handle's, the same on both front ends' `Permit(Lease)` and
/// `Semaphore { shared, key, permits }` types.
macro_rules! permit_common {
    ($permit:ident, $semaphore:ident) => {
        impl $permit {
            /// Which permit this is, in `0..permits`.
            pub fn slot(&self) -> u32 {
                // Every permit grant names its slot (the core's classification).
                self.0.held().slot().unwrap_or_default()
            }

            /// The fencing token of this grant, strictly increasing per slot.
            pub fn fence(&self) -> $crate::Fence {
                self.0.fence()
            }
        }

        $crate::driver::held::guard_common!($permit, "Permit", "fence");

        impl $semaphore {
            /// The number of permits this handle acquires from.
            pub fn permits(&self) -> u32 {
                self.permits
            }

            fn want(&self) -> $crate::core::names::Want {
                $crate::core::names::Want::Permit {
                    permits: self.permits,
                }
            }
        }

        // Hand-written: the key must not show.
        impl std::fmt::Debug for $semaphore {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($semaphore))
                    .field("permits", &self.permits)
                    .finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use permit_common;

/// The read-only half of the API of a read-write lease's two guards
/// (`ReadLease(Lease)` with `epoch`, `WriteLease(Lease)` with `fence`),
/// their `Debug`, and the `RwLock { shared, key }` handle's `Debug`, the
/// same on both front ends.
macro_rules! rw_common {
    ($rw:ident, $read:ident, $write:ident) => {
        impl $read {
            /// The epoch: the latest writer fence when this read was
            /// granted. A write derived from this read is current only
            /// while no newer writer committed (see [`fenced`](crate::fenced)).
            pub fn epoch(&self) -> $crate::Fence {
                self.0.fence()
            }
        }

        impl $write {
            /// The fencing token of this write lease, strictly increasing
            /// per key.
            pub fn fence(&self) -> $crate::Fence {
                self.0.fence()
            }
        }

        $crate::driver::held::guard_common!($read, "ReadLease", "epoch");
        $crate::driver::held::guard_common!($write, "WriteLease", "fence");

        // Hand-written: the key must not show.
        impl std::fmt::Debug for $rw {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($rw)).finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use rw_common;

/// Validity, replicas and `Debug` of a guard that wraps a front end's
/// `Lease` (`$guard(Lease)`): a permit, a read or a write lease. `$name`
/// and `$number` name the type and its grant number in the `Debug`.
macro_rules! guard_common {
    ($guard:ident, $name:literal, $number:literal) => {
        impl $guard {
            /// Whether the lease is still held, by the local estimate.
            pub fn is_valid(&self) -> bool {
                self.0.is_valid()
            }

            /// The time left by the local estimate (zero when not valid).
            pub fn remaining(&self) -> std::time::Duration {
                self.0.remaining()
            }

            /// How many replicas acknowledged the last acquire or renew,
            /// when [`Config::min_replicas`](crate::Config::min_replicas) is
            /// set.
            pub fn replicas(&self) -> Option<u32> {
                self.0.replicas()
            }
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.held().debug_as(f, $name, $number)
            }
        }
    };
}
pub(crate) use guard_common;
