//! One script, sent once, its reply classified: what an election's
//! `proclaim` and `leader` need (no waiting, no tracking, no retry).

use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use super::{Io, Op, Reply, Request};
use crate::core::script::{ReplyError, ScriptCall};
use crate::driver::state::LockerState;
use crate::error::{Error, Operation};

/// Sends `call` once and classifies its reply as `op`'s.
pub(crate) struct Single<T> {
    state: Arc<LockerState>,
    op: Operation,
    call: Option<ScriptCall>,
    classify: fn(&Value) -> Result<T, ReplyError>,
    result: Option<Result<T, Error>>,
}

impl<T> Single<T> {
    pub(crate) fn new(
        state: &Arc<LockerState>,
        op: Operation,
        call: ScriptCall,
        classify: fn(&Value) -> Result<T, ReplyError>,
    ) -> Self {
        Single {
            state: state.clone(),
            op,
            call: Some(call),
            classify,
            result: None,
        }
    }
}

impl<T> Op for Single<T> {
    type Output = Result<T, Error>;

    fn next(&mut self, now: Instant) -> Io<Self::Output> {
        if let Some(call) = self.call.take() {
            return Io::Send(Request::Script { call, then: None });
        }
        match self.result.take() {
            Some(result) => Io::Done(result),
            // `handle_reply` always comes between a send and this.
            None => Io::Wait { until: Some(now) },
        }
    }

    fn handle_reply(&mut self, _now: Instant, reply: Reply) {
        let (reply, _) = reply.into_script();
        self.state.metrics.reply(self.op, &reply);
        let op = self.op;
        self.result = Some(match reply {
            Ok(value) => {
                (self.classify)(&value).map_err(|source| Error::UnexpectedReply { op, source })
            }
            Err(failure) => Err(failure.into_error(op)),
        });
    }
}
