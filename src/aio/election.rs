//! The async election's own parts: `with_leadership` (campaign, await the
//! closure raced against the loss, always resign) and the observer as a
//! `Stream`.

use std::panic::AssertUnwindSafe;
use std::pin::pin;

use futures::future::{select, Either};
use futures::FutureExt;

use std::task::{ready, Context, Poll};

use super::front::drive;
use super::{Election, Leadership, Observer};
use crate::config::WithLock;
use crate::core::observe::Observation;
use crate::error::Error;
use crate::handle::after_release;
use crate::lost::Lost;

impl Election {
    /// Campaigns with `value` (waiting per `options`), awaits
    /// `f(&leadership, &lost)` while leading and resigns afterwards. `f`'s
    /// future is raced against the loss: on a loss it is **dropped** and the
    /// call returns `E::from(Error::LockLost)`. A `with_leadership` future
    /// dropped midway drops the leadership, which its keeper resigns. See
    /// [`Election`](crate::Election#leading-while-a-closure-runs-with_leadership)
    /// for the rules (errors, panics, renewals).
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
    pub async fn with_leadership<V, T, E, F>(
        &self,
        value: V,
        options: WithLock,
        f: F,
    ) -> Result<T, E>
    where
        V: AsRef<[u8]>,
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
        after_release(outcome, leadership.resign().await)
    }
}

/// The changes of an election, in order; ends at the locker's shutdown.
/// Its waits are `async_io` timers raced against the locker's changes;
/// nothing is spawned.
impl futures::Stream for Observer {
    type Item = Observation;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Observation>> {
        let this = self.get_mut();
        let step = match &mut this.step {
            Some(step) => step,
            None => {
                let Some(mut watch) = this.watch.take() else {
                    return Poll::Ready(None);
                };
                this.step.insert(Box::pin(async move {
                    let shared = watch.shared().clone();
                    let item = drive(&shared, &mut watch).await;
                    (watch, item)
                }))
            }
        };
        let (watch, item) = ready!(step.as_mut().poll(cx));
        (this.watch, this.step) = (Some(watch), None);
        Poll::Ready(item)
    }
}
