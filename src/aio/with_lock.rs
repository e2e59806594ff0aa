//! `aio::Locker::with_lock` (and the run of `with_permit`): acquire, run an
//! async closure, always release;
//! with `extend(true)` the shared renewer runs inside the same future,
//! selected against the closure's future, never spawned.

use std::future::Future;
use std::panic::{resume_unwind, AssertUnwindSafe};
use std::pin::pin;

use futures::future::{select, Either};
use futures::FutureExt;

use super::drive::drive;
use super::{Lease, Locker};
use crate::config::WithLock;
use crate::driver::ops::{log_failed_release, Renewer, StopSignal};
use crate::error::Error;
use crate::lost::Lost;

impl Locker {
    /// Acquires `key`, awaits `f(&lease, &lost)`, and releases the lease
    /// afterwards whether `f` returned `Ok`, `Err` or panicked (the panic
    /// resumes after the release).
    ///
    /// The async twin of
    /// [`blocking::Locker::with_lock`](crate::blocking::Locker::with_lock):
    /// `f` is an async closure, its error type only needs `From<Error>`, and
    /// with [`WithLock::extend`] the lease is renewed every lease/2 by this
    /// same future while `f` runs (a failed renewal is sent again while the
    /// lease has time left); an extension still in flight finishes before
    /// the release. [`Lost::wait`] completes on a loss. If the `with_lock`
    /// future itself is dropped, the lease goes back to the locker like any
    /// dropped lease.
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
    pub async fn with_lock<T, E, F>(&self, key: &str, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: AsyncFnOnce(&Lease, &Lost) -> Result<T, E>,
    {
        let lease = self.acquire_with(key, options.acquire).await?;
        run_holding(lease, options.extend, f).await
    }
}

/// What `with_lock` and `with_permit` hold while their closure runs: a
/// lease, or a permit (whose lease is renewed and released the same way).
pub(crate) trait Holding {
    fn lease(&self) -> &Lease;
    fn into_lease(self) -> Lease;
}

impl Holding for Lease {
    fn lease(&self) -> &Lease {
        self
    }

    fn into_lease(self) -> Lease {
        self
    }
}

/// Awaits `f(&guard, &lost)` with the renewer selected against it when
/// `extend`, then releases the guard whatever `f` did (see
/// [`Locker::with_lock`]).
pub(crate) async fn run_holding<G, T, E, F>(guard: G, extend: bool, f: F) -> Result<T, E>
where
    G: Holding,
    F: AsyncFnOnce(&G, &Lost) -> Result<T, E>,
{
    let lease = guard.lease();
    let lost = lease.held().lost_signal(extend);
    let outcome = renewing(
        lease,
        &lost,
        extend,
        AssertUnwindSafe(f(&guard, &lost)).catch_unwind(),
    )
    .await;
    lost.disarm();
    log_failed_release(guard.into_lease().release().await);
    match outcome {
        Ok(result) => result,
        Err(panic) => resume_unwind(panic),
    }
}

impl Lease {
    /// Keeps this lease alive while `f`'s future runs, as
    /// [`Locker::with_lock`] with [`WithLock::extend`] does (the renewer
    /// runs inside this same future), and returns what `f` returns. The
    /// lease stays held afterwards: release it or drop it. The async twin
    /// of [`blocking::Lease::keep_alive`](crate::blocking::Lease::keep_alive).
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
        // Settle a deadline that passed unobserved, then stop counting:
        // from here on the caller decides the lease's fate.
        let _ = lost.is_lost();
        lost.disarm();
        result
    }
}

/// Awaits `work` with the renewer of `lease` selected against it when
/// `extend`; an extension still in flight when `work` ends finishes first.
async fn renewing<R>(lease: &Lease, lost: &Lost, extend: bool, work: impl Future<Output = R>) -> R {
    let work = pin!(work);
    if !extend {
        return work.await;
    }
    let stop = StopSignal::default();
    let shared = lease.shared();
    let renewer = Renewer::new(&shared.state, lease.held(), lost, &stop);
    let renew = pin!(drive(shared, renewer));
    match select(work, renew).await {
        Either::Left((outcome, renew)) => {
            stop.stop();
            renew.await;
            outcome
        }
        Either::Right(((), work)) => work.await,
    }
}

/// The renew, release and keep-alive of a guard that wraps
/// this front end's `Lease` (`$guard(Lease)`: a permit, a read or a write
/// lease), and its `Holding` for `with_permit`/`with_read`/`with_write`.
macro_rules! guard_ops {
    ($guard:ident, $what:literal, $whom:literal) => {
        impl $guard {
            #[doc = concat!("Extends ", $what, " to its full length, counted from now.")]
            ///
            /// # Errors
            ///
            /// As [`Lease::renew`](crate::aio::Lease::renew).
            pub async fn renew(&self) -> Result<$crate::RenewOutcome, $crate::Error> {
                self.0.renew().await
            }

            #[doc = concat!("Releases ", $what, " and notifies ", $whom, ".")]
            ///
            /// # Errors
            ///
            /// As [`Lease::release`](crate::aio::Lease::release).
            pub async fn release(self) -> Result<$crate::ReleaseOutcome, $crate::Error> {
                self.0.release().await
            }

            #[doc = concat!("Keeps ", $what, " alive while `f`'s future runs, as [`Lease::keep_alive`](", "crate::aio::Lease::keep_alive).")]
            pub async fn keep_alive<T>(&self, f: impl AsyncFnOnce(&$crate::Lost) -> T) -> T {
                self.0.keep_alive(f).await
            }
        }

        impl $crate::aio::with_lock::Holding for $guard {
            fn lease(&self) -> &$crate::aio::Lease {
                &self.0
            }

            fn into_lease(self) -> $crate::aio::Lease {
                self.0
            }
        }
    };
}
pub(crate) use guard_ops;
