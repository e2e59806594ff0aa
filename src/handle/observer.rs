//! `Observer<F>`: an election's changes, in order (docs/PROTOCOL.md).
//! What to yield and when to read next is the core's reader of the name,
//! shared by the locker's observers of it (`core/reader.rs`); this is one
//! observer's reading loop, which each front end drives (blocking: an
//! `Iterator`, `src/blocking/election.rs`; async: a `Stream`,
//! `src/aio/election.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use event_listener::EventListener;

use super::election::Election;
use crate::clock::now;
use crate::core::election::{classify_read, ReadReply, Version};
use crate::core::names::KeyId;
use crate::core::observe::Observation;
use crate::core::reader::{Cursor, ReaderStep};
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
        let state = election.shared().state.clone();
        let cursor = state.with_core(|core| core.handle_observer_started(now(), id));
        Observer {
            watch: Some(Watch {
                election,
                cursor,
                reading: None,
                state,
                id,
            }),
            step: None,
        }
    }
}

/// One observer's reading loop: where it stands in the items of the
/// name's reader, which the locker's observers of that name share
/// (`core/reader.rs`), and whether the read in flight is its own. While it
/// lives, the locker's core knows of its interest in the election `id`,
/// which keeps the notification subscription wanted.
pub(crate) struct Watch<F: Front> {
    election: Election<F>,
    cursor: Cursor,
    /// This observer claimed the read in flight, which reads after this
    /// version: it must answer it, or give it back when dropped.
    reading: Option<Option<Version>>,
    state: Arc<LockerState>,
    id: KeyId,
}

/// What an observer's reading loop does next.
pub(crate) enum Next {
    /// Yield this item.
    Yield(Observation),
    /// End: the locker is shutting down.
    End,
    /// Wait until the instant, or until the listener (a change of the
    /// locker's core: a notification for this election, a read of another
    /// observer of it ending, a resubscription, shutdown) wakes the wait
    /// early.
    Sleep(EventListener, Instant),
    /// Read now ([`Watch::read`]), then hand the reply to [`Watch::handle`].
    Read,
}

impl<F: Front> Watch<F> {
    /// What to do next, at this instant.
    pub(crate) fn next(&mut self) -> Next {
        let (state, id) = (&self.state, self.id);
        loop {
            // Registered before the checks: a change in between still wakes.
            let listener = state.cell.listen_changed();
            let now = now();
            // Read-only: an observer that only looks wakes nobody.
            let step = state.cell.read(|core| {
                (!core.is_shutting_down())
                    .then(|| core.observer_step(id, self.cursor, now))
                    .flatten()
            });
            match step {
                None => return Next::End,
                Some(ReaderStep::Yield(item, cursor)) => {
                    self.cursor = cursor;
                    return Next::Yield(item);
                }
                Some(ReaderStep::Wait(at)) => {
                    // Without a deadline, the read in flight ends by the
                    // command timeout; check again then at the latest.
                    let bound = state.config.command_timeout;
                    let at = at.unwrap_or_else(|| now + bound);
                    return Next::Sleep(listener, at);
                }
                Some(ReaderStep::Read) => {
                    if let Some(after) = state.with_core(|core| core.claim_observer_read(id)) {
                        self.reading = Some(after);
                        return Next::Read;
                    }
                    // Another observer claimed it meanwhile: wait for it.
                }
            }
        }
    }

    /// The next read (claimed by [`next`](Self::next)).
    pub(crate) fn read(&mut self) -> Call<'_, F, Result<ReadReply, Error>> {
        let after = self.reading.flatten();
        self.election.read(after, classify_read, |read| read)
    }

    /// Takes the read's reply: its items, for every observer of the name,
    /// and when to read next.
    pub(crate) fn handle(&mut self, reply: Result<ReadReply, Error>) {
        self.reading = None;
        let (id, now) = (self.id, now());
        let poll = self.state.config.notify_poll_interval;
        self.state.with_core(|core| {
            core.handle_observer_read(id, now, reply.as_ref().ok(), poll);
        });
    }
}

impl<F: Front> Drop for Watch<F> {
    fn drop(&mut self) {
        let id = self.id;
        // Dropped with its read in flight (an async step dropped): another
        // observer of the name reads.
        if self.reading.is_some() {
            self.state.with_core(|core| core.abandon_observer_read(id));
        }
        self.state
            .with_core(|core| core.handle_observer_stopped(now(), id));
    }
}

impl<F: Front> std::fmt::Debug for Observer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}
