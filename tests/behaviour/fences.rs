//! Fences: strictly increasing per key, floored at the server clock at every
//! grant so they survive data loss and failover, and never burnt by a
//! replayed acquire.

use redis::Value;
use redlease::ReleaseOutcome;

use super::common::{
    config, connect, fence_name, get, granted, lock_name, namespace, no_wait, pttl, refused,
    server_time_ms, token_of, BOUND,
};
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// Grants on one key, alternating between two lockers, carry fences that
/// go up by one within a millisecond and to the server's `TIME` in ms × 1000
/// in a later one (docs/PROTOCOL.md §3: `max(counter + 1, TIME × 1000)`).
pub(crate) fn fences_strictly_increase_across_acquires_on_one_key<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fences");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));

    let before_ms = server_time_ms(&server);
    let mut fences = Vec::new();
    for i in 0..6 {
        let locker = if i % 2 == 0 { &a } else { &b };
        let lease = granted(locker.acquire("job"), "acquire of a free key");
        fences.push(F::fence(&lease).get());
        assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    }
    let after_ms = server_time_ms(&server);

    // docs/PROTOCOL.md §3: each fence is max(counter + 1, TIME in ms × 1000): one more
    // than the last within a millisecond, the clock's floor in a later one.
    for pair in fences.windows(2) {
        assert!(
            pair[1] == pair[0] + 1 || (pair[1] > pair[0] && pair[1] % 1000 == 0),
            "the next fence is one more, or the next millisecond's floor: {fences:?}"
        );
    }
    for fence in &fences {
        assert!(
            *fence >= before_ms * 1000 && *fence <= after_ms * 1000 + 999,
            "every fence is floored at the server's TIME in ms × 1000: {fence} not in \
             [{before_ms}000, {after_ms}999]"
        );
    }
    let first = fences[0];
    assert!(
        first > 1_700_000_000_000_000,
        "seeded from a 2023+ clock: {first}"
    );
    assert_eq!(
        get(&server, &fence_name(&ns, "job")),
        Some(fences[5].to_string()),
        "the counter holds the last fence"
    );
    assert_eq!(
        pttl(&server, &fence_name(&ns, "job")),
        -1,
        "the counter never expires"
    );
}

/// After `FLUSHALL` the counter is seeded again from the server clock, so
/// the next fence is still larger than every earlier one.
pub(crate) fn fences_keep_increasing_after_redis_lost_its_data<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("flush");
    let locker: F = connect(&server, config(&ns));

    let mut last = 0;
    for _ in 0..3 {
        let lease = granted(locker.acquire("job"), "acquire before the flush");
        last = F::fence(&lease).get();
        F::release(lease).unwrap();
    }
    // The guarantee needs the clock to have moved past the last seed's ms.
    wait_until(BOUND, "the server clock passes the last fence's ms", || {
        server_time_ms(&server) > last / 1000
    });
    server.flushall();
    assert!(get(&server, &fence_name(&ns, "job")).is_none());

    let lease = granted(locker.acquire("job"), "acquire after the flush");
    let after = F::fence(&lease).get();
    assert!(
        after > last,
        "fence after FLUSHALL {after} must exceed {last}"
    );
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// The acquire script's Lua text, read from the crate's source (tests
/// cannot see crate-private items).
pub(crate) fn acquire_lua() -> &'static str {
    script_lua("ACQUIRE_LUA")
}

/// The source of the script `const <name>` in src/core/script.rs, as
/// Redis receives it (`support::script_source`).
pub(crate) fn script_lua(name: &str) -> &'static str {
    static SOURCES: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<String, &'static str>>,
    > = std::sync::LazyLock::new(Default::default);
    let mut sources = SOURCES.lock().unwrap();
    if let Some(source) = sources.get(name) {
        return source;
    }
    let source =
        crate::support::script_source::script_source(name).unwrap_or_else(|e| panic!("{e}"));
    let source: &'static str = Box::leak(source.into_boxed_str());
    sources.insert(name.to_owned(), source);
    source
}

fn eval_acquire(
    server: &RedisServer,
    lock: &str,
    fence: &str,
    token: &str,
    lease_ms: u64,
) -> Value {
    server.query(
        redis::cmd("EVAL")
            .arg(acquire_lua())
            .arg(2)
            .arg(lock)
            .arg(fence)
            .arg(token)
            .arg(lease_ms),
    )
}

/// Running the acquire script again with the same token (a client library
/// replaying a timed-out write) returns the same fence without a second
/// `INCR`; another token gets the holder's remaining time.
pub(crate) fn an_acquire_replayed_with_its_token_returns_the_same_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("replay");
    let locker: F = connect(&server, config(&ns));

    // Replaying the locker's own acquire.
    let lease = granted(locker.acquire("held"), "acquire of a free key");
    let fence = F::fence(&lease).get();
    let token = token_of(&server, &ns, "held");
    let replay = eval_acquire(
        &server,
        &lock_name(&ns, "held"),
        &fence_name(&ns, "held"),
        &token,
        5000,
    );
    assert_eq!(replay, Value::BulkString(fence.to_string().into_bytes()));
    assert_eq!(
        get(&server, &fence_name(&ns, "held")),
        Some(fence.to_string())
    );
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);

    // The script alone, twice with one token, then with another.
    let (lock, counter) = (lock_name(&ns, "raw"), fence_name(&ns, "raw"));
    let mine = "0123456789abcdef0123456789abcdef";
    let first = eval_acquire(&server, &lock, &counter, mine, 5000);
    let Value::BulkString(first_bytes) = &first else {
        panic!("a free key is acquired with a decimal bulk string, got {first:?}");
    };
    let first_fence: u64 = String::from_utf8_lossy(first_bytes).parse().unwrap();
    let second = eval_acquire(&server, &lock, &counter, mine, 5000);
    assert_eq!(second, first, "a replay returns the same fence");
    assert_eq!(
        get(&server, &counter),
        Some(first_fence.to_string()),
        "the counter moved once"
    );
    assert_eq!(get(&server, &lock), Some(format!("{mine}:{first_fence}")));
    match eval_acquire(
        &server,
        &lock,
        &counter,
        "fedcba9876543210fedcba9876543210",
        5000,
    ) {
        Value::Int(ms) => assert!(
            ms > 0 && ms <= 5000,
            "another token gets the holder's PTTL: {ms}"
        ),
        other => panic!("another token must be told the lock is busy, got {other:?}"),
    }
    assert_eq!(get(&server, &counter), Some(first_fence.to_string()));
}

/// The Redis commands of `stats` (a `commandstats` reading) that a lock's
/// scripts and their callers run, with the blocking front end's `PING` in
/// front of a command on a reused connection and the test's own `INFO` and
/// `CONFIG` left out.
pub(crate) fn lock_commands(stats: &std::collections::HashMap<String, u64>) -> Vec<(String, u64)> {
    let mut ran: Vec<(String, u64)> = stats
        .iter()
        .filter(|(name, _)| {
            let command = name.split('|').next().unwrap_or_default();
            !matches!(command, "ping" | "info" | "config" | "client" | "hello")
        })
        .map(|(name, calls)| (name.clone(), *calls))
        .collect();
    ran.sort();
    ran
}

pub(crate) fn calls(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    let mut ran: Vec<(String, u64)> = pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect();
    ran.sort();
    ran
}

/// An uncontended acquire + release costs Redis nine commands, `TIME` and
/// `PUBLISH` included: the acquire script's `MGET`, `TIME` and
/// two `SET`s, the release script's `MGET` (lock and hand-over flag), `DEL` and `PUBLISH`, and the two
/// `EVALSHA`s. A busy attempt is its `EVALSHA`, the `MGET` and the `PTTL`
/// that the waiter's retry needs (the crate docs' "How it works").
pub(crate) fn an_uncontended_cycle_runs_nine_commands_and_a_busy_attempt_three<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("cost");
    let locker: F = connect(&server, config(&ns));
    let other: F = connect(&server, config(&ns));
    // Warm: the scripts are cached and the connections open.
    for key in ["warm", "job"] {
        let lease = granted(locker.acquire(key), "warm-up acquire");
        assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    }
    let held = granted(other.acquire("held"), "warm-up of the other locker");

    server.reset_stats();
    let lease = granted(locker.acquire("job"), "acquire of a free key");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        lock_commands(&server.commandstats()),
        calls(&[
            ("evalsha", 2),
            // The acquire's read of the lock, its counter and the
            // hand-over queue's flag; the release's of the lock and flag.
            ("mget", 2),
            ("time", 1),
            ("set", 2),
            ("del", 1),
            ("publish", 1),
        ]),
        "one uncontended cycle"
    );

    server.reset_stats();
    refused(locker.acquire_with("held", no_wait()), "a held key");
    assert_eq!(
        lock_commands(&server.commandstats()),
        calls(&[("evalsha", 1), ("mget", 1), ("pttl", 1)]),
        "one busy attempt"
    );
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
}

/// The acquire script computes the next fence in Lua only where a double
/// holds it exactly; any other counter value goes through `INCR`, so a
/// counter past 2^53 still moves by exactly one, a counter that is not an
/// integer is refused without a grant, and the counter's expiry is kept
/// where the locker sets none and set where it does.
pub(crate) fn the_acquire_script_moves_any_counter_exactly<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("counter");
    let (lock, counter) = (lock_name(&ns, "k"), fence_name(&ns, "k"));
    let token = "0123456789abcdef0123456789abcdef";
    let release = |server: &RedisServer| {
        server.query(redis::cmd("DEL").arg(&lock));
    };
    let bulk = |fence: &str| Value::BulkString(fence.as_bytes().to_vec());

    for (stored, next) in [
        ("9007199254740993", "9007199254740994"),
        ("9223372036854775000", "9223372036854775001"),
    ] {
        server.query(redis::cmd("SET").arg(&counter).arg(stored));
        assert_eq!(
            eval_acquire(&server, &lock, &counter, token, 5000),
            bulk(next),
            "a counter of {stored} moves by one"
        );
        assert_eq!(get(&server, &counter).as_deref(), Some(next));
        release(&server);
    }

    server.query(redis::cmd("SET").arg(&counter).arg("not-a-number"));
    let refused: redis::RedisResult<Value> = redis::cmd("EVAL")
        .arg(acquire_lua())
        .arg(2)
        .arg(&lock)
        .arg(&counter)
        .arg(token)
        .arg(5000)
        .query(&mut server.conn());
    assert!(
        refused.is_err(),
        "a counter that is not an integer is refused: {refused:?}"
    );
    assert!(get(&server, &lock).is_none(), "and nothing was granted");

    // A counter with an expiry keeps it when the locker sets none ...
    server.query(
        redis::cmd("SET")
            .arg(&counter)
            .arg("7")
            .arg("PX")
            .arg(600_000),
    );
    let Value::BulkString(_) = eval_acquire(&server, &lock, &counter, token, 5000) else {
        panic!("a free key is granted");
    };
    let kept = pttl(&server, &counter);
    assert!(
        kept > 0 && kept <= 600_000,
        "the counter's expiry is kept: {kept}"
    );
    release(&server);
    // ... and gets the locker's `fence_counter_ttl` when it sets one.
    let granted_with_ttl = server.query(
        redis::cmd("EVAL")
            .arg(acquire_lua())
            .arg(2)
            .arg(&lock)
            .arg(&counter)
            .arg(token)
            .arg(5000)
            .arg(90_000),
    );
    assert!(matches!(granted_with_ttl, Value::BulkString(_)));
    let set = pttl(&server, &counter);
    assert!(
        set > 0 && set <= 90_000,
        "the counter expires as configured: {set}"
    );
}

/// `MGET` reads a key of another type as missing, so the acquire script
/// guards its writes with `NX`: a lock name or a fence counter holding a
/// hash is refused with `WRONGTYPE` (`PROVIDER_FAILED`, as when `GET` and
/// `INCR` refused it) and left as it was.
pub(crate) fn a_counter_of_another_type_is_refused_and_left_alone<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("counter-type");
    let locker: F = connect(&server, config(&ns));
    let counter = fence_name(&ns, "k");
    server.query(redis::cmd("HSET").arg(&counter).arg("field").arg("value"));

    let e = refused(
        locker.acquire_with("k", no_wait()),
        "acquire with a hash counter",
    );
    assert_eq!(e.code(), "PROVIDER_FAILED", "{e:?}");
    let kind = |name: &str| -> String {
        redis::cmd("TYPE")
            .arg(name)
            .query(&mut server.conn())
            .unwrap()
    };
    assert_eq!(kind(&counter), "hash", "the counter was left alone");
    assert_eq!(kind(&lock_name(&ns, "k")), "none", "nothing was granted");
}

/// Counts the commands of measured steps (`CONFIG RESETSTAT` before each,
/// `INFO commandstats` after it) and fails once, in [`Counts::finish`],
/// naming every step whose commands differ from the expected ones.
pub(crate) struct Counts<'a> {
    server: &'a RedisServer,
    wrong: Vec<String>,
}

impl<'a> Counts<'a> {
    pub(crate) fn new(server: &'a RedisServer) -> Self {
        Counts {
            server,
            wrong: Vec::new(),
        }
    }

    /// Runs `run` alone and compares what it cost Redis with `expected`.
    pub(crate) fn step<T>(
        &mut self,
        what: &str,
        expected: &[(&str, u64)],
        run: impl FnOnce() -> T,
    ) -> T {
        self.server.reset_stats();
        let out = run();
        let ran = lock_commands(&self.server.commandstats());
        if ran != calls(expected) {
            self.wrong.push(format!("{what}: ran {ran:?}"));
        }
        out
    }

    pub(crate) fn finish(self) {
        assert!(
            self.wrong.is_empty(),
            "steps with other commands than expected:\n{}",
            self.wrong.join("\n")
        );
    }
}
