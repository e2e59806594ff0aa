//! The async calls that take an async closure, for every kind: through
//! `handle::with_calls!` `with_lock`, `with_all`, `with_permit`, `with_read`, `with_write` (acquire, await the closure,
//! always release), and `keep_alive`; with `extend(true)` the shared
//! renewer runs inside the same future, selected against the closure's
//! future, never spawned.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;

use futures::future::{select, Either};
use futures::FutureExt;

use super::front::drive;
use super::{Lease, Locker, MultiLease, Permit, ReadLease, RwLock, Semaphore, WriteLease};
use crate::driver::ops::StopSignal;
use crate::error::Error;
use crate::front::Async;
use crate::handle::after_release;
use crate::handle::kind::Kind;
use crate::lost::Lost;

/// A lease of kind `K` on this front end.
type Guard<K> = crate::Lease<Async, K>;

crate::handle::with_calls! {
    /// Acquires `key`, awaits `f(&lease, &lost)` and releases the lease
    /// afterwards, whatever `f` did; with
    /// [`WithLock::extend`](crate::WithLock::extend) this same future renews
    /// the lease while `f` runs ([`Lost::wait`] completes on a loss). See
    /// [`Locker`](crate::Locker#work-while-holding-with_lock-with_permit-with_read-with_write-with_all)
    /// for the rules (errors, panics, renewals, `lost`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locker: &redlease::aio::Locker) -> Result<(), redlease::Error> {
    /// use redlease::WithLock;
    ///
    /// let fence = locker
    ///     .with_lock("nightly-report", WithLock::new().extend(true), async |lease, lost| {
    ///         if lost.is_lost() {
    ///             return Err(lost.cause().unwrap_or(redlease::Error::Cancelled));
    ///         }
    ///         Ok::<_, redlease::Error>(lease.fence())
    ///     })
    ///     .await?;
    /// # let _ = fence; Ok(()) }
    /// ```
    AsyncFnOnce, "awaits", async .await
}

/// Awaits `f(&guard, &lost)` on the lease `acquire` yields, of any kind,
/// with the renewer selected against it when `extend`, then releases the
/// guard whatever `f` did (see [`Locker::with_lock`]).
async fn run_holding<A, K, T, E, F>(acquire: A, extend: bool, f: F) -> Result<T, E>
where
    A: Future<Output = Result<Guard<K>, Error>>,
    K: Kind,
    E: From<Error>,
    F: AsyncFnOnce(&Guard<K>, &Lost) -> Result<T, E>,
{
    let guard = acquire.await?;
    let lost = guard.held().lost_signal(extend);
    let work = AssertUnwindSafe(f(&guard, &lost)).catch_unwind();
    let outcome = renewing(&guard, &lost, extend, work).await;
    after_release(outcome, guard.release_after(&lost).await)
}

impl<K: Kind> Guard<K> {
    /// Keeps this lease alive while `f`'s future runs (the renewer runs
    /// inside this same future) and returns what `f` returns; the lease
    /// stays held (see [`Lease`](crate::Lease#keeping-it-alive-keep_alive)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locker: &redlease::aio::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.acquire("nightly-report").await?;
    /// let rows = lease
    ///     .keep_alive(async |lost| {
    ///         let mut rows = 0;
    ///         while !lost.is_lost() && rows < 1000 {
    ///             rows += 1; // write a row, passing lease.fence() to the store
    ///         }
    ///         rows
    ///     })
    ///     .await;
    /// println!("{rows} rows; release: {:?}", lease.release().await?);
    /// # Ok(()) }
    /// ```
    pub async fn keep_alive<T>(&self, f: impl AsyncFnOnce(&Lost) -> T) -> T {
        let lost = self.held().lost_signal(true);
        let result = renewing(self, &lost, true, f(&lost)).await;
        lost.settle();
        result
    }
}

/// Awaits `work` with the renewer of `lease` selected against it when
/// `extend`; an extension still in flight when `work` ends finishes first.
async fn renewing<K: Kind, R>(
    lease: &Guard<K>,
    lost: &Lost,
    extend: bool,
    work: impl Future<Output = R>,
) -> R {
    let work = pin!(work);
    if !extend {
        return work.await;
    }
    let stop = StopSignal::default();
    let renew = pin!(drive(lease.shared(), lease.renewer(lost, &stop)));
    match select(work, renew).await {
        Either::Left((outcome, renew)) => {
            stop.stop();
            renew.await;
            outcome
        }
        Either::Right(((), work)) => work.await,
    }
}
