//! Fences: strictly increasing per key, floored at the server clock at every
//! grant so they survive data loss and failover, and never burnt by a
//! replayed acquire.

use redis::Value;
use redlease::ReleaseOutcome;

use super::common::{
    config, connect, fence_name, get, granted, lock_name, namespace, pttl, server_time_ms,
    token_of, BOUND,
};
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// Grants on one key, alternating between two lockers, carry fences that
/// go up by one within a millisecond and to the server's `TIME` in ms × 1000
/// in a later one (SPEC §3: `max(counter + 1, TIME × 1000)`).
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

    // SPEC §3: each fence is max(counter + 1, TIME in ms × 1000): one more
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

/// The source of the script `const <name>: &str` in src/core/script.rs.
pub(crate) fn script_lua(name: &str) -> &'static str {
    const SCRIPT_RS: &str = include_str!("../../src/core/script.rs");
    let start_marker = format!("pub(crate) const {name}: &str = r#\"");
    let start = SCRIPT_RS
        .find(&start_marker)
        .map(|i| i + start_marker.len())
        .unwrap_or_else(|| panic!("src/core/script.rs defines {name} as a raw string"));
    let len = SCRIPT_RS[start..]
        .find("\"#;")
        .unwrap_or_else(|| panic!("{name}'s raw string ends with \"#;"));
    &SCRIPT_RS[start..start + len]
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
