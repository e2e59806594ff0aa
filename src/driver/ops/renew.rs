//! Renew: extend a held lease to its full length by token, then, with
//! `min_replicas`, check the renewal replicated (releasing the lease if not).

use std::sync::Arc;
use std::time::Instant;

use super::{Io, Op, Reply, Request};
use crate::core::outcome::RenewOutcome;
use crate::driver::held::Held;
use crate::driver::state::LockerState;
use crate::error::{Error, Operation};

enum Phase {
    Start,
    Sent,
    /// Too few replicas acknowledged: release the lease, then fail.
    Unreplicated(Error),
    Releasing(Error),
    Finished(Result<RenewOutcome, Error>),
}

/// One renew of `held`.
pub(crate) struct Renew<'a> {
    state: &'a Arc<LockerState>,
    held: &'a Held,
    /// A renewer that sends again after a failure: an unknown outcome keeps
    /// the old deadline instead of ending the lease (`with_lock`'s docs).
    retrying: bool,
    phase: Phase,
}

impl<'a> Renew<'a> {
    pub(crate) fn new(state: &'a Arc<LockerState>, held: &'a Held, retrying: bool) -> Self {
        Renew {
            state,
            held,
            retrying,
            phase: Phase::Start,
        }
    }
}

impl Op for Renew<'_> {
    type Output = Result<RenewOutcome, Error>;

    fn next(&mut self, now: Instant) -> Io<Self::Output> {
        match std::mem::replace(&mut self.phase, Phase::Sent) {
            Phase::Start => {
                let lease_ms = match self.held.begin_renew(now) {
                    Ok(ms) => ms,
                    Err(outcome) => return Io::Done(Ok(outcome)),
                };
                let id = self.held.id;
                match self.state.with_core(|core| core.renew_call(id, lease_ms)) {
                    Ok(call) => Io::Send(Request::Script {
                        call,
                        then: self.state.replication.map(|r| r.wait_cmd()),
                    }),
                    Err(e) => {
                        self.held.handle_release(&Err(e.clone()));
                        Io::Done(Err(e))
                    }
                }
            }
            Phase::Unreplicated(e) => {
                match self.state.with_core(|core| core.release_call(self.held.id)) {
                    Ok(call) => {
                        self.phase = Phase::Releasing(e);
                        Io::Send(Request::Script { call, then: None })
                    }
                    Err(_) => Io::Done(Err(e)),
                }
            }
            Phase::Finished(result) => Io::Done(result),
            // `handle_reply` always moves a sent phase on.
            phase @ (Phase::Sent | Phase::Releasing(_)) => {
                self.phase = phase;
                Io::Wait { until: Some(now) }
            }
        }
    }

    fn handle_reply(&mut self, _now: Instant, reply: Reply) {
        let (reply, acks) = reply.into_script();
        let (state, id) = (self.state, self.held.id);
        self.phase = match std::mem::replace(&mut self.phase, Phase::Start) {
            Phase::Sent => {
                state.metrics.reply(Operation::Renew, &reply);
                let (result, outcome) = state.with_core(|core| core.handle_renew_reply(id, reply));
                self.held.handle_renew(result, self.retrying);
                let renewed = matches!(outcome, Ok(RenewOutcome::Renewed));
                let acks = acks.unwrap_or(Ok(redis::Value::Int(0)));
                let replication = state.replication.filter(|_| renewed);
                match replication.map(|r| r.verdict(acks)) {
                    Some(Err(e)) => Phase::Unreplicated(e),
                    Some(Ok(acked)) => {
                        self.held.set_replicas(acked);
                        Phase::Finished(outcome)
                    }
                    None => Phase::Finished(outcome),
                }
            }
            Phase::Releasing(e) => {
                let result = state.with_core(|core| core.handle_release_reply(id, reply));
                self.held.handle_release(&result);
                Phase::Finished(Err(e))
            }
            other => other,
        };
    }
}
