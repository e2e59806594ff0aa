//! Timestamps at the steps of a hand-over on either front end, for
//! the contention benchmark's breakdown of the gap (docs/PROTOCOL.md).
//! Recorded only with the feature `bench-hooks` and after `enable`; in
//! any other build `mark` is empty. Hidden: not an API.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::core::script::ScriptKind;
use crate::driver::ops::Request;

/// A step of an acquire, a release or a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// An acquire script (an attempt, or the claim of a grant) is sent.
    AcquireSent,
    /// Its reply (or failure) is read.
    AcquireReplied,
    /// A release script is sent.
    ReleaseSent,
    /// Its reply (or failure) is read.
    ReleaseReplied,
    /// The subscriber read a notification.
    NoticeRead,
    /// The core has it and the waiters it names are woken.
    NoticeHandled,
    /// A waiting operation's thread (or task) runs again.
    WaiterWoken,
}

impl Step {
    /// The step's name in the benchmark's lines.
    pub fn name(self) -> &'static str {
        match self {
            Step::AcquireSent => "acquire_sent",
            Step::AcquireReplied => "acquire_replied",
            Step::ReleaseSent => "release_sent",
            Step::ReleaseReplied => "release_replied",
            Step::NoticeRead => "notice_read",
            Step::NoticeHandled => "notice_handled",
            Step::WaiterWoken => "waiter_woken",
        }
    }
}

/// One recorded step.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    /// What happened.
    pub step: Step,
    /// When, in ns since the Unix epoch: comparable across processes.
    pub unix_ns: u64,
    /// The thread it happened on (numbered in this process from 1).
    pub thread: u64,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());
static THREADS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: u64 = THREADS.fetch_add(1, Ordering::Relaxed);
}

/// Starts recording; does nothing without the feature `bench-hooks` (the
/// benchmark still builds, and prints no steps).
pub fn enable() {
    ENABLED.store(cfg!(feature = "bench-hooks"), Ordering::Relaxed);
}

/// Records `step`, once enabled (never without the feature `bench-hooks`).
#[inline(always)]
pub(crate) fn mark(step: Step) {
    if cfg!(feature = "bench-hooks") && ENABLED.load(Ordering::Relaxed) {
        record(step);
    }
}

fn record(step: Step) {
    let unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let thread = THREAD.with(|t| *t);
    MARKS.lock().push(Mark {
        step,
        unix_ns,
        thread,
    });
}

/// The marks recorded since the last call.
pub fn take() -> Vec<Mark> {
    std::mem::take(&mut *MARKS.lock())
}

/// Marks the send of a request, or (`replied`) its reply or failure back at
/// its operation, when it is an acquire or a release script.
pub(crate) fn script(request: &Request, replied: bool) {
    if let Request::Script { call, .. } = request {
        match (call.kind, replied) {
            (ScriptKind::Acquire, false) => mark(Step::AcquireSent),
            (ScriptKind::Acquire, true) => mark(Step::AcquireReplied),
            (ScriptKind::Release, false) => mark(Step::ReleaseSent),
            (ScriptKind::Release, true) => mark(Step::ReleaseReplied),
            _ => {}
        }
    }
}

#[cfg(all(test, feature = "bench-hooks"))]
mod tests {
    use super::*;

    #[test]
    fn marks_are_kept_once_enabled_with_their_thread_and_taken_once() {
        enable();
        mark(Step::NoticeRead);
        let here = std::thread::spawn(|| mark(Step::WaiterWoken));
        here.join().expect("the marking thread");
        let marks = take();
        let read = marks.iter().find(|m| m.step == Step::NoticeRead);
        let woken = marks.iter().find(|m| m.step == Step::WaiterWoken);
        let (read, woken) = (read.expect("this thread's"), woken.expect("the other's"));
        assert_ne!(read.thread, woken.thread);
        assert!(read.unix_ns > 0 && woken.unix_ns >= read.unix_ns);
        assert!(take().iter().all(|m| m.step != Step::NoticeRead));
    }
}
