//! Shutdown: refuse new acquires, end every wait, let attempts in flight
//! finish, release every tracked lease and orphan in parallel, and wait for
//! the subscriber to stop, all within `shutdown_timeout` (`Locker::shutdown`'s docs).

use std::sync::Arc;
use std::time::Instant;

use event_listener::EventListener;

use super::{Io, Op, Reply, Request};
use crate::core::lease::deadline_after;
use crate::core::script::classify_release;
use crate::driver::state::LockerState;
use crate::error::{Error, Failure, Operation};

enum Phase {
    Begin,
    /// Waiting for attempts in flight.
    Draining,
    Cleaning,
    /// Waiting for the subscriber thread to stop.
    Stopping,
}

/// What the cleanup found.
#[derive(Debug, Default)]
struct Tally {
    /// Not answered in time (attempts in flight, releases without reply).
    timed_out: usize,
    /// Answered with a failure, or of unknown outcome.
    failed: usize,
    /// The first failure of one release.
    failure: Option<redis::RedisError>,
    /// The batch as a whole could not be sent.
    batch_failure: Option<Failure>,
}

/// One shutdown of a locker.
pub(crate) struct Shutdown {
    state: Arc<LockerState>,
    deadline: Option<Instant>,
    phase: Phase,
    tally: Tally,
    /// How many releases the cleanup sent.
    sent: usize,
}

impl Shutdown {
    pub(crate) fn new(state: &Arc<LockerState>) -> Self {
        Shutdown {
            state: state.clone(),
            deadline: None,
            phase: Phase::Begin,
            tally: Tally::default(),
            sent: 0,
        }
    }

    fn past_deadline(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// What shutdown reports (logs `LOCK_CLEANUP_FAILED` when not all was
    /// confirmed): `CleanupTimeout` when time ran out, the Redis error when
    /// the cleanup could not be sent at all, `CleanupFailed` when some
    /// releases were refused or failed.
    fn verdict(&mut self) -> Result<(), Error> {
        let tally = std::mem::take(&mut self.tally);
        let unconfirmed = tally.timed_out + tally.failed;
        if unconfirmed == 0 {
            return Ok(());
        }
        log::error!(
            target: "redlease",
            "LOCK_CLEANUP_FAILED: {unconfirmed} lease(s) not confirmed released at shutdown; \
             their TTL will end them"
        );
        if let Some(f) = tally.batch_failure {
            return Err(f.into_error(Operation::Shutdown));
        }
        // A failure is only noted with `failed` counted.
        Err(match tally.failed {
            0 => Error::CleanupTimeout {
                unconfirmed,
                timeout: self.state.config.shutdown_timeout,
            },
            _ => Error::CleanupFailed {
                unconfirmed,
                source: tally.failure,
            },
        })
    }
}

impl Op for Shutdown {
    type Output = Result<(), Error>;

    fn listener(&self) -> Option<EventListener> {
        Some(self.state.cell.listen_changed())
    }

    fn next(&mut self, now: Instant) -> Io<Self::Output> {
        let mut until = self.deadline;
        loop {
            match self.phase {
                Phase::Begin => {
                    until = deadline_after(now, self.state.config.shutdown_timeout);
                    self.deadline = until;
                    let first = self.state.with_core(|core| {
                        let first = !core.is_shutting_down();
                        core.begin_shutdown();
                        first
                    });
                    // Later calls find the locker already shut down.
                    if !first {
                        return Io::Done(Ok(()));
                    }
                    self.phase = Phase::Draining;
                }
                Phase::Draining => {
                    let in_flight = self.state.cell.read(|core| core.attempts_in_flight());
                    if in_flight > 0 && !self.past_deadline(now) {
                        return Io::Wait { until };
                    }
                    let (in_flight, calls) = self
                        .state
                        .with_core(|core| (core.attempts_in_flight(), core.take_cleanup()));
                    self.tally.timed_out += in_flight;
                    if calls.is_empty() || self.past_deadline(now) {
                        self.tally.timed_out += calls.len();
                        self.phase = Phase::Stopping;
                    } else {
                        self.phase = Phase::Cleaning;
                        self.sent = calls.len();
                        return Io::Send(Request::Releases { calls, until });
                    }
                }
                // Only `handle_reply` leaves it.
                Phase::Cleaning => return Io::Wait { until: Some(now) },
                Phase::Stopping => {
                    if self.state.subscribers_running() > 0 && !self.past_deadline(now) {
                        return Io::Wait { until };
                    }
                    return Io::Done(self.verdict());
                }
            }
        }
    }

    fn handle_reply(&mut self, _now: Instant, reply: Reply) {
        match reply.into_releases(self.sent) {
            Ok(replies) => {
                for reply in replies {
                    match reply {
                        Some(Ok(value)) if classify_release(&value).is_ok() => {}
                        Some(Ok(_)) => self.tally.failed += 1,
                        Some(Err(Failure::NotSent(e) | Failure::Sent(e))) => {
                            self.tally.failed += 1;
                            self.tally.failure.get_or_insert(e);
                        }
                        None => self.tally.timed_out += 1,
                    }
                }
            }
            // No reply in time: as if the deadline had passed.
            Err(Failure::Sent(e)) if e.is_timeout() => self.tally.timed_out += self.sent,
            Err(f) => {
                self.tally.failed += self.sent;
                self.tally.batch_failure = Some(f);
            }
        }
        self.phase = Phase::Stopping;
    }
}
