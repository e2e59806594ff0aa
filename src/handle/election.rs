//! `Election<F>` and `Leadership<F>`: one leader per name, its term a
//! fence, its value readable by anyone (docs/PROTOCOL.md). A campaign is an
//! acquire of kind [`kind::Leader`] (waiting, lines, cancellation as for a
//! lock); a leadership is that lease, renewed by its keeper thread
//! (`keeper.rs`) until it is resigned, dropped or lost.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::keeper::Keeper;
use super::keeper_threads;
use super::kind;
use super::lease::Lease;
use super::locker::{Locker, SharedOf};
use super::observer::Observer;
use crate::clock::now;
use crate::config::AcquireOptions;
use crate::core::election::{
    classify_current, classify_proclaim, read_call, ElectNames, Leader, LeaderValue, ProclaimReply,
    Version,
};
use crate::core::lease::RenewResult;
use crate::core::names::{validate_key, KeyId, Want};
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::driver::ops::{Acquire, Single};

use crate::error::{Error, LostCause, Operation};
use crate::front::{Call, Front};
use crate::lost::Lost;

impl<F: Front> Locker<F> {
    /// A handle on the election `name`: candidates campaign to lead it,
    /// one leader at a time across every locker and process, each leader
    /// with a term (a fence) larger than every earlier leader's, and a
    /// value (its address, say) anyone can read with
    /// [`Election::leader`].
    ///
    /// The handle is cheap to clone and shares this locker's connections,
    /// waiting and shutdown. An election and a lock of the same name are
    /// unrelated.
    ///
    /// # Errors
    ///
    /// `InvalidKey` for a bad name (the rules of a key).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let election = locker.election("billing-scheduler")?;
    /// let leadership = election.campaign(b"host-a:4242")?;   // aio: .await?
    /// println!("leading in term {}", leadership.term());
    /// // ... lead, passing leadership.term() to every store as the fence ...
    /// leadership.resign()?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: &str) -> Result<Election<F>, Error> {
        validate_key(name, self.config().max_key_bytes)?;
        Ok(Election {
            shared: self.shared().clone(),
            names: ElectNames::new(
                &self.config().namespace,
                KeyId::named(name, self.config().key_hash_tags),
            ),
            name: name.into(),
        })
    }
}

/// An election: candidates campaign, one of them leads. Made by
/// [`Locker::election`].
///
/// Candidates of one locker wait in a FIFO line and only the head sends
/// attempts; a resign notifies the candidates at once, a leader that
/// lapsed (killed, paused) is replaced as soon as its lease expires.
/// Across lockers no order is promised.
///
/// # Leading while a closure runs: `with_leadership`
///
/// `with_leadership(value, options, f)` (blocking: a closure; async: an
/// async closure) campaigns with `value` (waiting per `options`), runs
/// `f(&leadership, &lost)` while leading and resigns afterwards, whether
/// `f` returned `Ok`, `Err` or panicked (the panic resumes after the
/// resign). The leadership is renewed by its keeper whatever `options`'
/// `extend` says. Not leading comes back as `E::from(Busy / WaitTimeout /
/// ...)` and `f` is not called; a failed resign does not change the result
/// (it is logged). On a loss, a blocking `f` must stop soon after `lost`
/// fires (it cannot be pre-empted); an async `f`'s future is dropped.
#[derive(Clone)]
pub struct Election<F: Front> {
    shared: SharedOf<F>,
    pub(super) names: ElectNames,
    name: Arc<str>,
}

/// The result of a campaign on front end `F`.
type Campaign<'a, F> = Call<'a, F, Result<Leadership<F>, Error>>;

impl<F: Front> Election<F> {
    /// Campaigns with `value` until this candidate leads, waiting up to
    /// the config's `wait`.
    ///
    /// # Errors
    ///
    /// `ValueTooLarge` for a value longer than
    /// [`Config::max_value_bytes`](crate::Config::max_value_bytes) (nothing
    /// is sent); otherwise as [`Locker::acquire`]: `WaitTimeout` with the
    /// leader's remaining time, `QueueFull`, `ShuttingDown`, Redis
    /// failures.
    pub fn campaign(&self, value: impl AsRef<[u8]>) -> Campaign<'_, F> {
        self.campaign_with(value, AcquireOptions::new())
    }

    /// Campaigns once: `Busy` when someone leads (or a candidate of this
    /// locker waits already).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign), with `Busy` for `WaitTimeout`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(election: &redlease::blocking::Election) -> Result<(), redlease::Error> {
    /// match election.try_campaign(b"host-a:4242") {
    ///     Ok(leadership) => println!("leading in term {}", leadership.term()),
    ///     Err(e) if e.is_busy() => println!("someone else leads"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_campaign(&self, value: impl AsRef<[u8]>) -> Campaign<'_, F> {
        self.campaign_with(value, AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Campaigns with per-call options (wait, lease, and on the blocking
    /// front end a cancel handle; an async campaign is cancelled by
    /// dropping its future).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign), plus `Cancelled` and
    /// `InvalidConfig` for a lease out of bounds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(election: &redlease::blocking::Election) -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::AcquireOptions;
    ///
    /// let forever = AcquireOptions::new().wait(Duration::MAX);
    /// let leadership = election.campaign_with(b"host-a:4242", forever)?;
    /// # drop(leadership); Ok(()) }
    /// ```
    pub fn campaign_with(
        &self,
        value: impl AsRef<[u8]>,
        options: AcquireOptions,
    ) -> Campaign<'_, F> {
        let max = self.shared.state.config.max_value_bytes;
        let value = match LeaderValue::checked(value.as_ref(), max) {
            Ok(value) => value,
            Err(e) => return F::ready(Err(e)),
        };
        keeper_threads::warm();
        let (shared, name, len) = (&self.shared, &self.name, value.as_bytes().len());
        let start = move || {
            let value = Some(value);
            Acquire::start(&shared.state, name, Want::Leader, value, options, now()).map_err(Err)
        };
        F::run(shared, None, start, move |granted| {
            granted.map(|granted| Leadership::new(Lease::new(shared.clone(), granted), len))
        })
    }

    /// The current leader, as one atomic read finds it: `None` while
    /// nobody leads (also while a leader that lapsed without resigning
    /// waits to be replaced: a lapsed leader is never reported). Anyone
    /// may call it, also a locker that never campaigns (it runs as
    /// `EVALSHA_RO`, so a read-only user can).
    ///
    /// # Errors
    ///
    /// `ProviderFailed` or `OutcomeUnknown` when Redis failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(election: &redlease::blocking::Election) -> Result<(), redlease::Error> {
    /// match election.leader()? {                 // aio: .leader().await?
    ///     Some(leader) => println!("term {}: {} bytes of value", leader.term, leader.value.len()),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn leader(&self) -> Call<'_, F, Result<Option<Leader>, Error>> {
        let (state, call) = (&self.shared.state, read_call(&self.names, None));
        let start = move || Ok(Single::new(state, Operation::Read, call, classify_current));
        F::run(&self.shared, None, start, |read| read.map(|now| now.leader))
    }

    /// Every change of this election, in order, from now on: an
    /// [`Observer`] (blocking: an `Iterator`; async: a `Stream`) of
    /// [`Observation`](crate::Observation)s. The first item is the current
    /// state (`resync: true`); then every new leader, proclaim and vacancy,
    /// a leader that lapsed followed by its vacancy; after a gap (more than
    /// 64 changes between two reads, a log that lost entries) only the
    /// current state, again marked `resync`. It never yields a leader that
    /// lapsed as current, never an error (failed reads are retried with a
    /// backoff), and ends only at the locker's shutdown.
    ///
    /// The observer reads the election when a notification announces a
    /// change of it (it keeps the locker's notification subscription while
    /// it lives, as a waiting candidate does) and when the subscription is
    /// confirmed again after a loss; its safety net is a read every
    /// `notify_poll_interval` and at the leader's expiry (a lapse publishes
    /// nothing). One read-only script per read, as [`leader`](Self::leader).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(election: &redlease::blocking::Election) {
    /// for change in election.observe() {              // aio: a Stream
    ///     match change.leader {
    ///         Some(leader) => println!("{}: term {} leads", change.version, leader.term),
    ///         None => println!("{}: nobody leads", change.version),
    ///     }
    /// #   break;
    /// }
    /// # }
    /// ```
    pub fn observe(&self) -> Observer<F> {
        Observer::new(self.clone(), self.names.id)
    }

    pub(crate) fn shared(&self) -> &SharedOf<F> {
        &self.shared
    }
}

// Hand-written: the name must not show.
impl<F: Front> std::fmt::Debug for Election<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election").finish_non_exhaustive()
    }
}

/// This candidate leads: the leadership of an [`Election`], a lease of kind
/// [`kind::Leader`] whose [`term`](Self::term) is its fence.
///
/// A keeper thread of the library renews it every lease/2 (as
/// `with_lock`'s `extend` does, `with_lock`'s docs) from the campaign's return until
/// it is resigned, dropped or lost; [`lost`](Self::lost) fires when a
/// renewal finds it expired or taken, or when its local deadline passes
/// unconfirmed. Pass the term to every store the leader writes to: a store
/// that checks fences refuses a deposed leader that still believes it
/// leads.
///
/// Dropping it resigns: the keeper thread sends the resign (one round
/// trip, on both front ends, without any further call of the program).
/// Call [`resign`](Self::resign) to learn the outcome.
///
/// Its `Debug` shows the term, the version, the validity and the value's
/// length, never the value or a token.
#[must_use = "if unused the leadership is resigned at once"]
pub struct Leadership<F: Front> {
    /// `None` once resigned or handed to the keeper by `drop`.
    lease: Option<Lease<F, kind::Leader>>,
    /// `None` when no keeper thread could start (`lost` fired at once).
    keeper: Option<Arc<Keeper<F>>>,
    lost: Lost,
    /// The last version this leadership wrote, and its value's length.
    last: Mutex<(Version, usize)>,
}

impl<F: Front> Leadership<F> {
    fn new(lease: Lease<F, kind::Leader>, value_len: usize) -> Self {
        let lost = lease.held().lost_signal(true);
        let keeper = Keeper::start(&lease, &lost);
        let version = Version::new(lease.fence().get(), 0);
        Leadership {
            lease: Some(lease),
            keeper,
            lost,
            last: Mutex::new((version, value_len)),
        }
    }

    fn lease(&self) -> &Lease<F, kind::Leader> {
        // Taken only by `resign` and `drop`, which consume the leadership.
        self.lease.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// The term: this leadership's fence, larger than every earlier
    /// leader's of this election (also after Redis lost its data, under
    /// docs/PROTOCOL.md §3's conditions).
    pub fn term(&self) -> Fence {
        self.lease().fence()
    }

    /// The version of this leader's value: `(term, 0)` as campaigned, one
    /// more `seq` per [`proclaim`](Self::proclaim).
    pub fn version(&self) -> Version {
        self.last.lock().0
    }

    /// Whether the leadership still holds, by the local estimate (see
    /// [`Lease::is_valid`]).
    pub fn is_valid(&self) -> bool {
        self.lease().is_valid()
    }

    /// The time left by the local estimate, as the keeper's renewals moved
    /// it (zero when not valid).
    pub fn remaining(&self) -> Duration {
        self.lease().remaining()
    }

    /// The loss signal: fires when the leadership is lost (a renewal found
    /// it expired or taken, or the local deadline passed without a
    /// confirmed renewal). Stop acting as the leader soon after. Clone it
    /// freely; on the async front end [`Lost::wait`] completes on a loss.
    pub fn lost(&self) -> &Lost {
        &self.lost
    }

    /// Publishes a new value for this leadership, in the same term; the
    /// change is logged and notified in one script. Proclaims of one
    /// leadership are serialised, and a proclaim sent again after an
    /// unknown outcome is recognised: never logged twice.
    ///
    /// # Errors
    ///
    /// `ValueTooLarge` (nothing sent); `LockLost` when Redis found the
    /// leadership expired or taken (`lost` fires too); `ProviderFailed` or
    /// `OutcomeUnknown` when Redis failed (the leadership is kept);
    /// `ShuttingDown` after shutdown resigned it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(leadership: &redlease::blocking::Leadership) -> Result<(), redlease::Error> {
    /// let version = leadership.proclaim(b"host-a:4243")?;   // aio: .await?
    /// assert_eq!(version.term, leadership.term().get());
    /// # Ok(()) }
    /// ```
    pub fn proclaim(&self, value: impl AsRef<[u8]>) -> Call<'_, F, Result<Version, Error>> {
        let lease = self.lease();
        let max = lease.shared().state.config.max_value_bytes;
        let value = match LeaderValue::checked(value.as_ref(), max) {
            Ok(value) => value,
            Err(e) => return F::ready(Err(e)),
        };
        let (state, id) = (&lease.shared().state, lease.held().id);
        let len = value.as_bytes().len();
        // Under the lease's serial lock: `last` is exact.
        let start = move || {
            let last = self.last.lock().0;
            let call = state.with_core(|core| core.proclaim_call(id, &value, last));
            let proclaim = |call| Single::new(state, Operation::Proclaim, call, classify_proclaim);
            call.map(proclaim).map_err(Err)
        };
        let serial = Some(lease.serial());
        F::run(lease.shared(), serial, start, move |reply| match reply? {
            ProclaimReply::Proclaimed(version) => {
                *self.last.lock() = (version, len);
                Ok(version)
            }
            ProclaimReply::Ended(outcome) => Err(self.end(outcome)),
        })
    }

    /// Redis found the leadership over: it is never valid again, its
    /// keeper stops, `lost` fires; the error a proclaim returns.
    fn end(&self, outcome: RenewOutcome) -> Error {
        self.lease()
            .held()
            .handle_renew(RenewResult::Outcome(outcome), false);
        if let Some(keeper) = &self.keeper {
            keeper.stop();
        }
        let cause = || match outcome {
            RenewOutcome::Conflict => LostCause::Conflict,
            _ => LostCause::Expired,
        };
        self.lost.fire(cause());
        Error::LockLost { cause: cause() }
    }

    /// Resigns: stops the renewals, then ends the leadership in Redis if it
    /// is still this one's, logs the vacancy and notifies the candidates,
    /// which campaign at once. A resign never fires `lost`.
    ///
    /// # Errors
    ///
    /// As [`Lease::release`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(leadership: redlease::blocking::Leadership) -> Result<(), redlease::Error> {
    /// use redlease::ReleaseOutcome;
    ///
    /// match leadership.resign()? {                 // aio: .resign().await?
    ///     ReleaseOutcome::Released => {}
    ///     other => eprintln!("the leadership had ended before: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn resign(mut self) -> Call<'static, F, Result<ReleaseOutcome, Error>> {
        self.lost.disarm();
        let wake_keeper = self.keeper.as_ref().map(Keeper::stop_until_dropped);
        match self.lease.take() {
            Some(lease) => F::keeping(lease.release(), wake_keeper),
            None => F::ready(Err(Error::ShuttingDown)),
        }
    }
}

/// Drop = resign, by the keeper thread (within one round trip).
impl<F: Front> Drop for Leadership<F> {
    fn drop(&mut self) {
        self.lost.disarm();
        let Some(lease) = self.lease.take() else {
            return;
        };
        match &self.keeper {
            Some(keeper) => keeper.resign(lease),
            // No keeper: the lease's own drop releases it.
            None => drop(lease),
        }
    }
}

impl<F: Front> std::fmt::Debug for Leadership<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (version, value_len) = *self.last.lock();
        let mut d = f.debug_struct("Leadership");
        if let Some(lease) = &self.lease {
            d.field("term", &lease.fence())
                .field("valid", &lease.is_valid())
                .field("remaining", &lease.remaining());
        }
        d.field("version", &version)
            .field("value_len", &value_len)
            .field("lost", &self.lost.is_lost())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::Blocking;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn elections_leaderships_and_observers_cross_threads() {
        send_sync::<Election<Blocking>>();
        send_sync::<Leadership<Blocking>>();
        send::<Observer<Blocking>>();
        #[cfg(feature = "aio")]
        {
            use crate::front::Async;
            send_sync::<Election<Async>>();
            send_sync::<Leadership<Async>>();
            send::<Observer<Async>>();
        }
    }
}
