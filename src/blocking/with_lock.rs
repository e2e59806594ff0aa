//! `blocking::Locker::with_lock`: acquire, run a closure, always release;
//! with `extend(true)` a scoped renewer thread keeps the lease alive.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use event_listener::{Event, Listener};

use super::{Lease, Locker};
use crate::clock::now;
use crate::config::WithLock;
use crate::core::outcome::RenewOutcome;
use crate::error::{Error, LostCause};
use crate::lost::Lost;

impl Locker {
    /// Acquires `key`, runs `f(&lease, &lost)`, and releases the lease
    /// afterwards whether `f` returned `Ok`, `Err` or panicked (the panic
    /// resumes after the release).
    ///
    /// Returns what `f` returns. `f`'s error type only needs `From<Error>`,
    /// the shape of diesel's `transaction`: not obtaining the lock comes back
    /// as `E::from(Busy / WaitTimeout / ...)` and `f` is not called. A failed
    /// release does not change the result; it is logged
    /// (`LOCK_RELEASE_FAILED`) and the TTL ends the lease.
    ///
    /// With [`WithLock::extend`] the lease is renewed to its full length
    /// every lease/2 while `f` runs, by one scoped thread joined before
    /// `with_lock` returns. If a renewal fails, or the lease's local deadline
    /// passes without a confirmed renewal, `lost` fires with
    /// [`Error::LockLost`]; `f` should then stop soon. Renewal stops before
    /// the release, so a release never looks like a loss.
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
    pub fn with_lock<T, E, F>(&self, key: &str, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: FnOnce(&Lease, &Lost) -> Result<T, E>,
    {
        let lease = self.acquire_with(key, options.acquire)?;
        let lost = Lost::new(options.extend, lease.valid_until().flatten());
        let stop = Stop::default();
        let outcome = std::thread::scope(|scope| {
            let renewer = options
                .extend
                .then(|| scope.spawn(|| renew_until_stopped(&lease, &lost, &stop)));
            let outcome = catch_unwind(AssertUnwindSafe(|| f(&lease, &lost)));
            stop.stop();
            if let Some(renewer) = renewer {
                // The renewer catches nothing and panics only on a bug; its
                // panic is not the caller's.
                let _ = renewer.join();
            }
            outcome
        });
        lost.disarm();
        if let Err(e) = lease.release() {
            log::warn!(
                target: "redlease",
                "LOCK_RELEASE_FAILED: with_lock could not release its lease ({}); the TTL will end it",
                e.code()
            );
        }
        match outcome {
            Ok(result) => result,
            Err(panic) => resume_unwind(panic),
        }
    }
}

/// Tells the renewer to stop, waking it from its sleep.
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
    fn sleep(&self, d: Duration) -> bool {
        let listener = self.event.listen();
        if self.stopped.load(Ordering::SeqCst) {
            return true;
        }
        if let Some(until) = now().checked_add(d) {
            listener.wait_deadline(until);
        } else {
            listener.wait();
        }
        self.stopped.load(Ordering::SeqCst)
    }
}

fn renew_until_stopped(lease: &Lease, lost: &Lost, stop: &Stop) {
    let period = lease.lease_length() / 2;
    loop {
        if stop.sleep(period) {
            return;
        }
        match lease.renew() {
            Ok(RenewOutcome::Renewed) => lost.extend_to(lease.valid_until().flatten()),
            Ok(RenewOutcome::Expired) => return lost.fire(LostCause::Expired),
            Ok(RenewOutcome::Conflict) => return lost.fire(LostCause::Conflict),
            Err(e) => return lost.fire(LostCause::RenewFailed(Box::new(e))),
        }
    }
}
