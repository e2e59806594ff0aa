//! `Observer<F>`: an election's changes, in order (docs/ELECTION.md §7).
//! What to yield and when to read next is the core's `ObserveState`; this
//! is the reading loop's state, which each front end drives (blocking: an
//! `Iterator`, `src/blocking/election.rs`; async: a `Stream`,
//! `src/aio/election.rs`).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use event_listener::EventListener;

use super::election::Election;
use crate::clock::now;
use crate::core::election::ReadReply;
use crate::core::names::KeyId;
use crate::core::observe::{Observation, ObserveState};
use crate::driver::state::LockerState;
use crate::error::Error;
use crate::front::{Call, Front};

/// The changes of an [`Election`], made by [`Election::observe`]: an
/// `Iterator` on the blocking front end, a `Stream` on the async one, of
/// [`Observation`]s. It ends (`None`) at the locker's shutdown.
pub struct Observer<F: Front> {
    /// `None` while the async front end's step has it.
    pub(crate) watch: Option<Watch<F>>,
    /// The async front end's wait and read in flight.
    #[cfg_attr(
        not(feature = "aio"),
        allow(dead_code, reason = "only the async front end steps")
    )]
    pub(crate) step: Option<Pin<Box<dyn Future<Output = Watch<F>> + Send>>>,
}

impl<F: Front> Observer<F> {
    pub(crate) fn new(election: Election<F>, id: KeyId) -> Self {
        let interest = Interest::new(election.locker().shared().state.clone(), id);
        Observer {
            watch: Some(Watch {
                election,
                state: ObserveState::default(),
                queue: VecDeque::new(),
                next_read: None,
                seen: 0,
                interest,
            }),
            step: None,
        }
    }
}

/// One observer's reading loop: the items of its last read, and when to
/// read next.
pub(crate) struct Watch<F: Front> {
    election: Election<F>,
    state: ObserveState,
    queue: VecDeque<Observation>,
    /// The safety poll or the leader's expiry; `None`: read at once.
    next_read: Option<Instant>,
    /// The election's announced changes when the last read began: a
    /// notification after that moves the count, and the observer reads.
    seen: u64,
    interest: Interest,
}

/// What an observer's reading loop does next.
pub(crate) enum Next {
    /// Yield this item of the last read.
    Yield(Observation),
    /// End: the locker is shutting down.
    End,
    /// Wait until the instant, or until the listener (a change of the
    /// locker's core: a notification for this election, a
    /// resubscription, shutdown) wakes the wait early.
    Sleep(EventListener, Instant),
    /// Read now ([`Watch::read`]), then hand the reply to [`Watch::handle`].
    Read,
}

impl<F: Front> Watch<F> {
    /// What to do next, at this instant.
    pub(crate) fn next(&mut self) -> Next {
        if let Some(item) = self.queue.pop_front() {
            return Next::Yield(item);
        }
        let state = &self.interest.state;
        // Registered before the checks: a change in between still wakes.
        let listener = state.listen_changed();
        if state.read(|core| core.is_shutting_down()) {
            return Next::End;
        }
        // A notification came since the last read began.
        if self.interest.changes() != self.seen {
            return Next::Read;
        }
        match self.next_read {
            Some(at) if at > now() => Next::Sleep(listener, at),
            _ => Next::Read,
        }
    }

    /// The next read.
    pub(crate) fn read(&mut self) -> Call<'_, F, Result<ReadReply, Error>> {
        self.seen = self.interest.changes();
        self.election.read_after(self.state.after())
    }

    /// Takes a read's reply: its items, and when to read next.
    pub(crate) fn handle(&mut self, reply: Result<ReadReply, Error>) {
        let now = now();
        self.next_read = match reply {
            Ok(read) => {
                let poll = self.election.locker().config().notify_poll_interval;
                let (items, next) = self.state.handle_read(now, &read, poll);
                self.queue.extend(items);
                next
            }
            Err(_) => self.state.handle_failure(now),
        };
    }
}

/// An observer's interest in its election, told to the locker's core
/// while it lives: it keeps the notification subscription wanted.
struct Interest {
    state: Arc<LockerState>,
    id: KeyId,
}

impl Interest {
    fn new(state: Arc<LockerState>, id: KeyId) -> Self {
        state.with_core(|core| core.handle_observer_started(now(), id));
        Interest { state, id }
    }

    fn changes(&self) -> u64 {
        self.state.read(|core| core.observed_changes(self.id))
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        let id = self.id;
        self.state
            .with_core(|core| core.handle_observer_stopped(now(), id));
    }
}

impl<F: Front> std::fmt::Debug for Observer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}
