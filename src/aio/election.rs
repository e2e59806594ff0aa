//! The async election call that takes an async closure: `with_leadership`
//! (campaign, await the closure raced against the loss, always resign).

use std::panic::{resume_unwind, AssertUnwindSafe};
use std::pin::pin;

use futures::future::{select, Either};
use futures::FutureExt;

use super::{Election, Leadership};
use crate::config::WithLock;
use crate::driver::ops::log_failed_release;
use crate::error::Error;
use crate::lost::Lost;

impl Election {
    /// Campaigns with `value` (waiting per `options`), awaits
    /// `f(&leadership, &lost)` while leading and resigns afterwards,
    /// whether `f` returned `Ok`, `Err` or panicked (the panic resumes
    /// after the resign). `f`'s future is raced against the loss: on a loss
    /// it is **dropped** and the call returns `E::from(Error::LockLost)`.
    /// The leadership is renewed by its keeper whatever `options`' `extend`
    /// says. A `with_leadership` future dropped midway drops the leadership,
    /// which its keeper resigns.
    ///
    /// # Errors
    ///
    /// As [`campaign`](crate::Election::campaign), `LockLost`, and whatever
    /// `f` returns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(election: &redlease::aio::Election) -> Result<(), redlease::Error> {
    /// use redlease::WithLock;
    ///
    /// let term = election
    ///     .with_leadership(b"host-a:4242", WithLock::new(), async |leadership, _lost| {
    ///         // lead, passing leadership.term() to every store
    ///         Ok::<_, redlease::Error>(leadership.term())
    ///     })
    ///     .await?;
    /// # let _ = term; Ok(()) }
    /// ```
    pub async fn with_leadership<T, E, F>(
        &self,
        value: impl AsRef<[u8]>,
        options: WithLock,
        f: F,
    ) -> Result<T, E>
    where
        E: From<Error>,
        F: AsyncFnOnce(&Leadership, &Lost) -> Result<T, E>,
    {
        let leadership = self.campaign_with(value, options.acquire).await?;
        let outcome = {
            let work = pin!(AssertUnwindSafe(f(&leadership, leadership.lost())).catch_unwind());
            let lost = pin!(leadership.lost().wait());
            match select(work, lost).await {
                Either::Left((outcome, _)) => outcome,
                Either::Right((loss, _)) => Ok(Err(E::from(loss))),
            }
        };
        log_failed_release(leadership.resign().await);
        outcome.unwrap_or_else(|panic| resume_unwind(panic))
    }
}
