//! The `with_lock(extend(true))` renewer: renews the lease every lease/2,
//! counted from when the acquire (then each renewal) was sent, until told
//! to stop. A renewal that fails with a Redis error is sent again after a
//! short backoff while the local deadline leaves time (`with_lock`'s docs); `lost`
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
        self.stop_quietly();
        self.wake();
    }

    /// Stops the renewer at its next step without waking it: a renewal not
    /// yet sent is never sent.
    pub(crate) fn stop_quietly(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Wakes the renewer's loop (to see a quiet stop now).
    pub(crate) fn wake(&self) {
        self.event.notify(usize::MAX);
    }
}

/// The renewal loop of one extended lease.
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
        let cause = match result {
            Ok(RenewOutcome::Renewed) => {
                self.lost.extend_to(self.held.valid_until().flatten());
                (self.retry, self.failures) = (None, 0);
                return true;
            }
            Ok(RenewOutcome::Expired) => LostCause::Expired,
            Ok(RenewOutcome::Conflict) => LostCause::Conflict,
            Err(
                e @ (Error::ProviderFailed { .. }
                | Error::OutcomeUnknown { .. }
                | Error::UnexpectedReply { .. }),
            ) => {
                // Renew only extends our own token: sending it again is
                // harmless, and one slow reply must not end the job.
                let delay = FAILURE_BACKOFF[self.failures.min(FAILURE_BACKOFF.len() - 1)];
                self.failures += 1;
                log::debug!(
                    target: "redlease",
                    "LOCK_RENEW_RETRY: a renewal failed ({}); sending it again in {delay:?} \
                     while the lease has time left",
                    e.code()
                );
                self.retry = Some((deadline_after(now, delay), e));
                return true;
            }
            Err(e) => LostCause::RenewFailed(Box::new(e)),
        };
        self.lost.fire(cause);
        false
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
                    Io::Send(request) => return Io::Send(request),
                    Io::Wait { until } => return Io::Wait { until },
                }
            }
            if self.stop.stopped.load(Ordering::SeqCst) {
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
            let due = match &self.retry {
                Some((at, _)) => *at,
                None => deadline.and_then(|d| d.checked_sub(self.held.lease_length() / 2)),
            };
            if due.is_some_and(|at| now >= at) {
                self.renew = Some(Renew::new(self.state, self.held, true));
                continue;
            }
            let until = earliest_of(due, deadline);
            return Io::Wait { until };
        }
    }

    fn handle_reply(&mut self, now: Instant, reply: Reply) {
        if let Some(renew) = &mut self.renew {
            renew.handle_reply(now, reply);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The renewer driven by hand: replies are made up, time is moved by
    //! hand; no Redis.

    use std::time::Duration;

    use redis::Value;

    use super::*;
    use crate::config::{AcquireOptions, Config};
    use crate::driver::ops::{Acquire, Request};
    use crate::driver::target::Source;
    use crate::error::Failure;

    const LEASE: Duration = Duration::from_millis(1000);

    fn state() -> Arc<LockerState> {
        let client = redis::Client::open("redis://127.0.0.1:1/").expect("a valid url");
        LockerState::new(Config::new("t").lease(LEASE), Source::Standalone(client))
    }

    /// A lease granted by an acquire sent at `t0`.
    fn held(state: &Arc<LockerState>, t0: Instant) -> Held {
        let mut acquire = Acquire::start(
            state,
            "k",
            crate::core::names::Want::Lock,
            None,
            AcquireOptions::new(),
            t0,
        )
        .expect("admitted");
        assert!(matches!(acquire.next(t0), Io::Send(Request::Script { .. })));
        acquire.handle_reply(t0, script_reply(Ok(Value::BulkString(b"5".to_vec()))));
        match acquire.next(t0) {
            Io::Done(Ok(granted)) => Held::granted(granted),
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    /// The loss signal of an extended lease, and the renewer's stop.
    fn armed(held: &Held) -> (Lost, StopSignal) {
        (held.lost_signal(true), StopSignal::default())
    }

    fn script_reply(reply: Result<Value, Failure>) -> Reply {
        Reply::Script { reply, then: None }
    }

    fn timed_out() -> Result<Value, Failure> {
        Err(Failure::Sent(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "t",
        ))))
    }

    #[track_caller]
    fn expect_wait(io: Io<()>) -> Option<Instant> {
        match io {
            Io::Wait { until } => until,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    #[track_caller]
    fn expect_renew(io: Io<()>) {
        match io {
            Io::Send(Request::Script { call, .. }) => {
                assert_eq!(call.kind, crate::core::script::ScriptKind::Renew)
            }
            other => panic!("expected a renew, got {other:?}"),
        }
    }

    #[test]
    fn the_first_renewal_is_due_half_a_lease_after_the_acquire_was_sent() {
        // Bug: the first renewal counted from when the renewer started.
        let (state, t0) = (state(), crate::clock::now());
        let held = held(&state, t0);
        let (lost, stop) = armed(&held);
        let mut renewer = Renewer::new(&state, &held, &lost, &stop);
        let started = t0 + Duration::from_millis(300);
        assert_eq!(expect_wait(renewer.next(started)), Some(t0 + LEASE / 2));
        let due = t0 + LEASE / 2;
        expect_renew(renewer.next(due));
        renewer.handle_reply(due, script_reply(Ok(Value::Int(1))));
        assert_eq!(
            expect_wait(renewer.next(due)),
            Some(due + LEASE / 2),
            "the next one counts from the renewal's submission"
        );
        assert!(!lost.is_lost());
    }

    #[test]
    fn a_renewal_without_reply_is_sent_again_after_a_backoff_and_the_lease_stays_valid() {
        let (state, t0) = (state(), crate::clock::now());
        let held = held(&state, t0);
        let (lost, stop) = armed(&held);
        let mut renewer = Renewer::new(&state, &held, &lost, &stop);
        let due = t0 + LEASE / 2;
        expect_renew(renewer.next(due));
        let replied = due + Duration::from_millis(200);
        renewer.handle_reply(replied, script_reply(timed_out()));
        assert_eq!(
            held.valid_until(),
            Some(Some(t0 + LEASE)),
            "an unknown renewal keeps the old deadline"
        );
        let retry = replied + FAILURE_BACKOFF[0];
        assert_eq!(expect_wait(renewer.next(replied)), Some(retry));
        expect_renew(renewer.next(retry));
        renewer.handle_reply(retry, script_reply(Ok(Value::Int(1))));
        assert_eq!(held.valid_until(), Some(Some(retry + LEASE)));
        assert!(!lost.is_lost(), "one slow reply does not end the job");
    }

    #[test]
    fn lost_fires_with_the_last_error_once_the_deadline_passes_unconfirmed() {
        let (state, t0) = (state(), crate::clock::now());
        let held = held(&state, t0);
        let (lost, stop) = armed(&held);
        let mut renewer = Renewer::new(&state, &held, &lost, &stop);
        let mut t = t0 + LEASE / 2;
        loop {
            match renewer.next(t) {
                Io::Send(_) => renewer.handle_reply(t, script_reply(timed_out())),
                Io::Wait { until } => t = until.expect("bounded by the deadline"),
                Io::Done(()) => break,
            }
        }
        assert!(t >= t0 + LEASE);
        assert!(
            matches!(
                lost.cause(),
                Some(Error::LockLost {
                    cause: LostCause::RenewFailed(_)
                })
            ),
            "{:?}",
            lost.cause()
        );
    }

    #[test]
    fn a_renewal_that_finds_the_lease_taken_fires_lost_at_once() {
        let (state, t0) = (state(), crate::clock::now());
        let held = held(&state, t0);
        let (lost, stop) = armed(&held);
        let mut renewer = Renewer::new(&state, &held, &lost, &stop);
        let due = t0 + LEASE / 2;
        expect_renew(renewer.next(due));
        renewer.handle_reply(due, script_reply(Ok(Value::Int(2))));
        assert!(matches!(renewer.next(due), Io::Done(())));
        assert!(matches!(
            lost.cause(),
            Some(Error::LockLost {
                cause: LostCause::Conflict
            })
        ));
    }

    #[test]
    fn a_stopped_renewer_is_done_at_once() {
        let (state, t0) = (state(), crate::clock::now());
        let held = held(&state, t0);
        let (lost, stop) = armed(&held);
        let mut renewer = Renewer::new(&state, &held, &lost, &stop);
        stop.stop();
        assert!(matches!(renewer.next(t0), Io::Done(())));
    }
}
