//! The command timeout of the async front end, without a timer per command.
//!
//! The redis crate bounds each command on a multiplexed connection with an
//! `async_io::Timer`, and inserting a timer wakes async-io's reactor thread
//! (an `eventfd` write and an `epoll_wait` return) for every command: about
//! 5 µs of a 30 µs round trip on a 2-vCPU VM. Here one watchdog
//! thread per locker keeps the deadlines of the commands in flight in
//! arrival order (they share one timeout, so the queue is sorted) and wakes
//! a command whose deadline passed. It checks every [`TICK`] while
//! commands are in flight and parks while there are none, so a command
//! gives up between its timeout and its timeout plus one tick; a new
//! command unparks the watchdog only when it was parked.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::thread::Thread;
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use redis::{RedisFuture, Value};

use crate::clock::now;
use crate::error::timed_out;

/// How often the watchdog looks at the deadlines while commands are in
/// flight: the most a command's timeout can be overrun.
const TICK: Duration = Duration::from_millis(20);

/// The deadlines of one locker's commands; clones share the watchdog.
#[derive(Clone, Default)]
pub(crate) struct Deadlines {
    queue: Arc<Mutex<Queue>>,
}

#[derive(Default)]
struct Queue {
    /// A command's slot lives while its future does: a dead one finished.
    entries: VecDeque<Weak<Slot>>,
    /// The watchdog thread, once started, and whether it is parked with
    /// nothing to watch (then a new entry must unpark it).
    watchdog: Option<Thread>,
    idle: bool,
}

/// One command's deadline, owned by its future and seen by the watchdog.
struct Slot {
    at: Instant,
    expired: AtomicBool,
    waker: AtomicWaker,
}

impl Deadlines {
    /// `command`, ended with an error like the redis crate's own timeout
    /// (`is_timeout()`) once `timeout` has passed, where one is set.
    fn bound<'a, T: Send + 'a>(
        &self,
        timeout: Option<Duration>,
        command: RedisFuture<'a, T>,
    ) -> RedisFuture<'a, T> {
        let Some(timeout) = timeout else {
            return command;
        };
        let slot = Arc::new(Slot {
            at: now() + timeout,
            expired: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        });
        self.watch(Arc::downgrade(&slot));
        Box::pin(Bounded { command, slot })
    }

    fn watch(&self, slot: Weak<Slot>) {
        let mut queue = self.queue.lock();
        while queue.entries.front().is_some_and(|s| s.strong_count() == 0) {
            queue.entries.pop_front();
        }
        queue.entries.push_back(slot);
        let was_idle = std::mem::replace(&mut queue.idle, false);
        match &queue.watchdog {
            Some(thread) if was_idle => thread.unpark(),
            Some(_) => {}
            None => {
                let weak = Arc::downgrade(&self.queue);
                let spawned = std::thread::Builder::new()
                    .name("redlease-deadlines".into())
                    .spawn(move || watch_deadlines(&weak));
                match spawned {
                    Ok(handle) => queue.watchdog = Some(handle.thread().clone()),
                    // Without a thread no command is cut short: each still
                    // ends when the connection answers or drops.
                    Err(e) => log::warn!("cannot start the command deadline thread: {e}"),
                }
            }
        }
    }
}

/// Wakes the commands whose deadline passed, until the locker is gone.
fn watch_deadlines(queue: &Weak<Mutex<Queue>>) {
    loop {
        let Some(shared) = queue.upgrade() else {
            return;
        };
        let park = {
            let mut queue = shared.lock();
            let at = now();
            while let Some(front) = queue.entries.front() {
                match front.upgrade() {
                    Some(slot) if slot.at > at => break,
                    Some(slot) => {
                        slot.expired.store(true, Ordering::Release);
                        slot.waker.wake();
                    }
                    None => {}
                }
                queue.entries.pop_front();
            }
            queue.idle = queue.entries.is_empty();
            !queue.idle
        };
        // Holding no reference while parked lets the locker go. Idle, it is
        // unparked by the next command; the timeout is only so that a
        // dropped locker's thread ends.
        drop(shared);
        std::thread::park_timeout(if park { TICK } else { Duration::from_secs(1) });
    }
}

/// A command bounded by its deadline.
struct Bounded<F> {
    command: F,
    slot: Arc<Slot>,
}

impl<T, F: Future<Output = redis::RedisResult<T>> + Unpin> Future for Bounded<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(out) = Pin::new(&mut self.command).poll(cx) {
            return Poll::Ready(out);
        }
        self.slot.waker.register(cx.waker());
        if self.slot.expired.load(Ordering::Acquire) {
            return Poll::Ready(Err(timed_out()));
        }
        Poll::Pending
    }
}

/// A connection whose every request ends by the command timeout (where
/// `timeout` is set), with an error like the redis crate's own timeout
/// (`is_timeout()`).
pub(crate) struct TimedConnection<C> {
    pub(crate) conn: C,
    pub(crate) deadlines: Deadlines,
    pub(crate) timeout: Option<Duration>,
}

impl<C: redis::aio::ConnectionLike + Send> redis::aio::ConnectionLike for TimedConnection<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        self.deadlines
            .bound(self.timeout, self.conn.req_packed_command(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let command = self.conn.req_packed_commands(pipeline, offset, count);
        self.deadlines.bound(self.timeout, command)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
