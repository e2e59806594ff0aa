//! `Lease<F, K>`: one held grant of any kind (a lock, a permit, a read or a
//! write lease) on either front end: its number, local validity, renew and
//! release (also on drop), each a shared operation its front end drives.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::kind::{self, Fenced, Kind};
use super::locker::SharedOf;
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::driver::held::Held;
use crate::driver::ops::{Granted, Release, Renew};

use crate::error::Error;
use crate::front::{Call, Front};

/// A held lease of kind `K` through a locker of front end `F`:
/// [`blocking::Lease`](crate::blocking::Lease) is `Lease<Blocking>` (a
/// lock), [`blocking::Permit`](crate::blocking::Permit) is
/// `Lease<Blocking, kind::Permit>`, and so on; the `aio` aliases name the
/// same with `Async`.
///
/// Pass its fence (a lock's, a permit's or a write lease's
/// [`fence`](Self::fence), a read lease's [`epoch`](Self::epoch)) to every
/// store the lease protects. The validity shown by
/// [`is_valid`](Self::is_valid) and [`remaining`](Self::remaining) is a
/// conservative local estimate counted from when the acquire (or last
/// renew) was sent.
///
/// Dropping a lease releases it: on [`Blocking`](crate::front::Blocking) at
/// once (one round trip, best effort); on [`Async`](crate::front::Async)
/// without blocking, by handing its token back to the locker, which
/// releases it within one round trip when one of its waiters waits for the
/// key, else at its next operation or at shutdown. The TTL ends it in any
/// case. Call [`release`](Self::release) to learn the outcome.
///
/// # Keeping it alive: `keep_alive`
///
/// `keep_alive(f)` (blocking: a closure; async: an async closure) keeps
/// the lease alive while `f` runs, exactly as `with_lock` with `extend`
/// does (see [`Locker`](crate::Locker#work-while-holding-with_lock-with_permit-with_read-with_write-with_all)),
/// and returns what `f` returns; the lease stays held afterwards: release
/// it (to learn the [`ReleaseOutcome`]) or drop it. It serves a caller that
/// acquires and releases by itself (to show progress while it waits, or to
/// report how the release went) but wants `with_lock`'s renewals. Renewal
/// stops before `keep_alive` returns, also when `f` panics. A clone of
/// `lost` keeps telling, after the return, whether the lease was lost while
/// it was kept alive (a renewal under way when `f` returned may still have
/// found it gone).
#[must_use = "if unused the lease is released at once (async: soon after, by its locker)"]
pub struct Lease<F: Front, K: Kind = kind::Lock> {
    state: LeaseState<F>,
    kind: PhantomData<fn() -> K>,
}

/// The state of a lease that does not depend on its kind: its locker's
/// shared state, the grant's bookkeeping, the lock that serialises its
/// renewals, and whether its release finished.
pub(crate) struct LeaseState<F: Front> {
    pub(crate) shared: SharedOf<F>,
    /// Shared with an election's keeper thread, which renews a leadership.
    pub(crate) held: Arc<Held>,
    pub(crate) serial: F::Serial,
    released: bool,
}

impl<F: Front> LeaseState<F> {
    /// The release finished: dropping this state does nothing more.
    pub(crate) fn finished(&mut self) {
        self.released = true;
    }

    /// The operation that releases this lease, for the front end to drive.
    pub(crate) fn release_op(&self) -> Release<'_> {
        Release::new(&self.shared.state, &self.held)
    }
}

impl<F: Front> Drop for LeaseState<F> {
    fn drop(&mut self) {
        if !self.released {
            F::dropped(self);
        }
    }
}

impl<F: Front, K: Kind> Lease<F, K> {
    pub(crate) fn new(shared: SharedOf<F>, granted: Granted) -> Self {
        Lease {
            state: LeaseState {
                shared,
                held: Arc::new(Held::granted(granted)),
                serial: F::Serial::default(),
                released: false,
            },
            kind: PhantomData,
        }
    }

    /// Whether the lease is still held, by the local estimate. Once false
    /// because Redis reported it gone or taken, or a renew's outcome was
    /// unknown, it stays false.
    pub fn is_valid(&self) -> bool {
        self.state.held.is_valid()
    }

    /// The time left by the local estimate (zero when not valid). A lock
    /// handed over by another process's release starts with less than the
    /// lease, the part of the grant's claim window left, and has the full
    /// lease once the locker extended it, an eighth of the way through
    /// (docs/PROTOCOL.md §4.3).
    pub fn remaining(&self) -> Duration {
        self.state.held.remaining()
    }

    /// How many replicas acknowledged the last acquire or renew, when
    /// [`Config::min_replicas`](crate::Config::min_replicas) is set.
    pub fn replicas(&self) -> Option<u32> {
        self.state.held.replicas()
    }

    /// Extends the lease to its full length, counted from now.
    ///
    /// A lease already seen expired or taken, or whose previous renew had
    /// an unknown outcome, is not sent again and reports `Expired` or
    /// `Conflict`: it never becomes valid again. A reader that expired is
    /// never renewed back.
    ///
    /// # Errors
    ///
    /// `ProviderFailed` (not applied; the lease keeps its old deadline),
    /// `OutcomeUnknown` (the lease is no longer valid locally),
    /// `ReplicationFailed` (too few replicas acknowledged; the lease was
    /// released), `ShuttingDown` after the locker released it at shutdown.
    pub fn renew(&self) -> Call<'_, F, Result<RenewOutcome, Error>> {
        let state = &self.state;
        let renew = move || Ok(Renew::new(&state.shared.state, &state.held, false));
        F::run(&state.shared, Some(&state.serial), renew, |outcome| outcome)
    }

    /// Releases the lease: deletes it in Redis if it is still ours and
    /// notifies the key's waiters. On `Async`, a release future dropped
    /// midway hands the token back to the locker like a dropped lease.
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
    ///
    /// let lease = locker.acquire("job:42")?;
    /// match lease.release()? {          // aio: lease.release().await?
    ///     ReleaseOutcome::Released => {}
    ///     other => eprintln!("the lease had ended before its release: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Call<'static, F, Result<ReleaseOutcome, Error>> {
        F::release(self.state)
    }

    /// The bookkeeping, shared with a thread that renews the lease (an
    /// election's keeper).
    pub(crate) fn held(&self) -> &Arc<Held> {
        &self.state.held
    }

    pub(crate) fn shared(&self) -> &SharedOf<F> {
        &self.state.shared
    }

    /// The lock that serialises this lease's calls (an election's
    /// proclaims).
    pub(crate) fn serial(&self) -> &F::Serial {
        &self.state.serial
    }
}

impl<F: Front, K: Fenced> Lease<F, K> {
    /// The fencing token of this grant: strictly increasing per key (per
    /// slot for a permit).
    pub fn fence(&self) -> Fence {
        self.state.held.fence
    }
}

impl<F: Front> Lease<F, kind::Permit> {
    /// Which permit of its semaphore this is, in `0..permits`. A store the
    /// permit protects checks `(slot, fence)`: it keeps a high-water fence
    /// per slot (see [`fenced`](crate::fenced)).
    pub fn slot(&self) -> u32 {
        // Every permit grant names its slot (the core's classification).
        self.state.held.slot.unwrap_or_default()
    }
}

impl<F: Front> Lease<F, kind::Read> {
    /// The epoch: the latest writer fence when this read was granted. A
    /// write derived from this read is current only while no newer writer
    /// committed (see [`fenced`](crate::fenced)).
    pub fn epoch(&self) -> Fence {
        self.state.held.fence
    }
}

/// What it is worth to know of a lease, never its key or token.
impl<F: Front, K: Kind> std::fmt::Debug for Lease<F, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.state.held.debug_as(f, K::NAME, K::NUMBER)
    }
}
