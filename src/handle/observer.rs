//! `Observer<F>`: an election's changes, in order (docs/ELECTION.md §7).
//! What to yield and when to read next is the core's `ObserveState`; this
//! is the reading loop's state, which each front end drives (blocking: an
//! `Iterator`, `src/blocking/election.rs`; async: a `Stream`,
//! `src/aio/election.rs`).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use event_listener::EventListener;

use super::election::Election;
use crate::clock::now;
use crate::core::election::ReadReply;
use crate::core::observe::{Observation, ObserveState};
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
    pub(crate) fn new(election: Election<F>) -> Self {
        Observer {
            watch: Some(Watch {
                election,
                state: ObserveState::default(),
                queue: VecDeque::new(),
                next_read: None,
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
    /// `None`: read at once.
    next_read: Option<Instant>,
}

/// What an observer's reading loop does next.
pub(crate) enum Next {
    /// Yield this item of the last read.
    Yield(Observation),
    /// End: the locker is shutting down.
    End,
    /// Wait until the instant, or until the listener (a change of the
    /// locker's core: shutdown) wakes the wait early.
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
        let state = &self.election.locker().shared().state;
        // Registered before the check: a shutdown in between still wakes.
        let listener = state.listen_changed();
        if state.read(|core| core.is_shutting_down()) {
            return Next::End;
        }
        match self.next_read {
            Some(at) if at > now() => Next::Sleep(listener, at),
            _ => Next::Read,
        }
    }

    /// The next read.
    pub(crate) fn read(&self) -> Call<'_, F, Result<ReadReply, Error>> {
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

impl<F: Front> std::fmt::Debug for Observer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}
