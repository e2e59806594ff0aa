//! `aio::Locker::with_lock`: acquire, run an async closure, always release;
//! with `extend(true)` the shared renewer runs inside the same future,
//! selected against the closure's future, never spawned.

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
        let lost = Lost::new(options.extend, lease.held().valid_until().flatten());
        let outcome = {
            let work = pin!(AssertUnwindSafe(f(&lease, &lost)).catch_unwind());
            if options.extend {
                let stop = StopSignal::default();
                let shared = lease.shared();
                let renewer = Renewer::new(&shared.state, lease.held(), &lost, &stop);
                let renew = pin!(drive(shared, renewer));
                match select(work, renew).await {
                    Either::Left((outcome, renew)) => {
                        stop.stop();
                        renew.await;
                        outcome
                    }
                    Either::Right(((), work)) => work.await,
                }
            } else {
                work.await
            }
        };
        lost.disarm();
        log_failed_release(lease.release().await);
        match outcome {
            Ok(result) => result,
            Err(panic) => resume_unwind(panic),
        }
    }
}
