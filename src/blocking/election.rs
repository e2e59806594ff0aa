//! The blocking election's own parts: `with_leadership` (campaign, run the
//! closure, always resign) and the observer as an `Iterator`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::front::drive;
use super::{Election, Leadership, Observer};
use crate::config::WithLock;
use crate::core::observe::Observation;
use crate::error::Error;
use crate::handle::after_release;
use crate::lost::Lost;

impl Election {
    /// Campaigns with `value` (waiting per `options`), runs
    /// `f(&leadership, &lost)` while leading and resigns afterwards; `f`
    /// must stop soon after `lost` fires (it cannot be pre-empted). See
    /// [`Election`](crate::Election#leading-while-a-closure-runs-with_leadership)
    /// for the rules (errors, panics, renewals).
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
    pub fn with_leadership<V, T, E, F>(&self, value: V, options: WithLock, f: F) -> Result<T, E>
    where
        V: AsRef<[u8]>,
        E: From<Error>,
        F: FnOnce(&Leadership, &Lost) -> Result<T, E>,
    {
        let leadership = self.campaign_with(value, options.acquire)?;
        let outcome = catch_unwind(AssertUnwindSafe(|| f(&leadership, leadership.lost())));
        after_release(outcome, leadership.resign())
    }
}

/// The changes of an election, in order; `None` at the locker's shutdown.
/// Each `next` blocks until the next change (or the current state first).
impl Iterator for Observer {
    type Item = Observation;

    fn next(&mut self) -> Option<Observation> {
        let watch = self.watch.as_mut()?;
        let shared = watch.shared().clone();
        drive(&shared, watch)
    }
}
