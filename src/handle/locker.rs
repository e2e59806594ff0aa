//! `Locker<F>`: a lease client on either front end. Everything but how it
//! opens its connections (per front end: `Front::open` in
//! `src/blocking/front.rs` and `src/aio/front.rs`) is written here once:
//! acquire, the kinds' handles, stats and shutdown.

use std::sync::Arc;
use std::time::Duration;

use super::kind::Kind;
use super::lease::Lease;
use crate::clock::now;
use crate::config::{AcquireOptions, Config};
use crate::core::names::Want;
use crate::driver::ops::{Acquire, Shutdown};
use crate::driver::state::{Connections, Shared};
use crate::error::Error;
use crate::front::{Call, Front};
use crate::stats::Stats;

/// A locker's shared state on front end `F`. An alias, so that a handle
/// holding it derives `Clone` with no bound but `F: Clone`.
pub(crate) type SharedOf<F> = Arc<Shared<<F as Front>::Commands>>;

/// A lease client for one Redis server, a Cluster or the primary Sentinel
/// names: [`blocking::Locker`](crate::blocking::Locker) (`Locker<Blocking>`)
/// for std threads, `aio::Locker` (`Locker<Async>`) for futures on any
/// executor. Both have the same methods; on `aio` each returns a future.
///
/// Share one locker among all threads or tasks of a process: its waiters
/// for one key form a FIFO line and only the head sends attempts, so the
/// locker sends at most one acquire per key at a time however many wait.
/// While anyone waits, one subscriber thread listens for release
/// notifications, which wake the head at once; safety polls cover lost
/// notifications. A waiter whose attempt fails keeps waiting and tries
/// again with a short backoff while its wait lasts.
///
/// # Fairness
///
/// Waiters of one locker for one key are served in arrival order. Across
/// lockers and processes, with [`Config::handover`] (the default) a lock
/// goes to waiting lockers in the order they started waiting
/// (docs/PROTOCOL.md §4); semaphores and read-write leases promise no order
/// across lockers.
///
/// # Work while holding: `with_lock`, `with_permit`, `with_read`, `with_write`, `with_all`
///
/// Each acquires, runs the caller's closure (blocking: `FnOnce`; async: an
/// async closure) as `f(&lease, &lost)`, and releases the lease afterwards
/// whether `f` returned `Ok`, `Err` or panicked (the panic resumes after the
/// release). It returns what `f` returns; `f`'s error type only needs
/// `From<Error>`, the shape of diesel's `transaction`: not obtaining the
/// lease comes back as `E::from(Busy / WaitTimeout / ...)` and `f` is not
/// called. A failed release does not change the result; it is logged
/// (`LOCK_RELEASE_FAILED`) and the TTL ends the lease.
///
/// With [`WithLock::extend`](crate::WithLock::extend) the lease is renewed
/// to its full length every lease/2 (counted from when the acquire, then
/// each renewal, was sent) while `f` runs: by one scoped thread joined
/// before the call returns (blocking; if no thread can be started, `lost`
/// fires at once and `f` still runs), or inside the same future, selected
/// against `f`'s (async; never spawned, and an extension in flight finishes
/// before the release). A renewal that fails with a Redis error is sent
/// again after a short backoff while the lease has time left. `lost` fires
/// with [`Error::LockLost`] when a renewal finds the lease expired or taken,
/// or when the local deadline passes without a confirmed renewal; `f` should
/// then stop soon. Renewal stops before the release, so a release never
/// looks like a loss. If an async `with_lock` future is itself dropped, the
/// lease goes back to the locker like any dropped lease.
/// [`Lease::keep_alive`] gives the same renewals to a lease the caller
/// acquired and releases itself.
///
/// The same for every kind, on both front ends (async: an `async` closure,
/// and `.await` the call):
///
/// ```no_run
/// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
/// use redlease::WithLock;
///
/// let pool = locker.semaphore("api-quota", 3)?;
/// pool.with_permit(WithLock::new().extend(true), |permit, lost| {
///     // call the API, passing (permit.slot(), permit.fence()) along
///     Ok::<_, redlease::Error>(!lost.is_lost())
/// })?;
/// locker.rw_lock("doc:7")?.with_write(WithLock::new(), |write, _lost| {
///     // save, passing write.fence() to the store
///     Ok::<_, redlease::Error>(write.fence())
/// })?;
/// locker.with_all(&["account:7", "account:9"], WithLock::new(), |lease, _lost| {
///     // debit 7 with lease.fence_of("account:7"), credit 9 with its fence
///     Ok::<_, redlease::Error>(lease.fences().len())
/// })?;
/// # Ok(()) }
/// ```
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use redlease::{blocking::Locker, Config};
///
/// let config = Config::new("my-service").lease(Duration::from_secs(10));
/// let locker = Locker::connect("redis://127.0.0.1:6379/0", config)?;
/// let lease = locker.acquire("job:42")?;      // aio: .acquire("job:42").await?
/// println!("holding job:42 with fence {}", lease.fence());
/// lease.release()?;
/// locker.shutdown()?;
/// # Ok::<(), redlease::Error>(())
/// ```
// `Debug` shows the shared state's: the namespace, never an address.
#[derive(Debug)]
pub struct Locker<F: Front> {
    shared: SharedOf<F>,
}

// A panic in the caller's code never leaves a locker half-updated: the
// locker runs no user code while it holds its internal locks, and its
// parking_lot locks do not poison. So a locker (and `&Locker`) may cross
// `catch_unwind`, as `std::sync::Mutex` may (`tests/api_conveniences.rs`).
impl<F: Front> std::panic::UnwindSafe for Locker<F> {}
impl<F: Front> std::panic::RefUnwindSafe for Locker<F> {}

impl<F: Front> Locker<F> {
    pub(crate) fn from_shared(shared: SharedOf<F>) -> Self {
        Locker { shared }
    }

    pub(crate) fn shared(&self) -> &SharedOf<F> {
        &self.shared
    }

    /// The configuration this locker runs with.
    pub fn config(&self) -> &Config {
        &self.shared.state.config
    }

    /// Acquires `key`, waiting up to the config's `wait`.
    ///
    /// # Errors
    ///
    /// `InvalidKey`; `Busy` (wait zero) or `WaitTimeout`, both with the
    /// holder's remaining time when known; `QueueFull`; `TooManyLeases`;
    /// `ShuttingDown`; `ProviderFailed` or `OutcomeUnknown` when Redis
    /// failed until the wait ended (or at once with wait zero). After an
    /// unknown outcome the token is released by token at the next
    /// operation.
    pub fn acquire<'a>(&'a self, key: &'a str) -> Call<'a, F, Result<Lease<F>, Error>> {
        self.acquire_with(key, AcquireOptions::new())
    }

    /// Acquires `key` with per-call options (wait, lease, and on the
    /// blocking front end a cancel handle; an async acquire is cancelled
    /// by dropping its future: the waiter leaves its line without
    /// disturbing it, and a grant Redis may have made after the drop is
    /// released by token).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), plus `Cancelled` and `InvalidConfig`
    /// for a lease out of bounds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::AcquireOptions;
    ///
    /// match locker.acquire_with("report", AcquireOptions::new().wait(Duration::ZERO)) {
    ///     Ok(lease) => { /* do the work */ lease.release()?; }
    ///     Err(e) if e.code() == "LOCK_BUSY" => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn acquire_with<'a>(
        &'a self,
        key: &'a str,
        options: AcquireOptions,
    ) -> Call<'a, F, Result<Lease<F>, Error>> {
        acquire_kind::<F, _>(&self.shared, key, Want::Lock, options)
    }

    /// Tries once to acquire `key`, without waiting (like `flock -n`):
    /// the same as `acquire_with(key, AcquireOptions::new().wait(Duration::ZERO))`.
    ///
    /// # Errors
    ///
    /// `Busy` when someone else holds the lock ([`Error::is_busy`], with
    /// the holder's remaining time when known); otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// match locker.try_acquire("report") {
    ///     Ok(lease) => { /* do the work */ lease.release()?; }
    ///     Err(e) if e.is_busy() => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire<'a>(&'a self, key: &'a str) -> Call<'a, F, Result<Lease<F>, Error>> {
        self.acquire_with(key, AcquireOptions::new().wait(Duration::ZERO))
    }

    /// A snapshot of this locker's counters.
    pub fn stats(&self) -> Stats {
        self.shared.state.stats(self.shared.commands.is_connected())
    }

    /// Shuts the locker down: refuses new acquires and ends waits with
    /// `ShuttingDown`, waits for attempts in flight, releases every tracked
    /// lease at once (one round trip on a single server, in parallel on a
    /// cluster), stops the subscriber and closes the connections the locker
    /// opened, all within `shutdown_timeout`. Later calls return `Ok` at once.
    ///
    /// # Errors
    ///
    /// `CleanupTimeout` when not every release was confirmed within
    /// `shutdown_timeout` (late acquire replies are still released by token);
    /// `CleanupFailed` when Redis refused or failed some releases;
    /// `ProviderFailed`/`OutcomeUnknown` when the cleanup could not be sent.
    pub fn shutdown(&self) -> Call<'_, F, Result<(), Error>> {
        let shared = &self.shared;
        let start = move || Ok(Shutdown::new(&shared.state));
        F::run(shared, None, start, move |result| {
            shared.commands.close();
            result
        })
    }
}

/// The acquire of every kind through `shared`: one shared operation, whose
/// grant becomes a lease of kind `K`.
pub(crate) fn acquire_kind<'a, F: Front, K: Kind>(
    shared: &'a SharedOf<F>,
    key: &'a str,
    want: Want,
    options: AcquireOptions,
) -> Call<'a, F, Result<Lease<F, K>, Error>> {
    // Started when the call runs: an async acquire joins its line when
    // first polled, not when its future is made.
    let start = move || Acquire::start(&shared.state, key, want, None, options, now()).map_err(Err);
    F::run(shared, None, start, move |granted| {
        granted.map(|granted| Lease::new(shared.clone(), granted))
    })
}
