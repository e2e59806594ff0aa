//! Every operation of a locker, written once as sans-IO state that says
//! what it needs next; each front end has one loop that does it.
//!
//! An operation is driven by this loop (blocking: `send` is a sync call and
//! `wait` is `listener.wait_deadline`; async: `send(..).await` and a race of
//! the listener against `async_io::Timer::at`):
//!
//! ```text
//! loop {
//!     let listener = op.listener();          // before `next`: no lost wake-up
//!     match op.next(clock::now()) {
//!         Io::Send(request) => {
//!             let reply = connection.send(&request);
//!             op.handle_reply(clock::now(), reply);
//!         }
//!         Io::Wait { until } => wait(listener, until),
//!         Io::Done(output) => return output,
//!     }
//! }
//! ```
//!
//! Every `Send` is answered exactly once with `handle_reply`, unless the op
//! is dropped (a dropped future), which abandons it: an acquire then leaves
//! its line and a token that may have been granted becomes an orphan.

use std::time::Instant;

use event_listener::EventListener;
use redis::Value;

use crate::clock::now;
use crate::core::script::ScriptCall;
use crate::error::{is_noscript, Failure};
use crate::probe;
use crate::stats::Counters;

mod acquire;
mod release;
mod renew;
mod renewer;
mod shutdown;
mod single;
mod sweep;

pub(crate) use acquire::{Acquire, Granted};
pub(crate) use release::{log_failed_release, log_failed_release_on_drop, Release};
pub(crate) use renew::Renew;
pub(crate) use renewer::{Renewer, StopSignal};
pub(crate) use shutdown::Shutdown;
pub(crate) use single::Single;

/// What an operation needs next.
#[derive(Debug)]
pub(crate) enum Io<T> {
    /// Send this, then report the reply with `handle_reply`.
    Send(Request),
    /// Wait for the listener, or until the instant (soft: early is harmless).
    Wait { until: Option<Instant> },
    /// The operation is over.
    Done(T),
}

/// Takes `op`'s next step now, and the listener a wait waits for,
/// registered before the step was taken (no wake-up is lost); each front
/// end's loop sends or waits on what this returns, and hands a reply back
/// through [`answer`].
pub(crate) fn turn<O: Op>(op: &mut O) -> (Io<O::Output>, Option<EventListener>) {
    let listener = op.listener();
    let step = op.next(now());
    if let Io::Send(request) = &step {
        probe::script(request, false);
    }
    (step, listener)
}

/// Hands the reply to `request` to `op`.
pub(crate) fn answer<O: Op>(op: &mut O, request: &Request, reply: Reply) {
    probe::script(request, true);
    op.handle_reply(now(), reply);
}

/// A command for a front end's connection.
#[derive(Debug)]
pub(crate) enum Request {
    /// A script: EVALSHA, and on `NOSCRIPT` the script again as `EVAL`.
    /// If it granted or renewed, `then` follows on the same connection (the
    /// replication `WAIT`, which counts only that connection's writes).
    Script {
        call: ScriptCall,
        then: Option<redis::Cmd>,
    },
    /// Many releases, each answered on its own (one pipeline on a single
    /// server, in parallel on a cluster), within `until` as a whole.
    Releases {
        calls: Vec<ScriptCall>,
        until: Option<Instant>,
    },
}

/// Whether a script call's reply says `NOSCRIPT` (Redis ran nothing): the
/// front end then sends the script again as `EVAL`, counted here as a
/// reload and one more script sent.
pub(crate) fn resend_as_eval(reply: &redis::RedisResult<Value>, counters: &Counters) -> bool {
    let noscript = matches!(reply, Err(e) if is_noscript(e));
    if noscript {
        counters.noscript_reload();
        counters.script_sent();
    }
    noscript
}

/// What follows a script's reply on the same connection: the request's
/// `then`, where the script granted or renewed.
pub(crate) fn then_after<'a>(
    call: &ScriptCall,
    reply: &redis::RedisResult<Value>,
    then: Option<&'a redis::Cmd>,
) -> Option<&'a redis::Cmd> {
    then.filter(|_| matches!(reply, Ok(value) if call.kind.grants(value)))
}

/// One reply per release of a [`Request::Releases`], `None` where none
/// came in time.
pub(crate) type ReleaseReplies = Vec<Option<Result<Value, Failure>>>;

/// A front end's answer to a [`Request`].
pub(crate) enum Reply {
    Script {
        reply: Result<Value, Failure>,
        then: Option<redis::RedisResult<Value>>,
    },
    /// One entry per call, `None` where no reply came in time; `Err` when
    /// the batch as a whole could not be sent.
    Releases(Result<ReleaseReplies, Failure>),
}

/// An operation the front ends drive.
pub(crate) trait Op {
    type Output;

    /// What wakes a `Wait`; register it before calling `next`. None for
    /// an operation that only waits for its own reply.
    fn listener(&self) -> Option<EventListener> {
        None
    }

    /// The next step at `now`; `now` is also the submission instant of a
    /// `Send`.
    fn next(&mut self, now: Instant) -> Io<Self::Output>;

    /// The reply to the last `Send`.
    fn handle_reply(&mut self, now: Instant, reply: Reply);
}

impl Reply {
    /// The script reply, or a failure for a reply of the wrong kind (a bug
    /// in a front end, never a Redis answer).
    fn into_script(self) -> (Result<Value, Failure>, Option<redis::RedisResult<Value>>) {
        match self {
            Reply::Script { reply, then } => (reply, then),
            Reply::Releases(_) => (Err(mismatched()), None),
        }
    }

    /// Whether Redis Cluster answered `TRYAGAIN`: a multi-key command met
    /// a slot migration that has moved some of its keys and not the others.
    fn is_try_again(&self) -> bool {
        matches!(self, Reply::Script { reply: Err(Failure::Sent(e)), .. }
            if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain))
    }

    fn into_releases(self, n: usize) -> Result<ReleaseReplies, Failure> {
        let Reply::Releases(replies) = self else {
            return Err(mismatched());
        };
        let mut replies = replies?;
        replies.resize_with(n, || None);
        Ok(replies)
    }
}

fn mismatched() -> Failure {
    Failure::Sent((redis::ErrorKind::Client, "reply of the wrong kind").into())
}
