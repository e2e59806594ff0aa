//! The `with_lock(extend(true))` renewer: renews the lease every lease/2,
//! counted from when the acquire (then each renewal) was sent, until told
//! to stop. A renewal that fails with a Redis error is sent again after a
//! short backoff while the local deadline leaves time (SPEC §7); `lost`
//! fires on `Expired`/`Conflict`, or when the deadline passes unconfirmed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use event_listener::{Event, EventListener};

use super::renew::Renew;
use super::{Io, Op, Reply};
use crate::core::core::{earliest_of, FAILURE_BACKOFF};
use crate::core::lease::deadline_after;
use crate::core::outcome::RenewOutcome;
use crate::driver::held::Held;
use crate::driver::state::LockerState;
use crate::error::{Error, LostCause};
use crate::lost::Lost;

/// Tells a renewer to stop, waking it from its wait.
#[derive(Debug, Default)]
pub(crate) struct StopSignal {
    stopped: AtomicBool,
    event: Event,
}

impl StopSignal {
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.event.notify(usize::MAX);
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

/// The renewal loop of one extended lease.
#[derive(Debug)]
pub(crate) struct Renewer<'a> {
    state: &'a Arc<LockerState>,
    held: &'a Held,
    lost: &'a Lost,
    stop: &'a StopSignal,
    renew: Option<Renew<'a>>,
    /// After a failed renewal: when to send it again, and why it failed.
    retry: Option<(Option<Instant>, Error)>,
    failures: usize,
}

impl<'a> Renewer<'a> {
    pub(crate) fn new(
        state: &'a Arc<LockerState>,
        held: &'a Held,
        lost: &'a Lost,
        stop: &'a StopSignal,
    ) -> Self {
        Renewer {
            state,
            held,
            lost,
            stop,
            renew: None,
            retry: None,
            failures: 0,
        }
    }

    /// Takes a renewal's result; `false` when the renewer is done.
    fn handle_result(&mut self, now: Instant, result: Result<RenewOutcome, Error>) -> bool {
        match result {
            Ok(RenewOutcome::Renewed) => {
                self.lost.extend_to(self.held.valid_until().flatten());
                self.retry = None;
                self.failures = 0;
                true
            }
            Ok(RenewOutcome::Expired) => {
                self.lost.fire(LostCause::Expired);
                false
            }
            Ok(RenewOutcome::Conflict) => {
                self.lost.fire(LostCause::Conflict);
                false
            }
            Err(e @ (Error::ProviderFailed { .. } | Error::OutcomeUnknown { .. } | Error::UnexpectedReply { .. })) => {
                // Renew only extends our own token: sending it again is
                // harmless, and one slow reply must not end the job.
                let delay = FAILURE_BACKOFF[self.failures.min(FAILURE_BACKOFF.len() - 1)];
                self.failures += 1;
                self.retry = Some((deadline_after(now, delay), e));
                true
            }
            Err(e) => {
                self.lost.fire(LostCause::RenewFailed(Box::new(e)));
                false
            }
        }
    }
}

impl Op for Renewer<'_> {
    type Output = ();

    fn listener(&self) -> Option<EventListener> {
        Some(self.stop.event.listen())
    }

    fn next(&mut self, now: Instant) -> Io<()> {
        loop {
            if let Some(renew) = &mut self.renew {
                match renew.next(now) {
                    Io::Done(result) => {
                        self.renew = None;
                        if !self.handle_result(now, result) {
                            return Io::Done(());
                        }
                    }
                    other => return other.map_done(|_| ()),
                }
            }
            if self.stop.is_stopped() {
                return Io::Done(());
            }
            // `None`: the lease ended (released, or seen gone).
            let Some(deadline) = self.held.valid_until() else {
                return Io::Done(());
            };
            if deadline.is_some_and(|d| now >= d) {
                let cause = match self.retry.take() {
                    Some((_, e)) => LostCause::RenewFailed(Box::new(e)),
                    None => LostCause::DeadlinePassed,
                };
                self.lost.fire(cause);
                return Io::Done(());
            }
            let half = self.held.lease_length() / 2;
            let due = match &self.retry {
                Some((at, _)) => *at,
                None => deadline.and_then(|d| d.checked_sub(half)),
            };
            if due.is_some_and(|at| now >= at) {
                self.renew = Some(Renew::retrying(self.state, self.held));
                continue;
            }
            return Io::Wait {
                until: earliest_of(due, deadline),
            };
        }
    }

    fn handle_reply(&mut self, now: Instant, reply: Reply) {
        if let Some(renew) = &mut self.renew {
            renew.handle_reply(now, reply);
        }
    }
}
