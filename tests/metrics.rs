//! The metrics of the crate docs' "Metrics" (feature `metrics`) against a real Redis, on
//! both front ends.
//!
//! Each test has a recorder of its own (`metrics-util`'s registry),
//! current while its lockers are built: a locker registers its
//! handles then, so whatever thread records later (a waiter, the
//! subscriber, a renewer) records into that test's recorder, and parallel
//! tests never see each other's values.
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use redlease::{Config, Error};

use behaviour::common::{
    config, connect, granted, leased, lock_name, namespace, no_wait, refused, spawn,
    wait_for_stats, waiting, BOUND,
};
use behaviour::front::Front;
use support::{wait_until, RedisServer};

/// Safety polls so slow that they never fire within a test.
const SLOW_POLL: Duration = Duration::from_secs(30);

/// A key that must never show up in a metric's name or labels.
const KEY: &str = "customer-4711-invoice";

/// A recorder whose values can be read without draining them (the
/// debugging recorder's snapshot resets counters and gauges): `metrics-util`'s
/// registry with atomic storage, the storage its debugging recorder uses.
#[derive(Debug)]
struct TestRecorder(Arc<Registry<Key, AtomicStorage>>);

impl TestRecorder {
    fn new() -> Self {
        TestRecorder(Arc::new(Registry::atomic()))
    }
}

impl metrics::Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

/// One test's recorder and its `locker` label.
struct Recorded {
    recorder: TestRecorder,
    locker: String,
}

impl Recorded {
    fn new(locker: &str) -> Self {
        Recorded {
            recorder: TestRecorder::new(),
            locker: locker.to_owned(),
        }
    }

    /// Builds a locker with this recorder current: its metrics land here.
    fn connect<F: Front>(&self, server: &RedisServer, config: Config) -> F {
        let config = config.metrics_label(self.locker.clone());
        metrics::with_local_recorder(&self.recorder, || connect(server, config))
    }

    /// The async locker, built the same way.
    fn connect_aio(&self, server: &RedisServer, config: Config) -> redlease::aio::Locker {
        let config = config.metrics_label(self.locker.clone());
        metrics::with_local_recorder(&self.recorder, || {
            futures::executor::block_on(redlease::aio::Locker::connect(server.url(), config))
        })
        .unwrap()
    }

    /// Whether `key` is `name` with at least these labels; checks every
    /// label on the way (the locker's label, never a key).
    fn matches(&self, key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
        let all: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        assert!(key.name().starts_with("redlease_"), "{key:?}");
        for (k, v) in &all {
            assert!(!v.contains(KEY) && !k.contains(KEY), "a key in {key:?}");
        }
        assert!(
            all.contains(&("locker", self.locker.as_str())),
            "{key:?} without its locker label"
        );
        key.name() == name && labels.iter().all(|l| all.contains(l))
    }

    /// The total of a counter over every series with these labels.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.recorder
            .0
            .get_counter_handles()
            .into_iter()
            .filter(|(key, _)| self.matches(key, name, labels))
            .map(|(_, c)| c.load(Ordering::SeqCst))
            .sum()
    }

    /// How many samples a histogram took over every series with these labels.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.recorder
            .0
            .get_histogram_handles()
            .into_iter()
            .filter(|(key, _)| self.matches(key, name, labels))
            .map(|(_, h)| {
                let data = h.data();
                assert!(data.iter().all(|x| *x >= 0.0), "{name}: {data:?}");
                data.len()
            })
            .sum()
    }

    /// A gauge's value.
    fn gauge(&self, name: &str) -> f64 {
        let found: Vec<f64> = self
            .recorder
            .0
            .get_gauge_handles()
            .into_iter()
            .filter(|(key, _)| self.matches(key, name, &[]))
            .map(|(_, g)| f64::from_bits(g.load(Ordering::SeqCst)))
            .collect();
        match found.as_slice() {
            [g] => *g,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn acquires(&self, kind: &str, outcome: &str) -> usize {
        self.samples(
            "redlease_acquire_wait_seconds",
            &[("kind", kind), ("outcome", outcome)],
        )
    }

    fn holds(&self, kind: &str, end: &str) -> usize {
        self.samples("redlease_hold_seconds", &[("kind", kind), ("end", end)])
    }

    fn attempts(&self, kind: &str) -> u64 {
        self.counter("redlease_attempts_total", &[("kind", kind)])
    }

    fn wakeups(&self, by: &str) -> u64 {
        self.counter("redlease_wakeups_total", &[("by", by)])
    }
}

fn slow_polls(ns: &str) -> Config {
    config(ns)
        .poll_interval(SLOW_POLL)
        .notify_poll_interval(SLOW_POLL)
}

/// An acquire and its release: the wait histogram, one attempt, the hold
/// histogram, and the gauges while held and after.
fn acquire_and_release_move_wait_attempts_hold_and_gauges<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-acq");
    let m = Recorded::new(&format!("{ns}-label"));
    let locker: F = m.connect(&server, config(&ns));
    let lease = granted(locker.acquire(KEY), "acquire");
    assert_eq!(m.acquires("lease", "acquired"), 1);
    assert_eq!(m.attempts("lease"), 1);
    assert_eq!(m.gauge("redlease_leases_held"), 1.0);
    assert_eq!(m.gauge("redlease_waiters"), 0.0);
    assert_eq!(m.holds("lease", "released"), 0);
    F::release(lease).unwrap();
    assert_eq!(m.holds("lease", "released"), 1);
    assert_eq!(m.gauge("redlease_leases_held"), 0.0);
    // A lease dropped without release.
    // A lease dropped: the blocking one releases it then and there, the
    // async one leaves it to the locker's cleanup.
    drop(granted(locker.acquire(KEY), "second acquire"));
    assert_eq!(
        m.holds("lease", "released") + m.holds("lease", "dropped"),
        2,
        "one end per hold"
    );
    assert_eq!(m.acquires("lease", "acquired"), 2);
    let _ = locker.shutdown();
}

/// Busy (a single try), wait timeout and queue full, each its outcome;
/// the waiters gauge counts the acquire waiting.
fn busy_wait_timeout_and_queue_full_are_outcomes<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-busy");
    let holder: F = connect(&server, config(&ns));
    let lease = granted(holder.acquire(KEY), "holder");
    let m = Recorded::new(&ns);
    let locker: F = m.connect(&server, slow_polls(&ns).max_waiters(1));
    let e = refused(locker.acquire_with(KEY, no_wait()), "single try");
    assert!(e.is_busy(), "{e:?}");
    assert_eq!(m.acquires("lease", "busy"), 1);
    let e = refused(
        locker.acquire_with(KEY, waiting(Duration::from_millis(100))),
        "short wait",
    );
    assert!(matches!(e, Error::WaitTimeout { .. }), "{e:?}");
    assert_eq!(m.acquires("lease", "wait_timeout"), 1);
    assert!(m.attempts("lease") >= 2, "at least one attempt each");

    let locker = Arc::new(locker);
    let waiter = {
        let locker = locker.clone();
        spawn("waiter", move || {
            locker.acquire_with(KEY, waiting(BOUND)).map(F::release)
        })
    };
    wait_for_stats(&*locker, "the waiter waits", |s| s.waiters == 1);
    assert_eq!(m.gauge("redlease_waiters"), 1.0);
    let e = refused(locker.acquire_with(KEY, waiting(BOUND)), "over the limit");
    assert!(matches!(e, Error::QueueFull { .. }), "{e:?}");
    assert_eq!(m.acquires("lease", "queue_full"), 1);
    F::release(lease).unwrap();
    waiter.join_within(BOUND).unwrap().unwrap();
    assert_eq!(m.acquires("lease", "acquired"), 1);
    let _ = locker.shutdown();
    let _ = holder.shutdown();
}

/// A waiter woken by the release notification of another locker.
fn a_release_notification_is_a_wakeup_by_notification<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-notif");
    let holder: F = connect(&server, config(&ns));
    let lease = granted(holder.acquire(KEY), "holder");
    let m = Recorded::new(&ns);
    let locker = Arc::new(m.connect::<F>(&server, slow_polls(&ns)));
    let waiter = {
        let locker = locker.clone();
        spawn("waiter", move || {
            locker.acquire_with(KEY, waiting(BOUND)).map(F::release)
        })
    };
    // Its first busy reply starts the subscription, whose confirmation
    // makes it try once more: after that second reply it backs off.
    wait_for_stats(&*locker, "the waiter is subscribed and backs off", |s| {
        s.waiters == 1 && s.subscribed && s.busy_replies >= 2
    });
    let before = m.wakeups("notification");
    F::release(lease).unwrap();
    waiter.join_within(BOUND).unwrap().unwrap();
    assert!(m.wakeups("notification") > before);
    assert_eq!(m.wakeups("poll"), 0, "no safety poll fired");
    assert_eq!(m.acquires("lease", "acquired"), 1);
    let _ = locker.shutdown();
    let _ = holder.shutdown();
}

/// A waiter that retries when the holder's lease ran out (no release, so
/// no notification): a wake-up by poll.
fn a_retry_at_the_holders_expiry_is_a_wakeup_by_poll<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-poll");
    let holder: F = connect(&server, config(&ns));
    let lease = granted(
        holder.acquire_with(KEY, leased(Duration::from_millis(300))),
        "holder",
    );
    let m = Recorded::new(&ns);
    let locker: F = m.connect(&server, slow_polls(&ns));
    let lease2 = granted(locker.acquire_with(KEY, waiting(BOUND)), "after expiry");
    assert!(m.wakeups("poll") >= 1);
    assert_eq!(m.wakeups("notification"), 0);
    assert!(m.attempts("lease") >= 2);
    F::release(lease2).unwrap();
    drop(lease);
    let _ = locker.shutdown();
    let _ = holder.shutdown();
}

/// The subscriber's connection killed while a waiter waits: once it is
/// subscribed again, the heads it wakes count as `reconnect`.
fn a_resubscription_is_a_wakeup_by_reconnect<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-reconn");
    let holder: F = connect(&server, config(&ns));
    // Longer than the test: the waiter never retries at its expiry.
    let lease = granted(
        holder.acquire_with(KEY, leased(Duration::from_secs(60))),
        "holder",
    );
    let m = Recorded::new(&ns);
    let locker = Arc::new(m.connect::<F>(&server, slow_polls(&ns)));
    let waiter = {
        let locker = locker.clone();
        spawn("waiter", move || {
            locker.acquire_with(KEY, waiting(BOUND)).map(F::release)
        })
    };
    // Its first busy reply starts the subscription, whose confirmation
    // makes it try once more: after that second reply it backs off.
    wait_for_stats(&*locker, "the waiter is subscribed and backs off", |s| {
        s.waiters == 1 && s.subscribed && s.busy_replies >= 2
    });
    assert_eq!(m.wakeups("reconnect"), 0);
    assert!(server.client_kill_type("pubsub") >= 1);
    wait_until(BOUND, "a reconnect wake-up", || m.wakeups("reconnect") >= 1);
    F::release(lease).unwrap();
    waiter.join_within(BOUND).unwrap().unwrap();
    let _ = locker.shutdown();
    let _ = holder.shutdown();
}

/// Redis paused: acquire, renew and release each end with an unknown
/// outcome, counted by `op`.
fn unanswered_scripts_count_as_outcome_unknown<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-unknown");
    let m = Recorded::new(&ns);
    let short = config(&ns).command_timeout(Duration::from_millis(200));
    let locker: F = m.connect(&server, short);
    let unknown = |op| m.counter("redlease_outcome_unknown_total", &[("op", op)]);
    // Each pause follows an answered command, so that the one it stalls is
    // sent on an open connection (not refused before it was sent).
    let lease = granted(locker.acquire(KEY), "acquire");
    {
        let _paused = server.pause_guard();
        let e = F::renew(&lease).unwrap_err();
        assert!(e.is_outcome_unknown(), "{e:?}");
    }
    assert_eq!(unknown("renew"), 1);
    let other = granted(locker.acquire("other"), "acquire other");
    {
        let _paused = server.pause_guard();
        let e = F::release(other).unwrap_err();
        assert!(e.is_outcome_unknown(), "{e:?}");
    }
    assert_eq!(unknown("release"), 1);
    F::release(granted(locker.acquire("warm"), "warm up")).unwrap();
    {
        let _paused = server.pause_guard();
        let e = refused(locker.acquire_with("third", no_wait()), "acquire paused");
        assert!(e.is_outcome_unknown(), "{e:?}");
    }
    assert_eq!(unknown("acquire"), 1);
    assert_eq!(m.acquires("lease", "failed"), 1);
    assert_eq!(
        unknown("renew") + unknown("release"),
        2,
        "nothing else counted"
    );
    drop(lease);
    let _ = locker.shutdown();
}

/// Each kind has its wait histogram, attempts and hold.
fn every_kind_records_its_acquire_attempts_and_hold<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-kinds");
    let m = Recorded::new(&ns);
    let locker: F = m.connect(&server, config(&ns));
    let opts = redlease::AcquireOptions::new;
    F::release(granted(locker.acquire(KEY), "lease")).unwrap();
    F::release_permit(granted(locker.acquire_permit(KEY, 2, opts()), "permit")).unwrap();
    F::release_read(granted(locker.read_with(KEY, opts()), "read")).unwrap();
    F::release_write(granted(locker.write_with(KEY, opts()), "write")).unwrap();
    for kind in ["lease", "permit", "read", "write"] {
        assert_eq!(m.acquires(kind, "acquired"), 1, "{kind}");
        assert_eq!(m.attempts(kind), 1, "{kind}");
        assert_eq!(m.holds(kind, "released"), 1, "{kind}");
    }
    let _ = locker.shutdown();
}

macro_rules! metrics_suite {
    ($($front:ty => $prefix:ident),*) => {
        $(
            mod $prefix {
                #[test]
                fn acquire_and_release_move_wait_attempts_hold_and_gauges() {
                    super::acquire_and_release_move_wait_attempts_hold_and_gauges::<$front>();
                }
                #[test]
                fn busy_wait_timeout_and_queue_full_are_outcomes() {
                    super::busy_wait_timeout_and_queue_full_are_outcomes::<$front>();
                }
                #[test]
                fn a_release_notification_is_a_wakeup_by_notification() {
                    super::a_release_notification_is_a_wakeup_by_notification::<$front>();
                }
                #[test]
                fn a_retry_at_the_holders_expiry_is_a_wakeup_by_poll() {
                    super::a_retry_at_the_holders_expiry_is_a_wakeup_by_poll::<$front>();
                }
                #[test]
                fn a_resubscription_is_a_wakeup_by_reconnect() {
                    super::a_resubscription_is_a_wakeup_by_reconnect::<$front>();
                }
                #[test]
                fn unanswered_scripts_count_as_outcome_unknown() {
                    super::unanswered_scripts_count_as_outcome_unknown::<$front>();
                }
                #[test]
                fn every_kind_records_its_acquire_attempts_and_hold() {
                    super::every_kind_records_its_acquire_attempts_and_hold::<$front>();
                }
            }
        )*
    };
}

metrics_suite!(redlease::blocking::Locker => blocking, crate::behaviour::front::Async => aio);

/// A `with_lock` whose lock disappears (deleted in Redis): the renewal
/// finds it expired, `Lost` fires with cause `expired`, the hold ends
/// `expired`.
#[test]
fn blocking_a_renewal_that_finds_the_lock_gone_is_lost_expired() {
    let server = RedisServer::start();
    let ns = namespace("m-lost");
    let m = Recorded::new(&ns);
    let locker: redlease::blocking::Locker =
        m.connect(&server, config(&ns).lease(Duration::from_millis(400)));
    let options = redlease::WithLock::new().extend(true);
    let lost = locker
        .with_lock(KEY, options, |_lease, lost| {
            server.query(redis::cmd("DEL").arg(lock_name(&ns, KEY)));
            Ok::<_, Error>(lost.wait_timeout(BOUND))
        })
        .unwrap();
    assert!(lost);
    assert_eq!(
        m.counter(
            "redlease_lost_total",
            &[("kind", "lease"), ("cause", "expired")]
        ),
        1
    );
    assert_eq!(m.counter("redlease_lost_total", &[]), 1, "fired once");
    assert_eq!(m.holds("lease", "expired"), 1);
    assert_eq!(
        m.samples("redlease_hold_seconds", &[]),
        1,
        "one end per hold"
    );
    let _ = locker.shutdown();
}

/// The async twin, with the deadline passing while Redis is paused: cause
/// `deadline`, the hold ends `lost`.
#[test]
fn aio_a_deadline_passing_unconfirmed_is_lost_deadline() {
    let server = RedisServer::start();
    let ns = namespace("m-lost-aio");
    let m = Recorded::new(&ns);
    let cfg = config(&ns)
        .lease(Duration::from_millis(400))
        .command_timeout(Duration::from_millis(150));
    let locker = m.connect_aio(&server, cfg);
    let options = redlease::WithLock::new().extend(true);
    let lost = futures::executor::block_on(locker.with_lock(KEY, options, async |_lease, lost| {
        let _paused = server.pause_guard();
        let wait = std::pin::pin!(lost.wait());
        let waited = futures::future::select(wait, async_io::Timer::after(BOUND)).await;
        Ok::<_, Error>(matches!(waited, futures::future::Either::Left(_)))
    }))
    .unwrap();
    assert!(lost);
    assert_eq!(
        m.counter(
            "redlease_lost_total",
            &[("kind", "lease"), ("cause", "deadline")]
        ),
        1
    );
    assert_eq!(m.holds("lease", "lost"), 1);
    assert_eq!(
        m.samples("redlease_hold_seconds", &[]),
        1,
        "one end per hold"
    );
    let _ = futures::executor::block_on(locker.shutdown());
}

/// Cancelling a blocking wait (a cancel handle) and dropping an async one
/// (a dropped future) are both `cancelled`.
#[test]
fn a_cancelled_or_dropped_acquire_is_cancelled_on_both_front_ends() {
    let server = RedisServer::start();
    let ns = namespace("m-cancel");
    let holder: redlease::blocking::Locker = connect(&server, config(&ns));
    let lease = granted(holder.acquire(KEY), "holder");

    let m = Recorded::new(&ns);
    let locker: redlease::blocking::Locker = m.connect(&server, slow_polls(&ns));
    let cancel = redlease::CancelHandle::new();
    cancel.cancel();
    let e = refused(
        locker.acquire_with(KEY, waiting(BOUND).cancel(cancel)),
        "cancelled",
    );
    assert!(matches!(e, Error::Cancelled), "{e:?}");
    assert_eq!(m.acquires("lease", "cancelled"), 1);

    let m = Recorded::new(&format!("{ns}-aio"));
    let locker = m.connect_aio(&server, slow_polls(&ns));
    futures::executor::block_on(async {
        let acquire = std::pin::pin!(locker.acquire_with(KEY, waiting(BOUND)));
        let timer = async_io::Timer::after(Duration::from_millis(50));
        let raced = futures::future::select(acquire, timer).await;
        assert!(matches!(raced, futures::future::Either::Right(_)));
    });
    wait_until(BOUND, "the dropped acquire is recorded", || {
        m.acquires("lease", "cancelled") == 1
    });
    drop(lease);
    let _ = futures::executor::block_on(locker.shutdown());
}
