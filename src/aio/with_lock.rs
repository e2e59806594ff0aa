//! `aio::Locker::with_lock`: acquire, run an async closure, always release;
//! with `extend(true)` the renewal runs inside the same future, selected
//! against the closure's future, never spawned.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use event_listener::Event;
use futures::future::{select, Either};

use super::{Lease, Locker};
use crate::config::WithLock;
use crate::core::outcome::RenewOutcome;
use crate::error::{Error, LostCause};
use crate::lost::Lost;

impl Locker {
    /// Acquires `key`, awaits `f(&lease, &lost)`, and releases the lease
    /// afterwards whether `f` returned `Ok` or `Err`.
    ///
    /// The async twin of
    /// [`blocking::Locker::with_lock`](crate::blocking::Locker::with_lock):
    /// `f` is an async closure, its error type only needs `From<Error>`, and
    /// with [`WithLock::extend`] the lease is renewed every lease/2 by this
    /// same future while `f` runs; an extension still in flight finishes
    /// before the release. [`Lost::wait`] completes on a loss. If the
    /// `with_lock` future itself is dropped, the lease goes back to the
    /// locker like any dropped lease.
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
        let lost = Lost::new(options.extend, lease.valid_until().flatten());
        let result = {
            let work = pin!(f(&lease, &lost));
            if options.extend {
                let stop = Stop::default();
                let renew = pin!(renew_until_stopped(&lease, &lost, &stop));
                match select(work, renew).await {
                    Either::Left((result, renew)) => {
                        stop.stop();
                        renew.await;
                        result
                    }
                    Either::Right(((), work)) => work.await,
                }
            } else {
                work.await
            }
        };
        lost.disarm();
        if let Err(e) = lease.release().await {
            log::warn!(
                target: "redlease",
                "LOCK_RELEASE_FAILED: with_lock could not release its lease ({}); the TTL will end it",
                e.code()
            );
        }
        result
    }
}

#[derive(Default)]
struct Stop {
    stopped: AtomicBool,
    event: Event,
}

impl Stop {
    fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.event.notify(usize::MAX);
    }

    /// Sleeps up to `d`; true when stopped.
    async fn sleep(&self, d: Duration) -> bool {
        let listener = self.event.listen();
        if self.stopped.load(Ordering::SeqCst) {
            return true;
        }
        select(listener, async_io::Timer::after(d)).await;
        self.stopped.load(Ordering::SeqCst)
    }
}

async fn renew_until_stopped(lease: &Lease, lost: &Lost, stop: &Stop) {
    let period = lease.lease_length() / 2;
    loop {
        if stop.sleep(period).await {
            return;
        }
        match lease.renew().await {
            Ok(RenewOutcome::Renewed) => lost.extend_to(lease.valid_until().flatten()),
            Ok(RenewOutcome::Expired) => return lost.fire(LostCause::Expired),
            Ok(RenewOutcome::Conflict) => return lost.fire(LostCause::Conflict),
            Err(e) => return lost.fire(LostCause::RenewFailed(Box::new(e))),
        }
    }
}
