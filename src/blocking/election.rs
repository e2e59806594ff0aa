//! The blocking election's own parts: `with_leadership` (campaign, run the
//! closure, always resign) and the observer as an `Iterator`.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use event_listener::Listener;

use super::{Election, Leadership, Observer};
use crate::config::WithLock;
use crate::core::observe::Observation;
use crate::driver::ops::log_failed_release;
use crate::error::Error;
use crate::lost::Lost;

impl Election {
    /// Campaigns with `value` (waiting per `options`), runs
    /// `f(&leadership, &lost)` while leading and resigns afterwards,
    /// whether `f` returned `Ok`, `Err` or panicked (the panic resumes
    /// after the resign). The leadership is renewed by its keeper whatever
    /// `options`' `extend` says; `f` must stop soon after `lost` fires (it
    /// cannot be pre-empted). Not leading comes back as `E::from(Busy /
    /// WaitTimeout / ...)` and `f` is not called; a failed resign does not
    /// change the result (it is logged).
    ///
    /// # Errors
    ///
    /// As [`campaign`](crate::Election::campaign), and whatever `f` returns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(election: &redlease::blocking::Election) -> Result<(), redlease::Error> {
    /// use redlease::WithLock;
    ///
    /// let rounds = election.with_leadership(b"host-a:4242", WithLock::new(), |leadership, lost| {
    ///     let mut rounds = 0;
    ///     while !lost.is_lost() && rounds < 10 {
    ///         // schedule a round, passing leadership.term() to the store
    ///         rounds += 1;
    ///     }
    ///     Ok::<_, redlease::Error>(rounds)
    /// })?;
    /// # let _ = rounds; Ok(()) }
    /// ```
    pub fn with_leadership<T, E, F>(
        &self,
        value: impl AsRef<[u8]>,
        options: WithLock,
        f: F,
    ) -> Result<T, E>
    where
        E: From<Error>,
        F: FnOnce(&Leadership, &Lost) -> Result<T, E>,
    {
        let leadership = self.campaign_with(value, options.acquire)?;
        let outcome = catch_unwind(AssertUnwindSafe(|| f(&leadership, leadership.lost())));
        log_failed_release(leadership.resign());
        outcome.unwrap_or_else(|panic| resume_unwind(panic))
    }
}

/// The changes of an election, in order; `None` at the locker's shutdown.
/// Each `next` blocks until the next change (or the current state first).
impl Iterator for Observer {
    type Item = Observation;

    fn next(&mut self) -> Option<Observation> {
        let watch = self.watch.as_mut()?;
        loop {
            if let Some(item) = watch.pop() {
                return Some(item);
            }
            let listener = watch.listener();
            if watch.ended() {
                return None;
            }
            if let Some(at) = watch.due() {
                listener.wait_deadline(at);
                continue;
            }
            let reply = watch.read();
            watch.handle(reply);
        }
    }
}
