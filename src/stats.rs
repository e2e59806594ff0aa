//! Locker statistics: plain atomic counters and the snapshot they give.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of one locker's counters, from [`Locker::stats`](crate::blocking::Locker::stats).
///
/// Counters only grow; the gauges (`waiters`, `tracked_leases`, `subscribed`)
/// describe the moment of the snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Leases granted.
    pub acquires: u64,
    /// Acquire attempts that found the lock held.
    pub busy_replies: u64,
    /// Acquires that ended with `WAIT_TIMEOUT`.
    pub wait_timeouts: u64,
    /// Release notifications received.
    pub notifications: u64,
    /// Attempts sent because a waiter's retry instant came (the holder's
    /// lease ran out or the safety interval passed) rather than because a
    /// notification or a hand-over woke it.
    pub safety_polls: u64,
    /// Scripts sent (EVALSHA), retries after `NOSCRIPT` included.
    pub scripts_sent: u64,
    /// `NOSCRIPT` replies that made the locker load a script again.
    pub noscript_reloads: u64,
    /// Acquires in progress now.
    pub waiters: usize,
    /// Leases tracked for cleanup now.
    pub tracked_leases: usize,
    /// Whether release notifications are subscribed now.
    pub subscribed: bool,
    /// Whether a command connection is open now (async: the shared
    /// connection, dropped as soon as the server closes it; blocking: at
    /// least one idle pooled connection, those the server closed dropped
    /// first except over TLS, where that is only learnt by use).
    pub connected: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquires: AtomicU64,
    busy_replies: AtomicU64,
    wait_timeouts: AtomicU64,
    notifications: AtomicU64,
    scripts_sent: AtomicU64,
    noscript_reloads: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn acquired(&self) {
        bump(&self.acquires);
    }
    pub(crate) fn busy_reply(&self) {
        bump(&self.busy_replies);
    }
    pub(crate) fn wait_timeout(&self) {
        bump(&self.wait_timeouts);
    }
    pub(crate) fn notification(&self) {
        bump(&self.notifications);
    }
    pub(crate) fn script_sent(&self) {
        bump(&self.scripts_sent);
    }
    pub(crate) fn noscript_reload(&self) {
        bump(&self.noscript_reloads);
    }

    /// The counters, with the gauges left for the caller to fill in.
    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            acquires: get(&self.acquires),
            busy_replies: get(&self.busy_replies),
            wait_timeouts: get(&self.wait_timeouts),
            notifications: get(&self.notifications),
            scripts_sent: get(&self.scripts_sent),
            noscript_reloads: get(&self.noscript_reloads),
            ..Stats::default()
        }
    }
}
