//! Tests of the router, driven by a hand-moved clock: one `t0()` reading and
//! durations added to it. Replies are fed as `redis::Value`s or
//! `redis::RedisError`s; no Redis is involved.
//!
//! The unit tests walk through the crate docs and docs/PROTOCOL.md one behaviour at a time,
//! one file per concern; the property test in `sequences.rs` drives random
//! operation sequences through the reference model in `crate::core::model`
//! (shared with the `line` fuzz target), and those in `handover_props.rs`
//! drive the hand-over with random replies and notices. This file holds the
//! shared helpers.

mod acquiring;
mod cancel;
mod claimless;
mod failures;
mod handover_props;
mod leases;
mod linger;
mod multi;
mod notifications;
mod observed;
mod rw;
mod semaphore;
mod sequences;
mod shutdown;
mod subscription;
mod waiting;

use std::collections::BTreeSet;

use redis::RedisError;

use super::*;
use crate::core::lease::RenewResult;
use crate::core::line::HeadState;
use crate::core::names::LockNames;
use crate::core::outcome::{ReleaseOutcome, RenewOutcome};
use crate::core::script::ScriptKind;
use crate::core::subscription::RESUBSCRIBE_AFTER;

const POLL: Duration = Duration::from_millis(25);
const NOTIFY: Duration = Duration::from_millis(250);
const LEASE_MS: u64 = 10_000;
const LEASE: Duration = Duration::from_millis(LEASE_MS);

/// The one reading of the clock; every other instant is derived from it.
#[allow(clippy::disallowed_methods)]
fn t0() -> Instant {
    Instant::now()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn settings(max_waiters: usize, max_tracked_leases: usize) -> CoreSettings {
    CoreSettings {
        namespace: "ns".into(),
        channel: Channel::Standalone,
        poll_interval: POLL,
        notify_poll_interval: NOTIFY,
        max_waiters,
        max_tracked_leases,
        max_key_bytes: 1024,
        key_hash_tags: false,
        fence_counter_ttl_ms: 0,
        command_timeout: Duration::from_secs(2),
        handover: None,
        handover_wanted: false,
        claim_window: Some(Duration::from_millis(100)),
        claimless: true,
    }
}

fn core_at(now: Instant) -> Core {
    Core::new(settings(128, 10_000), now)
}

/// A core on Redis Cluster (per-key sharded channels), tracking up to
/// `max_leases`.
fn sharded_core_at(now: Instant, max_leases: usize) -> Core {
    Core::new(
        CoreSettings {
            channel: Channel::Sharded,
            ..settings(128, max_leases)
        },
        now,
    )
}

fn token(i: u8) -> OwnerToken {
    OwnerToken::from_bytes([i; 16])
}

fn waiting(wait: Duration) -> ResolvedOptions {
    ResolvedOptions {
        wait,
        lease_ms: LEASE_MS,
    }
}

fn acquired(fence: u64) -> Result<Value, RedisError> {
    Ok(Value::BulkString(fence.to_string().into_bytes()))
}

fn busy(remaining_ms: i64) -> Result<Value, RedisError> {
    Ok(Value::Int(remaining_ms))
}

/// The campaign's busy reply: held `us` µs after Redis read it.
fn busy_for_us(us: i64) -> Result<Value, RedisError> {
    Ok(Value::Array(vec![Value::Int(us)]))
}

fn busy_unknown() -> Result<Value, RedisError> {
    Ok(Value::Nil)
}

fn timed_out() -> Result<Value, RedisError> {
    Err(RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "t",
    )))
}

fn server_error() -> Result<Value, RedisError> {
    Err(RedisError::from((
        redis::ErrorKind::Extension,
        "OOM",
        "x".to_string(),
    )))
}

fn join(core: &mut Core, now: Instant, key: &str, i: u8, wait: Duration) -> WaiterId {
    core.acquire(now, key, token(i), waiting(wait))
        .expect("the acquire is admitted")
}

fn drain(core: &mut Core) -> Vec<CoreEvent> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

#[track_caller]
fn attempt(core: &mut Core, now: Instant, id: WaiterId) -> ScriptCall {
    match core.poll_waiter(now, id) {
        WaiterStep::Attempt(call) => call,
        other => panic!("expected an attempt, got {other:?}"),
    }
}

#[track_caller]
fn wait_until(core: &mut Core, now: Instant, id: WaiterId) -> Option<Instant> {
    match core.poll_waiter(now, id) {
        WaiterStep::Wait(at) => at,
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[track_caller]
fn granted(core: &mut Core, now: Instant, id: WaiterId) -> Grant {
    match core.poll_waiter(now, id) {
        WaiterStep::Done(Ok(grant)) => grant,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[track_caller]
fn failed(core: &mut Core, now: Instant, id: WaiterId) -> Error {
    match core.poll_waiter(now, id) {
        WaiterStep::Done(Err(e)) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A waiter that joined, tried, and found the lock busy for `remaining_ms`.
/// Its events are left in the queue.
fn busy_head(core: &mut Core, now: Instant, key: &str, i: u8, remaining_ms: i64) -> WaiterId {
    let id = join(core, now, key, i, secs(60));
    attempt(core, now, id);
    core.handle_acquire_reply(now, id, busy(remaining_ms));
    id
}

/// Joins, tries and is granted the lease at once.
fn grant_now(core: &mut Core, now: Instant, key: &str, i: u8, fence: u64) -> Grant {
    let id = join(core, now, key, i, secs(5));
    attempt(core, now, id);
    core.handle_acquire_reply(now, id, acquired(fence));
    granted(core, now, id)
}

fn notify(core: &mut Core, key: &str) {
    core.handle_notification(KeyId::of(key).to_hex().as_bytes());
}

fn ok(value: Value) -> Result<Value, RedisError> {
    Ok(value)
}

/// The head of `key`'s line.
fn head(core: &Core, key: &str) -> Option<WaiterId> {
    core.lines
        .get(&LineKey::lock(KeyId::of(key)))
        .and_then(Line::head)
}

/// Every acquire in progress for `key`.
fn members(core: &Core, key: &str) -> BTreeSet<WaiterId> {
    let id = KeyId::of(key);
    core.waiters
        .iter()
        .filter(|(_, w)| w.target.line().id == id)
        .map(|(slot, _)| WaiterId(slot))
        .collect()
}

/// `key`'s line is headed by `expected[0]` and holds exactly `expected`.
#[track_caller]
fn assert_line(core: &Core, key: &str, expected: &[WaiterId]) {
    assert_eq!(head(core, key), expected.first().copied(), "head");
    assert_eq!(
        members(core, key),
        expected.iter().copied().collect::<BTreeSet<_>>(),
        "members"
    );
    assert_eq!(
        core.lines.contains_key(&LineKey::lock(KeyId::of(key))),
        !expected.is_empty()
    );
}

fn head_state(core: &Core, key: &str) -> Option<HeadState> {
    core.lines
        .get(&LineKey::lock(KeyId::of(key)))
        .map(Line::head_state)
}

fn packed(call: &ScriptCall) -> String {
    String::from_utf8_lossy(&call.evalsha().get_packed_command()).into_owned()
}

fn releases(call: &ScriptCall, token: OwnerToken) -> bool {
    call.kind == ScriptKind::Release && packed(call).contains(&token.to_hex())
}
