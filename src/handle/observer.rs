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
use super::locker::SharedOf;
use crate::clock::now;
use crate::core::election::{classify_read, read_call, ReadReply};
use crate::core::names::KeyId;
use crate::core::observe::Observation;
use crate::core::reader::{Cursor, ReaderStep};
use crate::driver::ops::{Io, Op, Reply, Single};
use crate::driver::state::LockerState;
use crate::error::{Error, Operation};
use crate::front::Front;

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
    pub(crate) step: Option<Step<F>>,
}

/// The async front end's drive of a watch to its next item, owning it.
type Step<F> = Pin<Box<dyn Future<Output = (Watch<F>, Option<Observation>)> + Send>>;

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
    /// The read this observer claimed, in flight: it must answer it, or
    /// give it back when dropped.
    reading: Option<Single<ReadReply>>,
    state: Arc<LockerState>,
    id: KeyId,
}

/// The reading loop as an operation, which the front end drives (as any
/// other, with its own send and wait) to the next item, or to `None` once
/// the locker shuts down.
impl<F: Front> Op for &mut Watch<F> {
    type Output = Option<Observation>;

    /// A change of the locker's core (a notification for this election, a
    /// read of another observer of it ending, a resubscription, shutdown)
    /// ends a wait early. Registered before the checks: a change in
    /// between still wakes.
    fn listener(&self) -> Option<EventListener> {
        Some(self.state.cell.listen_changed())
    }

    fn next(&mut self, now: Instant) -> Io<Option<Observation>> {
        loop {
            if let Some(read) = &mut self.reading {
                match read.next(now) {
                    Io::Send(request) => return Io::Send(request),
                    Io::Done(reply) => self.handle(reply, now),
                    // Never: a read's reply comes before its end.
                    Io::Wait { until } => return Io::Wait { until },
                }
            }
            let (state, id) = (&self.state, self.id);
            // Read-only: an observer that only looks wakes nobody.
            let step = state.cell.read(|core| {
                (!core.is_shutting_down())
                    .then(|| core.observer_step(id, self.cursor, now))
                    .flatten()
            });
            match step {
                None => return Io::Done(None),
                Some(ReaderStep::Yield(item, cursor)) => {
                    self.cursor = cursor;
                    return Io::Done(Some(item));
                }
                Some(ReaderStep::Wait(at)) => {
                    // Without a deadline, the read in flight ends by the
                    // command timeout; check again then at the latest.
                    let at = at.unwrap_or_else(|| now + state.config.command_timeout);
                    return Io::Wait { until: Some(at) };
                }
                Some(ReaderStep::Read) => {
                    // None: another observer claimed it meanwhile; wait for it.
                    if let Some(after) = state.with_core(|core| core.claim_observer_read(id)) {
                        let call = read_call(&self.election.names, after);
                        let read = Single::new(state, Operation::Read, call, classify_read);
                        self.reading = Some(read);
                    }
                }
            }
        }
    }

    fn handle_reply(&mut self, now: Instant, reply: Reply) {
        if let Some(read) = &mut self.reading {
            read.handle_reply(now, reply);
        }
    }
}

impl<F: Front> Watch<F> {
    pub(crate) fn shared(&self) -> &SharedOf<F> {
        self.election.shared()
    }

    /// Takes the claimed read's reply: its items, for every observer of
    /// the name, and when to read next.
    fn handle(&mut self, reply: Result<ReadReply, Error>, now: Instant) {
        self.reading = None;
        let (id, poll) = (self.id, self.state.config.notify_poll_interval);
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
