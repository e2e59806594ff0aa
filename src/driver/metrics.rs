//! The metrics of the crate docs' "Metrics", recorded here once for both front ends.
//!
//! With feature `metrics` every handle is registered through the `metrics`
//! facade when the locker is built (so the recorder the application
//! installed by then receives them), and recording is a call on a handle:
//! no key, label or string is built on the hot path. Without the feature
//! the same types are empty and every method is an inline no-op, so the
//! call sites carry no `cfg`.
//!
//! | name | kind | labels (besides `locker`) |
//! |---|---|---|
//! | `redlease_acquire_wait_seconds` | histogram | `kind`, `outcome` |
//! | `redlease_attempts_total` | counter | `kind` |
//! | `redlease_hold_seconds` | histogram | `kind`, `end` |
//! | `redlease_lost_total` | counter | `kind`, `cause` |
//! | `redlease_outcome_unknown_total` | counter | `op` |
//! | `redlease_waiters`, `redlease_leases_held` | gauge | — |
//! | `redlease_wakeups_total` | counter | `by` |
//!
//! Where each one moves:
//!
//! - acquire wait: from `Acquire::start` to the op's result (`acquired`,
//!   `busy`, `wait_timeout`, `cancelled` — also for a dropped future —,
//!   `queue_full`, `failed` for every other error);
//! - attempts: every acquire script a waiter sends;
//! - hold: from the grant to the first end seen: a release's outcome
//!   (`released`, `expired`, `conflict`), a renew that found the lease
//!   `expired` or in `conflict`, its `with_lock` loss signal firing (`lost`),
//!   or the lease dropped without any of these (`dropped`; `expired` when
//!   its local deadline had passed, or when its release failed);
//! - lost: the `Lost` signal firing, once per signal;
//! - outcome unknown: an acquire, renew or release script whose reply was
//!   lost after it may have reached Redis (each attempt counts);
//! - waiters and leases held: set after every call into the core;
//! - wake-ups: drained from the core after every call
//!   ([`Wakeups`](crate::core::core::Wakeups)).

#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

#[cfg(feature = "metrics")]
mod on {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use metrics::{Counter, Gauge, Histogram, Unit};
    use redis::Value;

    use crate::clock::now;
    use crate::core::core::Core;
    use crate::core::names::Kind;
    use crate::core::outcome::{ReleaseOutcome, RenewOutcome};
    use crate::error::{Error, Failure, LostCause, Operation};

    const ACQUIRE_WAIT: &str = "redlease_acquire_wait_seconds";
    const ATTEMPTS: &str = "redlease_attempts_total";
    const HOLD: &str = "redlease_hold_seconds";
    const LOST: &str = "redlease_lost_total";
    const OUTCOME_UNKNOWN: &str = "redlease_outcome_unknown_total";
    const WAITERS: &str = "redlease_waiters";
    const LEASES_HELD: &str = "redlease_leases_held";
    const WAKEUPS: &str = "redlease_wakeups_total";

    /// In the order of [`Kind`]'s variants (`kind as usize`).
    const KINDS: [&str; 6] = ["lease", "permit", "read", "write", "leader", "multi"];
    const OUTCOMES: [&str; 6] = [
        "acquired",
        "busy",
        "wait_timeout",
        "cancelled",
        "queue_full",
        "failed",
    ];
    const ENDS: [&str; 5] = ["released", "expired", "conflict", "lost", "dropped"];
    const CAUSES: [&str; 3] = ["expired", "conflict", "deadline"];
    const OPS: [&str; 3] = ["acquire", "renew", "release"];
    const BY: [&str; 3] = ["notification", "poll", "reconnect"];

    fn outcome_index(result: Result<(), &Error>) -> usize {
        match result {
            Ok(()) => 0,
            Err(Error::Busy { .. }) => 1,
            Err(Error::WaitTimeout { .. }) => 2,
            Err(Error::Cancelled) => 3,
            Err(Error::QueueFull { .. }) => 4,
            Err(_) => 5,
        }
    }

    enum End {
        Released = 0,
        Expired = 1,
        Conflict = 2,
        Lost = 3,
        Dropped = 4,
    }

    /// One kind's handles.
    #[derive(Debug)]
    struct KindHandles {
        wait: [Histogram; OUTCOMES.len()],
        attempts: Counter,
        hold: [Histogram; ENDS.len()],
        lost: [Counter; CAUSES.len()],
    }

    impl KindHandles {
        fn new(locker: &str, kind: &'static str) -> Self {
            let labels = |name: &'static str, value: &'static str| {
                [
                    ("locker", locker.to_owned()),
                    ("kind", kind.to_owned()),
                    (name, value.to_owned()),
                ]
            };
            KindHandles {
                wait: OUTCOMES
                    .map(|outcome| metrics::histogram!(ACQUIRE_WAIT, &labels("outcome", outcome))),
                attempts: metrics::counter!(
                    ATTEMPTS,
                    &[("locker", locker.to_owned()), ("kind", kind.to_owned())]
                ),
                hold: ENDS.map(|end| metrics::histogram!(HOLD, &labels("end", end))),
                lost: CAUSES.map(|cause| metrics::counter!(LOST, &labels("cause", cause))),
            }
        }
    }

    /// Every handle of one locker.
    pub(crate) struct LockerMetrics {
        kinds: [Arc<KindHandles>; KINDS.len()],
        unknown: [Counter; OPS.len()],
        cell: CellMetrics,
    }

    impl LockerMetrics {
        /// Registers every metric with the current recorder, labelled
        /// `locker`.
        pub(crate) fn new(locker: &str) -> Self {
            describe();
            let labelled = |name: &'static str, value: &'static str| {
                [("locker", locker.to_owned()), (name, value.to_owned())]
            };
            let only_locker = [("locker", locker.to_owned())];
            LockerMetrics {
                kinds: KINDS.map(|kind| Arc::new(KindHandles::new(locker, kind))),
                unknown: OPS.map(|op| metrics::counter!(OUTCOME_UNKNOWN, &labelled("op", op))),
                cell: CellMetrics {
                    waiters: metrics::gauge!(WAITERS, &only_locker),
                    leases_held: metrics::gauge!(LEASES_HELD, &only_locker),
                    wakeups: BY.map(|by| metrics::counter!(WAKEUPS, &labelled("by", by))),
                },
            }
        }

        /// What the core cell records after every call.
        pub(crate) fn cell(&self) -> CellMetrics {
            self.cell.clone()
        }

        /// An acquire of `kind` starts at `now`.
        pub(crate) fn acquire(&self, kind: Kind, now: Instant) -> AcquireTimer {
            AcquireTimer {
                handles: self.kinds[kind as usize].clone(),
                started: Some(now),
            }
        }

        /// Counts `reply` if it left the outcome of `op` unknown.
        pub(crate) fn reply(&self, op: Operation, reply: &Result<Value, Failure>) {
            if reply.as_ref().is_err_and(Failure::is_outcome_unknown) {
                let i = match op {
                    Operation::Acquire => 0,
                    Operation::Renew => 1,
                    _ => 2,
                };
                self.unknown[i].increment(1);
            }
        }
    }

    /// The gauges and the wake-ups, recorded by the core's cell.
    #[derive(Debug, Clone)]
    pub(crate) struct CellMetrics {
        waiters: Gauge,
        leases_held: Gauge,
        wakeups: [Counter; BY.len()],
    }

    impl CellMetrics {
        /// After a call into `core`: the gauges, and the wake-ups it made.
        #[inline]
        pub(crate) fn update(&self, core: &mut Core) {
            let counts = core.counts();
            self.waiters.set(counts.waiters as f64);
            self.leases_held.set(counts.tracked_leases as f64);
            let woken = core.poll_wakeups();
            let counts = [woken.notification, woken.poll, woken.reconnect];
            for (counter, n) in self.wakeups.iter().zip(counts) {
                if n > 0 {
                    counter.increment(n);
                }
            }
        }
    }

    /// One acquire, from its call to its result.
    pub(crate) struct AcquireTimer {
        handles: Arc<KindHandles>,
        /// `None` once recorded.
        started: Option<Instant>,
    }

    impl AcquireTimer {
        /// An acquire script was sent.
        pub(crate) fn attempt_sent(&self) {
            self.handles.attempts.increment(1);
        }

        /// The acquire ended with `result` (recorded once).
        pub(crate) fn done(&mut self, now: Instant, result: Result<(), &Error>) {
            if let Some(started) = self.started.take() {
                let waited = now.saturating_duration_since(started);
                self.handles.wait[outcome_index(result)].record(waited);
            }
        }

        /// The acquire was dropped before its result: `cancelled`.
        pub(crate) fn abandoned(&mut self) {
            if self.started.is_some() {
                self.done(now(), Err(&Error::Cancelled));
            }
        }

        /// The hold of a lease this acquire was granted at `now`.
        pub(crate) fn hold(&self, now: Instant) -> HoldTimer {
            Arc::new(Hold {
                handles: self.handles.clone(),
                granted: now,
                ended: AtomicBool::new(false),
            })
        }
    }

    /// One lease, from its grant to its first known end; shared with its
    /// `Lost` signal, whose firing ends it as `lost`.
    pub(crate) type HoldTimer = Arc<Hold>;

    #[derive(Debug)]
    pub(crate) struct Hold {
        handles: Arc<KindHandles>,
        granted: Instant,
        ended: AtomicBool,
    }

    impl Hold {
        fn end(&self, end: End) {
            if !self.ended.swap(true, Ordering::Relaxed) {
                let held = now().saturating_duration_since(self.granted);
                self.handles.hold[end as usize].record(held);
            }
        }

        /// A release ended it (a failed one leaves it to its TTL).
        pub(crate) fn released(&self, result: &Result<ReleaseOutcome, Error>) {
            self.end(match result {
                Ok(ReleaseOutcome::Released) => End::Released,
                Ok(ReleaseOutcome::Conflict) => End::Conflict,
                Ok(ReleaseOutcome::Expired) | Err(_) => End::Expired,
            });
        }

        /// A renew found it gone or taken.
        pub(crate) fn renewed(&self, outcome: RenewOutcome) {
            match outcome {
                RenewOutcome::Renewed => {}
                RenewOutcome::Expired => self.end(End::Expired),
                RenewOutcome::Conflict => self.end(End::Conflict),
            }
        }

        /// The lease was dropped: `expired` if `expired_at(now)` says its
        /// deadline had passed, else `dropped`.
        pub(crate) fn dropped(&self, expired_at: impl FnOnce(Instant) -> bool) {
            if !self.ended.load(Ordering::Relaxed) {
                let expired = expired_at(now());
                self.end(if expired { End::Expired } else { End::Dropped });
            }
        }

        /// What a `Lost` signal of this lease records when it fires.
        pub(crate) fn lost_counter(self: &Arc<Self>) -> LostCounter {
            LostCounter(Some(self.clone()))
        }
    }

    /// Counts a `Lost` signal firing, and ends its lease's hold as `lost`
    /// (unless a renew's outcome ended it first).
    #[derive(Debug, Clone, Default)]
    pub(crate) struct LostCounter(Option<Arc<Hold>>);

    impl LostCounter {
        pub(crate) fn fired(&self, cause: &LostCause) {
            if let Some(hold) = &self.0 {
                let i = match cause {
                    LostCause::Expired => 0,
                    LostCause::Conflict => 1,
                    LostCause::DeadlinePassed | LostCause::RenewFailed(_) => 2,
                };
                hold.handles.lost[i].increment(1);
                hold.end(End::Lost);
            }
        }
    }

    /// Names, units and help texts, for exporters that show them.
    fn describe() {
        use metrics::{describe_counter, describe_gauge, describe_histogram};
        describe_histogram!(
            ACQUIRE_WAIT,
            Unit::Seconds,
            "Time from an acquire call to its result."
        );
        describe_counter!(ATTEMPTS, "Acquire scripts sent.");
        describe_histogram!(
            HOLD,
            Unit::Seconds,
            "Time from a grant to its release, expiry or loss."
        );
        describe_counter!(LOST, "Loss signals of with_lock fired.");
        describe_counter!(
            OUTCOME_UNKNOWN,
            "Scripts whose reply was lost after they may have reached Redis."
        );
        describe_gauge!(WAITERS, "Acquires in progress.");
        describe_gauge!(LEASES_HELD, "Leases granted and not yet released.");
        describe_counter!(WAKEUPS, "Waiters woken, by what woke them.");
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn each_kind_is_labelled_with_its_own_name() {
            use Kind::*;
            let labels = [Lock, Semaphore, Read, Write, Leader, Multi].map(|k| KINDS[k as usize]);
            assert_eq!(
                labels,
                ["lease", "permit", "read", "write", "leader", "multi"]
            );
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    //! The same API, empty: one type stands for every metric type, and
    //! every call compiles to nothing.

    use std::time::Instant;

    use redis::Value;

    use crate::core::core::Core;
    use crate::core::names::Kind;
    use crate::core::outcome::{ReleaseOutcome, RenewOutcome};
    use crate::error::{Error, Failure, LostCause, Operation};

    #[derive(Debug, Clone, Default)]
    pub(crate) struct Off;

    pub(crate) type LockerMetrics = Off;
    pub(crate) type CellMetrics = Off;
    pub(crate) type AcquireTimer = Off;
    pub(crate) type HoldTimer = Off;
    pub(crate) type LostCounter = Off;

    /// Methods that do nothing: `name(args)`, or `name(args) -> Off`
    /// handing back an `Off`.
    macro_rules! no_ops {
        ($($name:ident($($arg:ty),*) $(-> $off:ident)?;)*) => {$(
            #[inline(always)]
            pub(crate) fn $name(&self, $(_: $arg),*) $(-> $off)? { $($off)? }
        )*};
    }

    impl Off {
        no_ops! {
            cell() -> Off;
            acquire(Kind, Instant) -> Off;
            reply(Operation, &Result<Value, Failure>);
            attempt_sent();
            hold(Instant) -> Off;
            released(&Result<ReleaseOutcome, Error>);
            renewed(RenewOutcome);
            dropped(impl FnOnce(Instant) -> bool);
            lost_counter() -> Off;
            fired(&LostCause);
        }
        #[inline(always)]
        pub(crate) fn new(_locker: &str) -> Self {
            Off
        }
        /// Only drains the core's wake-ups (a few words).
        #[inline(always)]
        pub(crate) fn update(&self, core: &mut Core) {
            let _ = core.poll_wakeups();
        }
        #[inline(always)]
        pub(crate) fn done(&mut self, _now: Instant, _result: Result<(), &Error>) {}
        #[inline(always)]
        pub(crate) fn abandoned(&mut self) {}
    }
}
