//! Release: delete the lock by token and notify waiters (one script), after
//! releasing any orphans of the locker.

use std::sync::Arc;
use std::time::Instant;

use super::sweep::Sweep;
use super::{Io, Op, Reply, Request};
use crate::core::outcome::ReleaseOutcome;
use crate::driver::held::Held;
use crate::driver::state::LockerState;
use crate::error::{Error, Operation};

enum Phase {
    Start,
    Sweeping(Sweep),
    Release,
    Sent,
    Finished(Result<ReleaseOutcome, Error>),
}

/// One release of `held`.
pub(crate) struct Release<'a> {
    state: &'a Arc<LockerState>,
    held: &'a Held,
    phase: Phase,
    /// Redis Cluster answered `TRYAGAIN`: the release goes again with its
    /// lease key alone declared (a plain release, no hand-over).
    plain: bool,
}

impl<'a> Release<'a> {
    pub(crate) fn new(state: &'a Arc<LockerState>, held: &'a Held) -> Self {
        Release {
            state,
            held,
            phase: Phase::Start,
            plain: false,
        }
    }

    /// The cluster slot the release goes to, when there are orphans to
    /// sweep before it (none on one server).
    fn own_slot(&self) -> Option<u16> {
        self.state.quiet.as_ref()?;
        self.state.cell.read(|core| {
            let orphans = core.counts().orphans > 0;
            orphans.then(|| core.release_call(self.held.id).ok()?.slot())?
        })
    }

    /// Sends the release, or ends with what the lease's own record says
    /// when the core no longer tracks it.
    fn next_release(&mut self) -> Io<Result<ReleaseOutcome, Error>> {
        let id = self.held.id;
        let call = self.state.with_core(|core| match self.plain {
            false => core.release_call(id),
            true => core.plain_release_call(id),
        });
        // `next` left the phase at `Sent`.
        match call {
            Ok(call) => Io::Send(Request::Script { call, then: None }),
            Err(e) => {
                let shutting_down = self.state.cell.read(|core| core.is_shutting_down());
                let result = self.held.already_released(e, shutting_down);
                self.held.handle_release(&result);
                Io::Done(result)
            }
        }
    }
}

impl Op for Release<'_> {
    type Output = Result<ReleaseOutcome, Error>;

    fn next(&mut self, now: Instant) -> Io<Self::Output> {
        match std::mem::replace(&mut self.phase, Phase::Sent) {
            Phase::Start => match Sweep::start(self.state, now, self.own_slot()) {
                Some((sweep, request)) => {
                    self.phase = Phase::Sweeping(sweep);
                    Io::Send(request)
                }
                None => self.next_release(),
            },
            Phase::Release => self.next_release(),
            Phase::Finished(result) => Io::Done(result),
            phase @ (Phase::Sent | Phase::Sweeping(_)) => {
                self.phase = phase;
                Io::Wait { until: Some(now) }
            }
        }
    }

    fn handle_reply(&mut self, now: Instant, reply: Reply) {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Start) {
            Phase::Sweeping(sweep) => {
                // Unanswered orphans stay for a later operation.
                let _ = sweep.finish(self.state, now, reply);
                Phase::Release
            }
            Phase::Sent if !self.plain && reply.is_try_again() => {
                self.plain = true;
                Phase::Release
            }
            Phase::Sent => {
                let (reply, _) = reply.into_script();
                self.state.metrics.reply(Operation::Release, &reply);
                let id = self.held.id;
                let result = self.state.with_core(|core| {
                    core.handle_lease_released(now, id, reply.as_ref().ok());
                    core.handle_release_reply(id, reply)
                });
                self.held.handle_release(&result);
                Phase::Finished(result)
            }
            other => other,
        };
    }
}

/// `with_lock`'s closing release: a failure does not change the job's
/// result; it is logged, and the TTL ends the lease.
pub(crate) fn log_failed_release(result: Result<ReleaseOutcome, Error>) {
    if let Err(e) = result {
        log::warn!(
            target: "redlease",
            "LOCK_RELEASE_FAILED: with_lock (or with_leadership) could not release its lease ({}); the TTL will end it",
            e.code()
        );
    }
}

/// Logs a failed release of a lease dropped on the blocking front end
/// (debug level: nobody asked for its outcome); after shutdown released it
/// there is nothing to say.
pub(crate) fn log_failed_release_on_drop(result: Result<ReleaseOutcome, Error>) {
    match result {
        Ok(_) | Err(Error::ShuttingDown) => {}
        Err(e) => log::debug!(
            target: "redlease",
            "LOCK_RELEASE_FAILED: release on drop failed ({}); the TTL will end the lease",
            e.code()
        ),
    }
}
