//! The reply slots of a pipelined connection, without I/O: requests in the
//! order they were written, each waiting for its reply (or a pipeline's
//! replies), handed out in that order as the replies are read
//! (`src/aio/driven.rs` reads and writes).
//!
//! A slot whose request was dropped stays in line and its reply is
//! discarded when it comes, so the replies behind it never shift. Ids
//! follow request order: `slots[i]` has the id `first + i`, and
//! `slots[..answered]` have had their reply.

use std::collections::VecDeque;
use std::task::Waker;

use redis::{RedisError, RedisResult, Value};

#[derive(Default)]
pub(crate) struct Replies {
    slots: VecDeque<Slot>,
    first: u64,
    answered: usize,
    ended: bool,
}

enum Slot {
    Waiting {
        /// Replies to pass over first (a pipeline's `offset`).
        skip: usize,
        /// `None`: one command; `Some(n)`: a pipeline's `n` replies.
        count: Option<usize>,
        got: Vec<Value>,
        waker: Option<Waker>,
        dropped: bool,
    },
    Answered(RedisResult<Value>),
    Gone,
}

/// The error of a request on a connection that ended (`is_connection_dropped`).
pub(crate) fn dropped() -> RedisError {
    std::io::Error::from(std::io::ErrorKind::BrokenPipe).into()
}

/// What a request sends.
pub(crate) enum Outgoing<'a> {
    Cmd(&'a redis::Cmd),
    /// A pipeline, and which of its replies to keep (`offset`, `count`).
    Pipeline(&'a redis::Pipeline, usize, usize),
}

impl Replies {
    /// Packs `send` at the end of `out` (the bytes to write) and adds its
    /// slot; its id.
    pub(crate) fn queue(&mut self, send: Outgoing<'_>, out: &mut Vec<u8>) -> u64 {
        let (skip, count) = match send {
            Outgoing::Cmd(cmd) => {
                cmd.write_packed_command(out);
                (0, None)
            }
            Outgoing::Pipeline(pipeline, offset, count) => {
                out.extend_from_slice(&pipeline.get_packed_pipeline());
                (offset, Some(count))
            }
        };
        self.slots.push_back(Slot::Waiting {
            skip,
            count,
            got: Vec::new(),
            waker: None,
            dropped: false,
        });
        self.first + self.slots.len() as u64 - 1
    }

    fn slot(&mut self, id: u64) -> Option<&mut Slot> {
        let index = usize::try_from(id.checked_sub(self.first)?).ok()?;
        self.slots.get_mut(index)
    }

    /// Whether the connection ended (every later request fails at once).
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Whether any request waits for a reply (dropped ones too).
    pub(crate) fn any_waiting(&self) -> bool {
        self.answered < self.slots.len()
    }

    /// Whether `id` still waits; if so, `waker` is the one to wake.
    pub(crate) fn waits(&mut self, id: u64, new: &Waker) -> bool {
        let Some(Slot::Waiting { waker, .. }) = self.slot(id) else {
            return false;
        };
        if !waker.as_ref().is_some_and(|w| w.will_wake(new)) {
            *waker = Some(new.clone());
        }
        true
    }

    pub(crate) fn is_answered(&mut self, id: u64) -> bool {
        matches!(self.slot(id), Some(Slot::Answered(_)))
    }

    /// The reply of `id`, once it came (`None` for an unknown id: it was
    /// taken, or never queued).
    pub(crate) fn take(&mut self, id: u64) -> Option<RedisResult<Value>> {
        let slot = self.slot(id)?;
        match std::mem::replace(slot, Slot::Gone) {
            Slot::Answered(result) => {
                self.trim();
                Some(result)
            }
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Forgets `id`'s request (its future was dropped): a reply that came
    /// is dropped, one still to come will be.
    pub(crate) fn abandon(&mut self, id: u64) {
        match self.slot(id) {
            Some(Slot::Waiting { dropped, waker, .. }) => (*dropped, *waker) = (true, None),
            Some(slot @ Slot::Answered(_)) => *slot = Slot::Gone,
            _ => {}
        }
        self.trim();
    }

    fn trim(&mut self) {
        while self.answered > 0 && matches!(self.slots.front(), Some(Slot::Gone)) {
            self.slots.pop_front();
            self.first += 1;
            self.answered -= 1;
        }
    }

    /// Hands a reply read to the oldest waiting slot, and wakes it unless
    /// it is `me` (the request reading). A push is out of band (no
    /// subscriptions on a command connection): passed over.
    pub(crate) fn handle_reply(&mut self, value: Value, me: u64) {
        if let Value::Push { .. } = value {
            return;
        }
        let Some(Slot::Waiting {
            skip, count, got, ..
        }) = self.slots.get_mut(self.answered)
        else {
            return;
        };
        if *skip > 0 {
            *skip -= 1;
            return;
        }
        let result = match count {
            None => value,
            Some(n) => {
                got.push(value);
                if got.len() < *n {
                    return;
                }
                Value::Array(std::mem::take(got))
            }
        };
        self.answer(Ok(result), me);
    }

    fn answer(&mut self, result: RedisResult<Value>, me: u64) {
        let id = self.first + self.answered as u64;
        let Some(slot) = self.slots.get_mut(self.answered) else {
            return;
        };
        self.answered += 1;
        match std::mem::replace(slot, Slot::Gone) {
            Slot::Waiting { dropped: true, .. } => self.trim(),
            Slot::Waiting { waker, .. } => {
                *slot = Slot::Answered(result);
                if let Some(waker) = waker.filter(|_| id != me) {
                    waker.wake();
                }
            }
            other => *slot = other,
        }
    }

    /// The connection ended: the oldest waiting request gets `error`, the
    /// rest, and every later one, a broken pipe.
    pub(crate) fn fail(&mut self, error: RedisError, me: u64) {
        self.ended = true;
        let mut error = Some(error);
        while self.answered < self.slots.len() {
            let slot = &self.slots[self.answered];
            let live = matches!(slot, Slot::Waiting { dropped: false, .. });
            let this = if live { error.take() } else { None };
            self.answer(Err(this.unwrap_or_else(dropped)), me);
        }
    }

    /// Wakes the oldest waiting request (to read for the others).
    pub(crate) fn wake_next(&self) {
        for slot in self.slots.iter().skip(self.answered) {
            if let Slot::Waiting {
                dropped: false,
                waker: Some(waker),
                ..
            } = slot
            {
                return waker.wake_by_ref();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::SimpleString(s.into())
    }

    fn queue(replies: &mut Replies, skip: usize, count: Option<usize>) -> u64 {
        let (cmd, mut pipe, mut out) = (redis::cmd("PING"), redis::pipe(), Vec::new());
        let send = match count {
            None => Outgoing::Cmd(&cmd),
            Some(n) => {
                for _ in 0..skip + n {
                    pipe.cmd("PING");
                }
                Outgoing::Pipeline(&pipe, skip, n)
            }
        };
        let id = replies.queue(send, &mut out);
        assert!(out.starts_with(b"*1\r\n$4\r\nPING\r\n"), "packed");
        id
    }

    #[test]
    fn replies_go_to_the_requests_in_order_past_dropped_ones_and_pipeline_offsets() {
        let mut replies = Replies::default();
        let a = queue(&mut replies, 0, None);
        let dropped = queue(&mut replies, 0, None);
        let pipe = queue(&mut replies, 1, Some(2));
        let b = queue(&mut replies, 0, None);
        replies.abandon(dropped);
        for reply in ["a", "for the dropped one", "skipped", "p1", "p2", "b"] {
            replies.handle_reply(text(reply), u64::MAX);
        }
        assert_eq!(replies.take(b), Some(Ok(text("b"))));
        assert_eq!(replies.take(a), Some(Ok(text("a"))));
        let both = Value::Array(vec![text("p1"), text("p2")]);
        assert_eq!(replies.take(pipe), Some(Ok(both)));
        assert!(
            !replies.any_waiting() && replies.slots.is_empty(),
            "all trimmed"
        );
        assert_eq!(replies.take(a), None, "taken once");
    }

    #[test]
    fn an_end_fails_the_oldest_waiting_request_with_the_error_and_the_rest_as_dropped() {
        let mut replies = Replies::default();
        let done = queue(&mut replies, 0, None);
        replies.handle_reply(text("done"), u64::MAX);
        let (first, second) = (queue(&mut replies, 0, None), queue(&mut replies, 0, None));
        let eof: RedisError = std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into();
        replies.fail(eof, u64::MAX);
        assert!(replies.ended());
        assert_eq!(replies.take(done), Some(Ok(text("done"))));
        let first = replies.take(first).and_then(Result::err).unwrap();
        let second = replies.take(second).and_then(Result::err).unwrap();
        assert!(first.is_connection_dropped() && second.is_connection_dropped());
        assert_ne!(
            first.to_string(),
            second.to_string(),
            "the end's own error first"
        );
    }
}
