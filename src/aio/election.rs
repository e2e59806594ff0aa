//! The async election's own parts: `with_leadership` (campaign, await the
//! closure raced against the loss, always resign) and the observer as a
//! `Stream`.

use std::panic::{resume_unwind, AssertUnwindSafe};
use std::pin::pin;

use futures::future::{select, Either};
use futures::FutureExt;

use std::task::{Context, Poll};

use super::{Election, Leadership, Observer};
use crate::config::WithLock;
use crate::core::observe::Observation;
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
        loop {
            if let Some(step) = &mut this.step {
                let Poll::Ready(watch) = step.as_mut().poll(cx) else {
                    return Poll::Pending;
                };
                this.step = None;
                this.watch = Some(watch);
            }
            let Some(mut watch) = this.watch.take() else {
                return Poll::Ready(None);
            };
            if let Some(item) = watch.pop() {
                this.watch = Some(watch);
                return Poll::Ready(Some(item));
            }
            if watch.ended() {
                this.watch = Some(watch);
                return Poll::Ready(None);
            }
            this.step = Some(Box::pin(async move {
                let listener = watch.listener();
                if watch.ended() {
                    return watch;
                }
                match watch.due() {
                    Some(at) => {
                        let _ = select(listener, async_io::Timer::at(at)).await;
                    }
                    None => {
                        let reply = watch.read().await;
                        watch.handle(reply);
                    }
                }
                watch
            }));
        }
    }
}
