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
use crate::config::AcquireOptions;
use crate::core::core::{Grant, LeaseId, WaiterStep};
use crate::core::line::WaiterId;
use crate::driver::state::LockerState;
use crate::entropy::fresh_token;
use crate::error::Error;

/// A granted lease and, with `min_replicas`, how many replicas acked it.
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) grant: Grant,
    pub(crate) replicas: Option<u32>,
}

#[derive(Debug)]
enum Pending {
    Nothing,
    Attempt,
    Sweep(Sweep),
    /// The grant did not replicate enough: its release is in flight, then
    /// the error is the result.
    Unreplicated(Error, LeaseId),
}

/// One acquire in progress; dropping it before `Done` abandons it.
#[derive(Debug)]
pub(crate) struct Acquire {
    state: Arc<LockerState>,
    id: WaiterId,
    wake: Arc<Event>,
    cancel: Option<CancelHandle>,
    /// The replication `WAIT`, when configured.
    then: Option<redis::Cmd>,
    acks: Option<redis::RedisResult<redis::Value>>,
    pending: Pending,
    /// The result, held back while a last sweep runs.
    result: Option<Result<Granted, Error>>,
    finished: bool,
}

impl Acquire {
    /// Joins `key`'s line.
    ///
    /// # Errors
    ///
    /// `InvalidKey`, `InvalidConfig`, `QueueFull`, `TooManyLeases`,
    /// `ShuttingDown`, and `Busy` for a try-once acquire behind a waiter of
    /// this locker.
    pub(crate) fn start(
        state: &Arc<LockerState>,
        key: &str,
        options: AcquireOptions,
        now: Instant,
    ) -> Result<Self, Error> {
        let resolved = options.resolve(&state.config)?;
        let wake = Arc::new(Event::new());
        if let Some(cancel) = &options.cancel {
            cancel.register(&wake);
        }
        let id = state.with_core(|core| core.acquire(now, key, fresh_token(), resolved))?;
        state.cell().set_waker(id, wake.clone());
        Ok(Acquire {
            state: state.clone(),
            id,
            wake,
            cancel: options.cancel,
            then: state.replication.map(|r| r.wait_cmd()),
            acks: None,
            pending: Pending::Nothing,
            result: None,
            finished: false,
        })
    }

    fn finish(&mut self, result: Result<Granted, Error>) -> Io<Result<Granted, Error>> {
        self.finished = true;
        let counters = &self.state.counters;
        match &result {
            Ok(_) => counters.acquired(),
            Err(Error::WaitTimeout { .. }) => counters.wait_timeout(),
            Err(_) => {}
        }
        Io::Done(result)
    }

    /// The grant's replication verdict: the lease, or its release first.
    fn after_grant(&mut self, now: Instant, grant: Grant) -> Io<Result<Granted, Error>> {
        let Some(replication) = self.state.replication else {
            return self.hold_back(now, Ok(Granted {
                grant,
                replicas: None,
            }));
        };
        let acks = self.acks.take().unwrap_or(Ok(redis::Value::Int(0)));
        match replication.verdict(acks) {
            Ok(acked) => self.hold_back(now, Ok(Granted {
                grant,
                replicas: Some(acked),
            })),
            Err(e) => {
                // Not replicated enough to count as held: release it first.
                let lease = grant.lease;
                match self.state.with_core(|core| core.release_call(lease)) {
                    Ok(call) => {
                        self.pending = Pending::Unreplicated(e, lease);
                        Io::Send(Request::Script { call, then: None })
                    }
                    Err(_) => self.hold_back(now, Err(e)),
                }
            }
        }
    }

    /// Ends with `result`, after a last sweep if orphans wait (late replies
    /// at shutdown, a failed attempt whose outcome stayed unknown).
    fn hold_back(&mut self, now: Instant, result: Result<Granted, Error>) -> Io<Result<Granted, Error>> {
        self.result = Some(result);
        self.next_held_back(now)
    }

    fn next_held_back(&mut self, now: Instant) -> Io<Result<Granted, Error>> {
        if let Some((sweep, request)) = Sweep::start(&self.state, now) {
            self.pending = Pending::Sweep(sweep);
            return Io::Send(request);
        }
        match self.result.take() {
            Some(result) => self.finish(result),
            None => self.finish(Err(Error::Cancelled)),
        }
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
        if let Some((sweep, request)) = Sweep::start(&self.state, now) {
            self.pending = Pending::Sweep(sweep);
            return Io::Send(request);
        }
        let (id, cancelled) = (self.id, self.cancel.as_ref().is_some_and(CancelHandle::is_cancelled));
        let step = self.state.with_core(|core| {
            if cancelled {
                core.cancel(id);
            }
            core.poll_waiter(now, id)
        });
        match step {
            WaiterStep::Attempt(call) => {
                self.pending = Pending::Attempt;
                Io::Send(Request::Script {
                    call,
                    then: self.then.clone(),
                })
            }
            WaiterStep::Wait(until) => Io::Wait { until },
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
        match std::mem::replace(&mut self.pending, Pending::Nothing) {
            Pending::Attempt => {
                let (reply, then) = reply.into_script();
                self.acks = then;
                let id = self.id;
                let summary = self
                    .state
                    .with_core(|core| core.handle_acquire_reply(now, id, reply));
                if summary.is_busy() {
                    self.state.counters.busy_reply();
                }
            }
            Pending::Sweep(sweep) => sweep.finish(&self.state, reply),
            Pending::Unreplicated(e, lease) => {
                // The release's outcome changes nothing for the caller: the
                // lease is not held either way. A failed release stays
                // tracked for shutdown; the TTL ends it in any case.
                let (reply, _) = reply.into_script();
                let _ = self
                    .state
                    .with_core(|core| core.handle_release_reply(lease, reply));
                self.result = Some(Err(e));
            }
            Pending::Nothing => {}
        }
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        self.state.cell().remove_waker(self.id);
        if let Some(Ok(granted)) = self.result.take() {
            // Dropped during its last sweep: the lease nobody took.
            let lease = granted.grant.lease;
            self.state.with_core(|core| core.abandon_lease(lease));
        }
        if !self.finished {
            let id = self.id;
            self.state
                .with_core(|core| core.abandon(crate::clock::now(), id));
        }
    }
}
