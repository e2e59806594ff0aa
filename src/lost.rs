//! `Lost`: the loss signal `with_lock` hands to its closure.
//!
//! It fires when a renewal fails (expired, conflict, Redis error) and at the
//! latest when the lease's local deadline passes without a confirmed
//! renewal, read from the holder's own clock, so that a holder cut off from
//! Redis learns it without waiting for a reply that never comes. It never
//! fires without `extend(true)`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::{Event, EventListener};
use parking_lot::Mutex;

use crate::clock::now;
use crate::driver::metrics::LostCounter;
use crate::error::{Error, LostCause};

/// Tells a `with_lock` closure that its lease was lost.
///
/// Clone it freely (e.g. into a worker thread); all clones see the same
/// signal. After a loss, stop working on the protected resource soon: the
/// lock may already belong to someone else.
///
/// ```
/// # fn work(lost: &redlease::Lost) {
/// while !lost.is_lost() {
///     // one small step of the job
/// #   break;
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct Lost {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    event: Event,
    /// `redlease_lost_total` (feature `metrics`).
    counter: LostCounter,
}

struct State {
    /// Only an extended lease can be lost.
    armed: bool,
    cause: Option<LostCause>,
    /// The lease's local deadline; `None` for one beyond any instant.
    deadline: Option<Instant>,
}

impl State {
    /// Records the deadline passing, if it has.
    fn check(&mut self, now: Instant, counter: &LostCounter) -> bool {
        if self.cause.is_none() && self.armed && self.deadline.is_some_and(|d| now >= d) {
            self.set(LostCause::DeadlinePassed, counter);
        }
        self.cause.is_some()
    }

    /// The loss, counted once.
    fn set(&mut self, cause: LostCause, counter: &LostCounter) {
        counter.fired(&cause);
        self.cause = Some(cause);
    }

    /// The loss as [`Error::LockLost`], once lost.
    fn error(&mut self, counter: &LostCounter) -> Option<Error> {
        self.check(now(), counter);
        self.cause.clone().map(|cause| Error::LockLost { cause })
    }
}

impl Lost {
    pub(crate) fn new(armed: bool, deadline: Option<Instant>, counter: LostCounter) -> Self {
        Lost {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    armed,
                    cause: None,
                    deadline,
                }),
                event: Event::new(),
                counter,
            }),
        }
    }

    /// Whether the lease was lost.
    pub fn is_lost(&self) -> bool {
        self.inner.state.lock().check(now(), &self.inner.counter)
    }

    /// The loss as [`Error::LockLost`] with its cause, once lost.
    pub fn cause(&self) -> Option<Error> {
        self.inner.state.lock().error(&self.inner.counter)
    }

    /// Blocks until the lease is lost or `timeout` passes; true if lost.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let until = now().checked_add(timeout);
        loop {
            let Ok((listener, wake_at)) = self.listen() else {
                return true;
            };
            if until.is_some_and(|u| now() >= u) {
                return false;
            }
            crate::blocking::wait(Some(listener), wake_at.into_iter().chain(until).min());
        }
    }

    /// Completes when the lease is lost, with the loss as
    /// [`Error::LockLost`]. Never completes for a lease without extension.
    #[cfg(feature = "aio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aio")))]
    pub async fn wait(&self) -> Error {
        loop {
            match self.listen() {
                Ok((listener, wake_at)) => crate::aio::wait(Some(listener), wake_at).await,
                Err(lost) => return lost,
            }
        }
    }

    /// A listener for the next change, registered before the check, and
    /// the instant the deadline passes (while armed); or, once lost, the
    /// loss as [`Error::LockLost`].
    fn listen(&self) -> Result<(EventListener, Option<Instant>), Error> {
        let listener = self.inner.event.listen();
        let mut state = self.inner.state.lock();
        match state.error(&self.inner.counter) {
            Some(lost) => Err(lost),
            None => Ok((listener, state.deadline.filter(|_| state.armed))),
        }
    }

    /// A renewal failed: the lease is lost for this cause.
    pub(crate) fn fire(&self, cause: LostCause) {
        let mut state = self.inner.state.lock();
        if state.armed && state.cause.is_none() {
            state.set(cause, &self.inner.counter);
        }
        drop(state);
        self.inner.event.notify(usize::MAX);
    }

    /// A renewal succeeded: the lease now lasts until `deadline`.
    pub(crate) fn extend_to(&self, deadline: Option<Instant>) {
        self.inner.state.lock().deadline = deadline;
        self.inner.event.notify(usize::MAX);
    }

    /// The lease is being released on purpose: nothing can be lost anymore.
    pub(crate) fn disarm(&self) {
        self.inner.state.lock().armed = false;
        self.inner.event.notify(usize::MAX);
    }
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lost")
            .field("lost", &self.is_lost())
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
// tests read the clock to build deadlines
// `LostCounter` is a unit struct without feature `metrics`, a struct with it.
#[allow(clippy::default_constructed_unit_structs)]
mod tests {
    use super::*;

    #[test]
    fn an_unarmed_signal_never_fires() {
        let lost = Lost::new(false, Some(now()), LostCounter::default());
        lost.fire(LostCause::Expired);
        assert!(!lost.is_lost());
        assert!(!lost.wait_timeout(Duration::from_millis(1)));
    }

    #[test]
    fn a_passed_deadline_fires_with_its_cause() {
        let lost = Lost::new(true, Some(now()), LostCounter::default());
        assert!(lost.is_lost());
        assert!(matches!(
            lost.cause(),
            Some(Error::LockLost {
                cause: LostCause::DeadlinePassed
            })
        ));
    }

    #[test]
    fn the_first_cause_wins_and_wakes_a_waiter() {
        let lost = Lost::new(true, None, LostCounter::default());
        let for_thread = lost.clone();
        let waiter = std::thread::spawn(move || for_thread.wait_timeout(Duration::from_secs(10)));
        lost.fire(LostCause::Conflict);
        lost.fire(LostCause::Expired);
        assert!(waiter.join().unwrap());
        assert!(matches!(
            lost.cause(),
            Some(Error::LockLost {
                cause: LostCause::Conflict
            })
        ));
    }

    #[test]
    fn extending_moves_the_deadline_and_disarming_stops_it() {
        let lost = Lost::new(true, Some(now()), LostCounter::default());
        lost.extend_to(now().checked_add(Duration::from_secs(60)));
        // The earlier deadline was replaced before anyone looked.
        assert!(!lost.is_lost());
        lost.disarm();
        lost.extend_to(Some(now()));
        assert!(!lost.is_lost());
    }
}
