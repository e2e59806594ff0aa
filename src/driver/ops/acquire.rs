//! Acquire-and-wait: join the key's line, send the acquire script when this
//! waiter is the head, wait for a wake-up or a retry instant otherwise, and
//! after a grant apply the replication check. Orphans of the locker are
//! released on the way, before this waiter's own attempt.

use std::sync::Arc;
use std::time::Instant;

use event_listener::{Event, EventListener};

use super::sweep::Sweep;
use super::{Io, Op, Reply, Request};
use crate::cancel::CancelHandle;
use crate::config::{AcquireOptions, ResolvedOptions};
use crate::core::core::{AttemptSummary, Core, Grant, LeaseId, WaiterStep};
use crate::core::election::LeaderValue;
use crate::core::lease::deadline_after;
use crate::core::line::WaiterId;
use crate::core::multi::KeySet;
use crate::core::names::{Kind, OwnerToken, Want};
use crate::core::script::ScriptCall;
use crate::driver::metrics::{AcquireTimer, HoldTimer};
use crate::driver::state::LockerState;
use crate::entropy::fresh_token;
use crate::error::{Error, Operation};

/// A granted lease and, with `min_replicas`, how many replicas acked it.
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) grant: Grant,
    pub(crate) replicas: Option<u32>,
    /// The hold time's metric, from the grant.
    pub(crate) hold: HoldTimer,
}

/// An acquire's next step.
type Step = Io<Result<Granted, Error>>;

enum Pending {
    Nothing,
    Attempt,
    Sweep(Sweep),
    /// The removal of the locker's registration for this key, whose last
    /// waiter this was; its reply changes nothing.
    Deregister,
    /// The grant did not replicate enough: its release is in flight, then
    /// the error is the result.
    Unreplicated(Error, LeaseId),
}

/// One acquire in progress; dropping it before `Done` abandons it.
pub(crate) struct Acquire {
    state: Arc<LockerState>,
    id: WaiterId,
    wake: Arc<Event>,
    cancel: Option<CancelHandle>,
    acks: Option<redis::RedisResult<redis::Value>>,
    pending: Pending,
    /// The result, held back while a last sweep runs.
    result: Option<Result<Granted, Error>>,
    /// An attempt the core handed out, sent once the sweep before it is
    /// answered (the orphans' releases go first: one may be this key's).
    deferred: Option<ScriptCall>,
    /// A sweep of this acquire went unanswered: Redis is out of reach, and
    /// the orphans wait for a later operation instead of a resend loop.
    sweep_unanswered: bool,
    finished: bool,
    /// The wait's metric and the attempts' (feature `metrics`).
    timer: AcquireTimer,
}

impl Acquire {
    /// Joins the line of what `want` names on `key` (its lock, or a permit
    /// of its semaphore; an election's candidate campaigns with `value`).
    ///
    /// # Errors
    ///
    /// `InvalidKey`, `InvalidConfig`, `QueueFull`, `TooManyLeases`,
    /// `ShuttingDown`, and `Busy` for a try-once acquire behind a waiter of
    /// this locker.
    pub(crate) fn start(
        state: &Arc<LockerState>,
        key: &str,
        want: Want,
        value: Option<LeaderValue>,
        options: AcquireOptions,
        now: Instant,
    ) -> Result<Self, Error> {
        Self::admit(state, want.kind(), options, now, |core, token, resolved| {
            core.acquire_valued(now, key, want, value, token, resolved)
        })
    }

    /// As [`start`](Self::start), for a multi-key lease of `keys`.
    pub(crate) fn start_multi(
        state: &Arc<LockerState>,
        keys: KeySet,
        options: AcquireOptions,
        now: Instant,
    ) -> Result<Self, Error> {
        Self::admit(state, Kind::Multi, options, now, |core, token, resolved| {
            core.acquire_multi(now, keys, token, resolved)
        })
    }

    /// Puts a waiter in its line with `join`, and this operation in charge
    /// of it.
    fn admit(
        state: &Arc<LockerState>,
        kind: Kind,
        options: AcquireOptions,
        now: Instant,
        join: impl FnOnce(&mut Core, OwnerToken, ResolvedOptions) -> Result<WaiterId, Error>,
    ) -> Result<Self, Error> {
        let mut timer = state.metrics.acquire(kind, now);
        let admitted = options
            .resolve(&state.config)
            .and_then(|resolved| state.with_core(|core| join(core, fresh_token(), resolved)));
        let id = admitted.inspect_err(|e| timer.done(now, Err(e)))?;
        let wake = Arc::new(Event::new());
        if let Some(cancel) = &options.cancel {
            cancel.register(&wake);
        }
        state.cell.set_waker(id, wake.clone());
        Ok(Acquire {
            state: state.clone(),
            id,
            wake,
            cancel: options.cancel,
            acks: None,
            pending: Pending::Nothing,
            result: None,
            deferred: None,
            sweep_unanswered: false,
            finished: false,
            timer,
        })
    }

    /// The grant's replication verdict: the lease, or its release first.
    fn after_grant(&mut self, now: Instant, grant: Grant) -> Step {
        let acks = self.acks.take().unwrap_or(Ok(redis::Value::Int(0)));
        let replicas = match self.state.replication.map(|r| r.verdict(acks)).transpose() {
            Ok(replicas) => replicas,
            Err(e) => {
                // Not replicated enough to count as held: release it first.
                let lease = grant.lease;
                return match self.state.with_core(|core| core.release_call(lease)) {
                    Ok(call) => {
                        self.pending = Pending::Unreplicated(e, lease);
                        Io::Send(Request::Script { call, then: None })
                    }
                    Err(_) => self.hold_back(now, Err(e)),
                };
            }
        };
        let hold = self.timer.hold(now);
        let granted = Granted {
            grant,
            replicas,
            hold,
        };
        self.hold_back(now, Ok(granted))
    }

    /// Ends with `result`, after a last sweep of late grants at shutdown.
    fn hold_back(&mut self, now: Instant, result: Result<Granted, Error>) -> Step {
        self.result = Some(result);
        self.next_held_back(now)
    }

    /// Releases the locker's orphans, if any, unless a sweep of this
    /// acquire already went unanswered; `own`: the cluster slot of the
    /// attempt it goes before.
    fn sweep(&mut self, now: Instant, own: Option<u16>) -> Option<Step> {
        if self.sweep_unanswered {
            return None;
        }
        let (sweep, request) = Sweep::start(&self.state, now, own)?;
        self.pending = Pending::Sweep(sweep);
        Some(Io::Send(request))
    }

    /// Sends the acquire script `call`, with the replication `WAIT`.
    fn attempt(&mut self, call: ScriptCall) -> Step {
        self.pending = Pending::Attempt;
        self.timer.attempt_sent();
        let then = self.state.replication.map(|r| r.wait_cmd());
        Io::Send(Request::Script { call, then })
    }

    /// Ends with the held-back result, after what must go first: a last
    /// sweep at shutdown, the key's deregistration after a failed wait.
    fn next_held_back(&mut self, now: Instant) -> Step {
        // Before shutdown's cleanup, what is left to release goes with it,
        // so that shutdown returns once all is answered. After it, nobody
        // else may come to release late grants. Else the next operation
        // does: sweeping now could race this waiter's own unanswered
        // attempt on another connection.
        let (shutting_down, awaits_cleanup) = self
            .state
            .cell
            .read(|core| (core.is_shutting_down(), core.awaits_cleanup()));
        if shutting_down && !awaits_cleanup {
            if let Some(sweep) = self.sweep(now, None) {
                return sweep;
            }
        }
        // A wait that ended without the lease takes the locker out of the
        // key's hand-over queue when it was the last (docs/PROTOCOL.md §4.4):
        // only that, not the orphans, for the reason above.
        if matches!(self.result, Some(Err(_))) && !self.sweep_unanswered && !awaits_cleanup {
            let calls = self.state.with_core(|core| core.take_deregistrations());
            if !calls.is_empty() {
                self.pending = Pending::Deregister;
                let until = deadline_after(now, self.state.config.command_timeout);
                return Io::Send(Request::Releases { calls, until });
            }
        }
        let result = self.result.take().unwrap_or(Err(Error::Cancelled));
        self.finished = true;
        self.timer.done(now, result.as_ref().map(|_| ()));
        let counters = &self.state.counters;
        match &result {
            Ok(_) => counters.acquired(),
            Err(Error::WaitTimeout { .. }) => counters.wait_timeout(),
            Err(_) => {}
        }
        Io::Done(result)
    }
}

impl Op for Acquire {
    type Output = Result<Granted, Error>;

    fn listener(&self) -> Option<EventListener> {
        Some(self.wake.listen())
    }

    fn next(&mut self, now: Instant) -> Io<Self::Output> {
        if self.result.is_some() {
            return self.next_held_back(now);
        }
        if let Some(call) = self.deferred.take() {
            return self.attempt(call);
        }
        let cancelled = self.cancel.as_ref().is_some_and(CancelHandle::is_cancelled);
        let step = self.state.with_core(|core| {
            if cancelled {
                core.cancel(self.id);
            }
            core.poll_waiter(now, self.id)
        });
        match step {
            WaiterStep::Attempt(call) => {
                let own = self.state.quiet.as_ref().and_then(|_| call.slot());
                if let Some(sweep) = self.sweep(now, own) {
                    self.deferred = Some(call);
                    return sweep;
                }
                self.attempt(call)
            }
            // Woken by a lease dropped while this waiter waits for its key:
            // release it now, within one round trip.
            WaiterStep::Wait(until) => self.sweep(now, None).unwrap_or(Io::Wait { until }),
            WaiterStep::Done(Ok(grant)) => {
                // The waiter is gone from the core: nothing left to abandon.
                self.finished = true;
                self.after_grant(now, grant)
            }
            WaiterStep::Done(Err(e)) => {
                self.finished = true;
                self.hold_back(now, Err(e))
            }
        }
    }

    fn handle_reply(&mut self, now: Instant, reply: Reply) {
        let state = &self.state;
        match std::mem::replace(&mut self.pending, Pending::Nothing) {
            Pending::Attempt => {
                let (reply, then) = reply.into_script();
                state.metrics.reply(Operation::Acquire, &reply);
                self.acks = then;
                let summary =
                    state.with_core(|core| core.handle_acquire_reply(now, self.id, reply));
                if summary.is_busy() {
                    state.counters.busy_reply();
                }
                if summary == AttemptSummary::HandoverRefused {
                    log::warn!(
                        target: "redlease",
                        "LOCK_HANDOVER_UNAVAILABLE: redis refused the hand-over queue's keys (NOPERM); \
                         this locker waits without the hand-over"
                    );
                }
            }
            Pending::Sweep(sweep) => self.sweep_unanswered |= !sweep.finish(state, now, reply),
            Pending::Unreplicated(e, lease) => {
                // The release's outcome changes nothing for the caller: the
                // lease is not held either way. A failed release stays
                // tracked for shutdown; the TTL ends it in any case.
                let (reply, _) = reply.into_script();
                let _ = state.with_core(|core| core.handle_release_reply(lease, reply));
                self.result = Some(Err(e));
            }
            Pending::Deregister | Pending::Nothing => {}
        }
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        self.timer.abandoned();
        let state = &self.state;
        state.cell.remove_waker(self.id);
        if let Some(Ok(granted)) = self.result.take() {
            // Dropped during its last sweep: the lease nobody took.
            state.with_core(|core| core.abandon_lease(granted.grant.lease));
        }
        if !self.finished {
            state.with_core(|core| core.abandon(crate::clock::now(), self.id));
        }
    }
}
