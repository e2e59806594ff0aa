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

/// The counters of [`Stats`], each with the method that bumps it: one
/// list for the struct, the methods and the snapshot.
macro_rules! counters {
    ($($field:ident: $bump:ident),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $($field: AtomicU64,)*
        }

        impl Counters {
            $(pub(crate) fn $bump(&self) {
                self.$field.fetch_add(1, Ordering::Relaxed);
            })*

            /// The counters, with the gauges left for the caller to fill in.
            pub(crate) fn snapshot(&self) -> Stats {
                Stats {
                    $($field: self.$field.load(Ordering::Relaxed),)*
                    ..Stats::default()
                }
            }
        }
    };
}

counters! {
    acquires: acquired,
    busy_replies: busy_reply,
    wait_timeouts: wait_timeout,
    notifications: notification,
    scripts_sent: script_sent,
    noscript_reloads: noscript_reload,
}
