//! Statistics and logging on both front ends against a real Redis.
//!
//! `stats()`: the counters (acquires, busy replies, wait timeouts,
//! notifications, safety polls, scripts sent, NOSCRIPT reloads) move by the
//! amounts a scenario implies, and the gauges (waiters, tracked leases,
//! subscribed, connected) describe the moment.
//!
//! Logs: every record has target `redlease` and starts with a stable
//! UPPER_SNAKE code, and none shows a key, an owner token or a server
//! address. Checked on the records of `REDIS_EVICTION_UNSAFE`,
//! `LOCK_NOTIFY_UNAVAILABLE`, `LOCK_RELEASE_FAILED` (from `with_lock`) and
//! `LOCK_CLEANUP_FAILED` (at shutdown) scenarios.
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::sync::Arc;
use std::time::Duration;

use redlease::{ReleaseOutcome, Stats};

use behaviour::common::{
    config, connect, exists, granted, leased, lock_name, namespace, no_wait, refused, spawn,
    token_of, wait_for_stats, waiting, BOUND,
};
use behaviour::front::Front;
use behaviour::logs::{self, Record};
use support::{wait_until, RedisServer};

/// A key that must never show up in a log line.
const SECRET_KEY: &str = "customer-4711-invoice";

/// Safety polls so slow that they never fire within a test.
const SLOW_POLL: Duration = Duration::from_secs(30);

/// The counter deltas between two snapshots.
fn delta(before: &Stats, after: &Stats) -> [u64; 7] {
    [
        after.acquires - before.acquires,
        after.busy_replies - before.busy_replies,
        after.wait_timeouts - before.wait_timeouts,
        after.notifications - before.notifications,
        after.safety_polls - before.safety_polls,
        after.scripts_sent - before.scripts_sent,
        after.noscript_reloads - before.noscript_reloads,
    ]
}

/// One script operation sends one `EVALSHA`, plus one more per `NOSCRIPT`
/// reload.
fn assert_one_script_op(before: &Stats, after: &Stats, what: &str) {
    let reloads = after.noscript_reloads - before.noscript_reloads;
    assert!(reloads <= 1, "{what}: {before:?} -> {after:?}");
    assert_eq!(
        after.scripts_sent - before.scripts_sent,
        1 + reloads,
        "{what}: {before:?} -> {after:?}"
    );
}

/// Acquires, wait-zero busy replies, wait timeouts and scripts sent, and
/// the tracked-leases and waiters gauges, over a simple scenario.
fn stats_count_acquires_busy_replies_wait_timeouts_and_scripts<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("stats");
    let holder: F = connect(&server, config(&ns));
    let locker: F = connect(&server, config(&ns));
    let s0 = locker.stats();
    assert_eq!(delta(&Stats::default(), &s0), [0; 7], "{s0:?}");
    assert_eq!(
        (s0.waiters, s0.tracked_leases, s0.subscribed),
        (0, 0, false)
    );

    let lease = granted(locker.acquire("a"), "acquire");
    let s1 = locker.stats();
    assert_eq!(delta(&s0, &s1)[..5], [1, 0, 0, 0, 0], "{s1:?}");
    assert_one_script_op(&s0, &s1, "acquire");
    assert_eq!(s1.tracked_leases, 1);
    assert!(s1.connected, "an operation left a connection open: {s1:?}");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let s2 = locker.stats();
    assert_eq!(delta(&s1, &s2)[..5], [0; 5], "{s2:?}");
    assert_one_script_op(&s1, &s2, "release");
    assert_eq!(s2.tracked_leases, 0);

    let held = granted(
        holder.acquire_with("h", leased(Duration::from_secs(60))),
        "holder",
    );
    let busy = refused(locker.acquire_with("h", no_wait()), "wait-zero acquire");
    assert_eq!(busy.code(), "LOCK_BUSY");
    let s3 = locker.stats();
    assert_eq!(delta(&s2, &s3)[..5], [0, 1, 0, 0, 0], "{s3:?}");
    assert_one_script_op(&s2, &s3, "busy acquire");
    assert_eq!((s3.waiters, s3.tracked_leases), (0, 0));

    let timeout = refused(
        locker.acquire_with("h", waiting(Duration::from_millis(150))),
        "waiting acquire",
    );
    assert_eq!(timeout.code(), "WAIT_TIMEOUT");
    let s4 = locker.stats();
    let d = delta(&s3, &s4);
    assert_eq!((d[0], d[2]), (0, 1), "one wait timeout, no grant: {s4:?}");
    assert!(d[1] >= 1, "at least one busy reply: {s4:?}");
    assert_eq!(s4.waiters, 0);

    // Scripts are loaded now: one more busy reply is exactly one script.
    refused(locker.acquire_with("h", no_wait()), "wait-zero acquire");
    let s5 = locker.stats();
    assert_eq!(delta(&s4, &s5), [0, 1, 0, 0, 0, 1, 0], "{s5:?}");
    F::release(held).unwrap();
}

/// After `SCRIPT FLUSH`, each flushed script's next use counts one
/// `NOSCRIPT` reload and two scripts sent.
fn a_script_flush_counts_one_noscript_reload_per_script<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("stats-noscript");
    let locker: F = connect(&server, config(&ns));
    // Use every script once so that all are loaded.
    let lease = granted(locker.acquire("a"), "acquire");
    F::renew(&lease).unwrap();
    F::release(lease).unwrap();
    let lease = granted(locker.acquire("a"), "acquire");

    server.script_flush();
    let before = locker.stats();
    F::renew(&lease).unwrap();
    let after = locker.stats();
    assert_eq!(delta(&before, &after)[5..], [2, 1], "renew: {after:?}");

    let before = after;
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let after = locker.stats();
    assert_eq!(delta(&before, &after)[5..], [2, 1], "release: {after:?}");

    let before = after;
    let lease = granted(locker.acquire("a"), "acquire");
    let after = locker.stats();
    assert_eq!(delta(&before, &after)[5..], [2, 1], "acquire: {after:?}");

    // Loaded again: no more reloads.
    let before = after;
    F::release(lease).unwrap();
    let after = locker.stats();
    assert_eq!(delta(&before, &after)[5..], [1, 0], "release: {after:?}");
}

/// A waiter shows in `waiters` and `subscribed` while it waits; the
/// release of the holder wakes it through one notification (no safety poll
/// with 30 s polls); once it left, `waiters` is 0 and the subscription is
/// dropped after its linger.
fn a_waiter_woken_by_a_release_counts_a_notification<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("stats-notify");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .poll_interval(SLOW_POLL)
            .notify_poll_interval(SLOW_POLL)
            .wait(Duration::from_secs(20)),
    ));
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(60))),
        "holder",
    );
    let w = waiters.clone();
    let waiter = spawn("waiter", move || granted(w.acquire("k"), "waiter"));
    wait_for_stats(&*waiters, "the waiter subscribed and checked again", |s| {
        s.waiters == 1 && s.subscribed && s.busy_replies >= 2
    });
    let waiting = waiters.stats();
    assert_eq!((waiting.notifications, waiting.tracked_leases), (0, 0));

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let lease = waiter.join_within(BOUND);
    let got = waiters.stats();
    assert_eq!(got.notifications, 1, "{got:?}");
    assert_eq!(got.safety_polls, 0, "{got:?}");
    assert_eq!(got.acquires, 1, "{got:?}");
    assert_eq!((got.waiters, got.tracked_leases), (0, 1), "{got:?}");
    F::release(lease).unwrap();

    // Nobody waits any more: the subscription goes once no waiter came
    // back for 1 s. Let that second pass, then run one operation (the
    // async locker closes a lingering subscription at its next operation).
    std::thread::sleep(Duration::from_millis(1200));
    F::release(granted(
        waiters.acquire_with("unrelated", no_wait()),
        "unrelated",
    ))
    .unwrap();
    wait_for_stats(&*waiters, "the subscription was dropped", |s| !s.subscribed);
}

/// A waiter behind a holder whose lease runs out without a release (so no
/// notification comes) gets the lock through a safety poll or the
/// holder-expiry retry, counted in `safety_polls`, with notifications on.
fn a_waiter_behind_an_expiring_holder_counts_a_safety_poll<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("stats-safety");
    let holder: F = connect(&server, config(&ns));
    let waiters: F = connect(
        &server,
        config(&ns)
            .notify_poll_interval(Duration::from_millis(100))
            .wait(Duration::from_secs(5)),
    );
    // Held, never released: the lease just runs out.
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_millis(300))),
        "holder",
    );
    let lease = granted(waiters.acquire("k"), "waiter behind the expiring holder");
    let stats = waiters.stats();
    assert!(stats.safety_polls >= 1, "{stats:?}");
    assert_eq!(stats.notifications, 0, "nobody released: {stats:?}");
    assert!(stats.busy_replies >= 1, "{stats:?}");
    assert_eq!(stats.acquires, 1, "{stats:?}");
    assert!(stats.subscribed, "notifications were on: {stats:?}");
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// `connected` is true after an operation and false once shutdown closed
/// the locker's connections.
fn connected_is_false_after_shutdown<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("stats-connected");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire("k"), "acquire");
    assert!(locker.stats().connected, "{:?}", locker.stats());
    assert_eq!(locker.stats().tracked_leases, 1);
    locker.shutdown().unwrap();
    let stats = locker.stats();
    assert!(!stats.connected, "{stats:?}");
    assert_eq!(stats.tracked_leases, 0, "{stats:?}");
    assert!(!exists(&server, &lock_name(&ns, "k")));
    drop(lease);
}

/// Asserts every record is well formed: target `redlease`, message
/// starting with an UPPER_SNAKE code and `:`, and none of `secrets` (nor
/// the server's address) in it.
fn assert_well_formed(records: &[Record], server: &RedisServer, secrets: &[&str]) {
    assert!(!records.is_empty(), "the scenario logged something");
    let address = [
        "127.0.0.1".to_owned(),
        format!(":{}", server.port()),
        "redis://".to_owned(),
        "localhost".to_owned(),
    ];
    for record in records {
        assert_eq!(record.target, "redlease", "{record:?}");
        let code = record.message.split(':').next().unwrap_or_default();
        assert!(
            code.len() >= 3
                && code.starts_with(|c: char| c.is_ascii_uppercase())
                && code
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && record.message.len() > code.len(),
            "a record without a leading CODE: {record:?}"
        );
        for secret in secrets
            .iter()
            .copied()
            .chain(address.iter().map(String::as_str))
        {
            assert!(
                !record.message.contains(secret),
                "a record shows {secret:?}: {record:?}"
            );
        }
    }
}

/// The records of one level whose message starts with `code`.
fn with_code(records: &[Record], level: log::Level, code: &str) -> usize {
    records
        .iter()
        .filter(|r| r.level == level && r.message.starts_with(&format!("{code}:")))
        .count()
}

/// Connecting to a server with `maxmemory-policy allkeys-lru` logs error
/// `REDIS_EVICTION_UNSAFE`; every record of the scenario is well formed.
fn eviction_unsafe_is_logged_with_its_code_and_nothing_secret<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start();
    let ns = namespace("logs-evict");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire(SECRET_KEY), "acquire");
    let token = token_of(&server, &ns, SECRET_KEY);
    F::release(lease).unwrap();
    locker.shutdown().unwrap();
    let records = logs.records();
    assert_eq!(
        with_code(&records, log::Level::Error, "REDIS_EVICTION_UNSAFE"),
        1,
        "{records:?}"
    );
    assert_well_formed(&records, &server, &[SECRET_KEY, &token]);
}

/// `nopub`: every command and key, no channel.
fn add_user_without_channels(server: &RedisServer) -> String {
    server.query(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("nopub")
            .arg("on")
            .arg(">secretpw")
            .arg("~*")
            .arg("resetchannels")
            .arg("+@all"),
    );
    format!("redis://nopub:secretpw@127.0.0.1:{}/0", server.port())
}

/// A waiter of a user without channel rights logs warn
/// `LOCK_NOTIFY_UNAVAILABLE` (once) and still gets the lock by polling;
/// every record is well formed and shows no key, token, address or password.
fn notify_unavailable_is_logged_with_its_code_and_nothing_secret<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let url = add_user_without_channels(&server);
    let ns = namespace("logs-acl");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(
        F::connect(&url, config(&ns).wait(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("connect as nopub: {e:?}")),
    );
    let held = granted(
        holder.acquire_with(SECRET_KEY, leased(Duration::from_secs(60))),
        "holder",
    );
    let token = token_of(&server, &ns, SECRET_KEY);
    let w = waiters.clone();
    let waiter = spawn("waiter", move || {
        let lease = granted(w.acquire(SECRET_KEY), "waiter");
        let _ = F::release(lease);
    });
    wait_until(BOUND, "LOCK_NOTIFY_UNAVAILABLE logged", || {
        with_code(&logs.records(), log::Level::Warn, "LOCK_NOTIFY_UNAVAILABLE") > 0
    });
    F::release(held).unwrap();
    waiter.join_within(BOUND);
    let records = logs.records();
    assert_eq!(
        with_code(&records, log::Level::Warn, "LOCK_NOTIFY_UNAVAILABLE"),
        1,
        "logged once: {records:?}"
    );
    assert_well_formed(
        &records,
        &server,
        &[SECRET_KEY, &token, "nopub", "secretpw"],
    );
}

/// Shutdown against a paused server logs error `LOCK_CLEANUP_FAILED`;
/// every record is well formed.
fn cleanup_failed_at_shutdown_is_logged_with_its_code_and_nothing_secret<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("logs-cleanup");
    let locker = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .shutdown_timeout(Duration::from_millis(300))
            .command_timeout(Duration::from_millis(200)),
    ));
    let lease = granted(
        locker.acquire_with(SECRET_KEY, leased(Duration::from_secs(30))),
        "acquire",
    );
    let token = token_of(&server, &ns, SECRET_KEY);
    let result = {
        let _paused = server.pause_guard();
        let l = locker.clone();
        spawn("shutdown", move || l.shutdown()).join_within(BOUND)
    };
    assert_eq!(result.unwrap_err().code(), "CLEANUP_TIMEOUT");
    wait_until(BOUND, "the late release is applied", || {
        !exists(&server, &lock_name(&ns, SECRET_KEY))
    });
    drop(lease);
    let records = logs.records();
    assert!(
        with_code(&records, log::Level::Error, "LOCK_CLEANUP_FAILED") >= 1,
        "{records:?}"
    );
    assert_well_formed(&records, &server, &[SECRET_KEY, &token]);
}

/// Instantiates every body for one front end.
macro_rules! stats_and_logs_suite {
    ($front:ty) => {
        #[test]
        fn stats_count_acquires_busy_replies_wait_timeouts_and_scripts() {
            super::stats_count_acquires_busy_replies_wait_timeouts_and_scripts::<$front>();
        }
        #[test]
        fn a_script_flush_counts_one_noscript_reload_per_script() {
            super::a_script_flush_counts_one_noscript_reload_per_script::<$front>();
        }
        #[test]
        fn a_waiter_woken_by_a_release_counts_a_notification() {
            super::a_waiter_woken_by_a_release_counts_a_notification::<$front>();
        }
        #[test]
        fn a_waiter_behind_an_expiring_holder_counts_a_safety_poll() {
            super::a_waiter_behind_an_expiring_holder_counts_a_safety_poll::<$front>();
        }
        #[test]
        fn connected_is_false_after_shutdown() {
            super::connected_is_false_after_shutdown::<$front>();
        }
        #[test]
        fn eviction_unsafe_is_logged_with_its_code_and_nothing_secret() {
            super::eviction_unsafe_is_logged_with_its_code_and_nothing_secret::<$front>();
        }
        #[test]
        fn notify_unavailable_is_logged_with_its_code_and_nothing_secret() {
            super::notify_unavailable_is_logged_with_its_code_and_nothing_secret::<$front>();
        }
        #[test]
        fn cleanup_failed_at_shutdown_is_logged_with_its_code_and_nothing_secret() {
            super::cleanup_failed_at_shutdown_is_logged_with_its_code_and_nothing_secret::<$front>(
            );
        }
    };
}

/// The blocking front end.
mod blocking {
    stats_and_logs_suite!(crate::behaviour::Blocking);
}

/// The async front end.
mod aio {
    stats_and_logs_suite!(crate::behaviour::Async);
}

/// Resumes a server paused inside a `with_lock` closure once dropped
/// (after `with_lock` returned, or during an unwind).
struct ResumeOnDrop<'a>(&'a RedisServer);

impl Drop for ResumeOnDrop<'_> {
    fn drop(&mut self) {
        if self.0.is_paused() {
            self.0.resume();
        }
    }
}

/// A config whose release against a paused server times out quickly.
fn short_timeouts(ns: &str) -> redlease::Config {
    config(ns).command_timeout(Duration::from_millis(200))
}

/// `with_lock` whose release fails (the server is paused just before `f`
/// returns, so the release times out) returns `f`'s value unchanged and
/// logs warn `LOCK_RELEASE_FAILED`; the token is released later (the
/// release applies after the resume, or shutdown cleans it up).
#[test]
fn blocking_with_lock_logs_release_failed_and_keeps_the_result() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("logs-wl");
    let locker: redlease::blocking::Locker = connect(&server, short_timeouts(&ns));
    let resume = ResumeOnDrop(&server);
    let (value, token) = locker
        .with_lock(SECRET_KEY, redlease::WithLock::new(), |_lease, _lost| {
            let token = token_of(&server, &ns, SECRET_KEY);
            server.pause();
            Ok::<_, redlease::Error>((42, token))
        })
        .unwrap();
    drop(resume);
    assert_eq!(value, 42, "f's value comes back unchanged");
    let records = logs.records();
    assert_eq!(
        with_code(&records, log::Level::Warn, "LOCK_RELEASE_FAILED"),
        1,
        "{records:?}"
    );
    let _ = locker.shutdown();
    wait_until(BOUND, "the token is released after all", || {
        !exists(&server, &lock_name(&ns, SECRET_KEY))
    });
    assert_well_formed(&logs.records(), &server, &[SECRET_KEY, &token]);
}

/// The async twin of the test above.
#[test]
fn aio_with_lock_logs_release_failed_and_keeps_the_result() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("logs-awl");
    let (value, token) = futures::executor::block_on(async {
        let locker = redlease::aio::Locker::connect(server.url(), short_timeouts(&ns))
            .await
            .unwrap();
        let resume = ResumeOnDrop(&server);
        let result = locker
            .with_lock(
                SECRET_KEY,
                redlease::WithLock::new(),
                async |_lease, _lost| {
                    let token = token_of(&server, &ns, SECRET_KEY);
                    server.pause();
                    Ok::<_, redlease::Error>((42, token))
                },
            )
            .await
            .unwrap();
        drop(resume);
        let _ = locker.shutdown().await;
        result
    });
    assert_eq!(value, 42, "f's value comes back unchanged");
    let records = logs.records();
    assert_eq!(
        with_code(&records, log::Level::Warn, "LOCK_RELEASE_FAILED"),
        1,
        "{records:?}"
    );
    wait_until(BOUND, "the token is released after all", || {
        !exists(&server, &lock_name(&ns, SECRET_KEY))
    });
    assert_well_formed(&records, &server, &[SECRET_KEY, &token]);
}
