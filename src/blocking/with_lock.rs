//! The blocking calls that take a closure, for every kind: through
//! `handle::with_calls!` `with_lock`, `with_all`, `with_permit`,
//! `with_read`, `with_write` (acquire, run the closure, always release),
//! and `keep_alive`; with `extend(true)` the shared renewer runs on a
//! scoped thread.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::front::drive;
use super::{Lease, Locker, MultiLease, Permit, ReadLease, RwLock, Semaphore, WriteLease};
use crate::driver::ops::StopSignal;
use crate::error::{Error, LostCause};
use crate::front::Blocking;
use crate::handle::after_release;
use crate::handle::kind::Kind;
use crate::lost::Lost;

/// A lease of kind `K` on this front end.
type Guard<K> = crate::Lease<Blocking, K>;

crate::handle::with_calls! {
    /// Acquires `key`, runs `f(&lease, &lost)` and releases the lease
    /// afterwards, whatever `f` did; with
    /// [`WithLock::extend`](crate::WithLock::extend) a scoped thread renews
    /// the lease while `f` runs. See
    /// [`Locker`](crate::Locker#work-while-holding-with_lock-with_permit-with_read-with_write-with_all)
    /// for the rules (errors, panics, renewals, `lost`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// use redlease::WithLock;
    ///
    /// let rows = locker.with_lock("nightly-report", WithLock::new().extend(true), |lease, lost| {
    ///     let mut rows = 0;
    ///     while !lost.is_lost() && rows < 1000 {
    ///         // write a row, passing lease.fence() to the store
    ///         rows += 1;
    ///     }
    ///     Ok::<_, redlease::Error>(rows)
    /// })?;
    /// # let _ = rows; Ok(()) }
    /// ```
    FnOnce, "runs"
}

/// Runs `f(&guard, &lost)` on the `acquired` lease of any kind, with the
/// renewer on a scoped thread when `extend`, then releases the guard
/// whatever `f` did (see [`Locker::with_lock`]).
fn run_holding<K, T, E, F>(acquired: Result<Guard<K>, Error>, extend: bool, f: F) -> Result<T, E>
where
    K: Kind,
    E: From<Error>,
    F: FnOnce(&Guard<K>, &Lost) -> Result<T, E>,
{
    let guard = acquired?;
    let lost = guard.held().lost_signal(extend);
    let outcome = renewing(&guard, &lost, extend, || {
        catch_unwind(AssertUnwindSafe(|| f(&guard, &lost)))
    });
    after_release(outcome, guard.release_after(&lost))
}

impl<K: Kind> Guard<K> {
    /// Keeps this lease alive while `f` runs, by one scoped thread, and
    /// returns what `f` returns; the lease stays held (see
    /// [`Lease`](crate::Lease#keeping-it-alive-keep_alive)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.acquire("nightly-report")?;
    /// let done = lease.keep_alive(|lost| {
    ///     let mut rows = 0;
    ///     while !lost.is_lost() && rows < 1000 {
    ///         // write a row, passing lease.fence() to the store
    ///         rows += 1;
    ///     }
    ///     rows
    /// });
    /// println!("{done} rows; release: {:?}", lease.release()?);
    /// # Ok(()) }
    /// ```
    pub fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        let lost = self.held().lost_signal(true);
        let result = renewing(self, &lost, true, || f(&lost));
        lost.settle();
        result
    }
}

/// Runs `f` with the renewer of `lease` on a scoped thread when `extend`,
/// and stops and joins the renewer before returning (also when `f`
/// panics).
fn renewing<K: Kind, R>(lease: &Guard<K>, lost: &Lost, extend: bool, f: impl FnOnce() -> R) -> R {
    /// Stops the renewer when `f` ends, by return or by unwinding.
    struct StopOnDrop<'a>(&'a StopSignal);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.stop();
        }
    }

    let stop = StopSignal::default();
    std::thread::scope(|scope| {
        let renewer = extend.then(|| {
            let renewer = lease.renewer(lost, &stop);
            let spawned = std::thread::Builder::new()
                .name("redlease-renewer".into())
                .spawn_scoped(scope, || drive(lease.shared(), renewer));
            if spawned.is_err() {
                // Nothing can keep the lease alive: say so at once
                // rather than let `f` trust a lease that will lapse.
                lost.fire(LostCause::DeadlinePassed);
            }
            spawned.ok()
        });
        let stopping = StopOnDrop(&stop);
        let result = f();
        drop(stopping);
        if let Some(renewer) = renewer.flatten() {
            // The renewer catches nothing and panics only on a bug; its
            // panic is not the caller's.
            let _ = renewer.join();
        }
        result
    })
}
