//! Tests of the router, driven by a hand-moved clock: one `t0()` reading and
//! durations added to it. Replies are fed as `redis::Value`s or
//! `redis::RedisError`s; no Redis is involved.
//!
//! The unit tests walk through SPEC §3–§5 and §9 one behaviour at a time; the
//! property test at the bottom drives random operation sequences through the
//! reference model in `crate::fuzzing` (shared with the `line` fuzz target).

use std::collections::BTreeSet;

use redis::RedisError;

use super::*;
use crate::core::line::HeadState;
use crate::core::script::ScriptKind;

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
        fence_counter_ttl_ms: 0,
    }
}

fn core_at(now: Instant) -> Core {
    Core::new(settings(128, 10_000), now)
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
    core.lines.get(&KeyId::of(key)).and_then(Line::head)
}

/// Every acquire in progress for `key`.
fn members(core: &Core, key: &str) -> BTreeSet<WaiterId> {
    let id = KeyId::of(key);
    core.waiters
        .iter()
        .filter(|(_, w)| w.names.id == id)
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
        core.lines.contains_key(&KeyId::of(key)),
        !expected.is_empty()
    );
}

fn head_state(core: &Core, key: &str) -> Option<HeadState> {
    core.lines.get(&KeyId::of(key)).map(Line::head_state)
}

fn packed(call: &ScriptCall) -> String {
    String::from_utf8_lossy(&call.evalsha().get_packed_command()).into_owned()
}

fn releases(call: &ScriptCall, token: OwnerToken) -> bool {
    call.kind == ScriptKind::Release && packed(call).contains(&token.to_hex())
}

// ----- acquiring --------------------------------------------------------------

#[test]
fn a_free_key_is_acquired_with_its_fence_and_a_lease_counted_from_submission() {
    let now = t0();
    let mut core = core_at(now);
    let id = join(&mut core, now, "job:42", 1, secs(5));

    let submitted = now + ms(3);
    let call = attempt(&mut core, submitted, id);
    assert_eq!(call.kind, ScriptKind::Acquire);
    let names = LockNames::new("ns", KeyId::of("job:42"));
    let text = packed(&call);
    assert!(text.contains(&names.lock) && text.contains(&names.fence));
    assert!(text.contains(&token(1).to_hex()));
    assert!(text.contains("10000"), "the lease in ms");
    assert_eq!(core.counts().attempts_in_flight, 1);

    let replied = submitted + ms(400);
    core.handle_acquire_reply(replied, id, acquired(123));
    let grant = granted(&mut core, replied, id);
    assert_eq!(grant.fence, Fence::new(123));
    assert_eq!(grant.clock.remaining(replied), LEASE - ms(400));
    assert!(grant.clock.is_valid(submitted + LEASE - ms(1)));
    assert!(!grant.clock.is_valid(submitted + LEASE));

    assert_eq!(
        core.counts(),
        CoreCounts {
            waiters: 0,
            tracked_leases: 1,
            attempts_in_flight: 0,
            orphans: 0,
            safety_polls: 0,
        }
    );
    assert!(drain(&mut core).is_empty(), "no contention, no subscriber");
    assert!(core.lines.is_empty());
    assert!(core.release_call(grant.lease).is_ok());
}

#[test]
fn invalid_keys_are_refused_and_change_nothing() {
    let now = t0();
    let mut core = core_at(now);
    let e = core
        .acquire(now, "", token(1), waiting(secs(1)))
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_KEY");
    let e = core
        .acquire(now, &"x".repeat(1025), token(1), waiting(secs(1)))
        .unwrap_err();
    assert_eq!(e.code(), "INVALID_KEY");
    assert_eq!(core.counts(), CoreCounts::default());
    join(&mut core, now, &"x".repeat(1024), 1, secs(1));
    assert_eq!(core.counts().waiters, 1);
}

#[test]
fn only_the_head_of_a_line_gets_an_attempt() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(2));
    assert_eq!(wait_until(&mut core, now, b), Some(now + secs(2)));
    attempt(&mut core, now, a);
    assert_eq!(
        wait_until(&mut core, now, a),
        None,
        "a spurious poll during the attempt waits for its reply"
    );
    assert_eq!(wait_until(&mut core, now + ms(5), b), Some(now + secs(2)));
    assert_eq!(core.counts().attempts_in_flight, 1);
    assert_line(&core, "k", &[a, b]);
}

#[test]
fn sixteen_waiters_on_one_key_make_one_attempt_at_a_time_and_are_granted_in_arrival_order() {
    let now = t0();
    let mut core = core_at(now);
    let ids: Vec<WaiterId> = (0..16u8)
        .map(|i| join(&mut core, now, "k", i, secs(10)))
        .collect();
    attempt(&mut core, now, ids[0]);
    for (n, &id) in ids.iter().enumerate() {
        for &other in &ids[n + 1..] {
            assert_eq!(wait_until(&mut core, now, other), Some(now + secs(10)));
        }
        assert_eq!(core.counts().attempts_in_flight, 1);
        let fence = 100 + n as u64;
        core.handle_acquire_reply(now, id, acquired(fence));
        assert_eq!(granted(&mut core, now, id).fence, Fence::new(fence));
        let events = drain(&mut core);
        if let Some(&next) = ids.get(n + 1) {
            assert_eq!(events, vec![CoreEvent::Wake(next)]);
            assert_eq!(head(&core, "k"), Some(next));
            assert_eq!(
                wait_until(&mut core, now, next),
                Some(now + POLL),
                "the locker holds the key now: no attempt before the release"
            );
            // The holder's release notification hands the line on.
            core.handle_notification(KeyId::of("k").to_hex().as_bytes());
            assert_eq!(drain(&mut core), vec![CoreEvent::Wake(next)]);
            attempt(&mut core, now, next);
        }
    }
    assert_eq!(core.counts().tracked_leases, 16);
    assert_eq!(core.counts().waiters, 0);
}

#[test]
fn other_keys_have_their_own_lines() {
    let now = t0();
    let mut core = core_at(now);
    let a1 = join(&mut core, now, "a", 1, secs(5));
    let b1 = join(&mut core, now, "b", 2, secs(5));
    let a2 = join(&mut core, now, "a", 3, secs(5));
    attempt(&mut core, now, a1);
    attempt(&mut core, now, b1);
    assert_eq!(core.counts().attempts_in_flight, 2);
    assert!(matches!(core.poll_waiter(now, a2), WaiterStep::Wait(_)));

    core.handle_acquire_reply(now, a1, busy(5_000));
    core.handle_acquire_reply(now, b1, acquired(1));
    granted(&mut core, now, b1);
    assert_eq!(
        drain(&mut core),
        vec![CoreEvent::StartSubscriber],
        "b's grant wakes nobody in a's line"
    );
    assert_line(&core, "a", &[a1, a2]);
    assert_line(&core, "b", &[]);
    assert_eq!(wait_until(&mut core, now, a1), Some(now + POLL));
}

#[test]
fn when_the_head_acquires_the_next_waiter_becomes_head_and_waits_for_the_release_notification() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(5));
    let c = join(&mut core, now, "k", 3, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(7));
    assert!(
        drain(&mut core).is_empty(),
        "nobody moves until a takes its grant"
    );
    granted(&mut core, now, a);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    assert_line(&core, "k", &[b, c]);
    assert_eq!(
        head_state(&core, "k"),
        Some(HeadState::Backoff {
            retry_at: Some(now + POLL)
        }),
        "this locker holds the key: trying now could only hear busy; \
         the safety poll still covers a lost notification"
    );
    assert_eq!(wait_until(&mut core, now, b), Some(now + POLL));
    core.handle_notification(KeyId::of("k").to_hex().as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, now, b);
    assert_eq!(wait_until(&mut core, now, c), Some(now + secs(5)));
}

// ----- busy replies, safety interval and notifications ------------------------

#[test]
fn a_busy_head_retries_after_the_smallest_of_remaining_safety_and_wait_left() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(1));
    attempt(&mut core, now, a);

    // remaining is the smallest
    core.handle_acquire_reply(now, a, busy(10));
    assert_eq!(wait_until(&mut core, now, a), Some(now + ms(10)));

    // the safety interval (poll_interval: not subscribed yet) is the smallest
    let t = now + ms(10);
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy(5_000));
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));

    // a busy reply without remaining time waits for the safety interval
    let t = t + POLL;
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy_unknown());
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));

    // the wait left is the smallest
    let t = now + ms(990);
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy(5_000));
    assert_eq!(wait_until(&mut core, t, a), Some(now + secs(1)));

    // at the deadline the head gives up with the holder's time, reduced by
    // the time since the busy reply
    match failed(&mut core, now + secs(1), a) {
        Error::WaitTimeout { waited, remaining } => {
            assert_eq!(waited, secs(1));
            assert_eq!(remaining, Some(ms(4_990)));
        }
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    assert!(core.lines.is_empty());
}

#[test]
fn the_safety_interval_is_poll_interval_until_the_subscription_is_confirmed() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);
    assert!(!core.is_subscribed());
    assert_eq!(wait_until(&mut core, now, a), Some(now + POLL));

    let t = now + POLL;
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy(5_000));
    assert!(drain(&mut core).is_empty());
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));

    // when the subscription is confirmed the head checks once more
    core.handle_subscribed();
    assert!(core.is_subscribed());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy(5_000));
    assert!(drain(&mut core).is_empty());
    assert_eq!(
        wait_until(&mut core, t, a),
        Some(t + NOTIFY),
        "subscribed: notify_poll_interval"
    );
}

#[test]
fn the_first_busy_reply_of_a_waiting_acquire_starts_the_subscriber_exactly_once() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "a", 1, 5_000);
    let b = busy_head(&mut core, now, "b", 2, 5_000);
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);
    assert_eq!(core.poll_subscriber(now), SubscriberStep::Listen(None));
    for (i, id) in [a, b].into_iter().enumerate() {
        let t = now + POLL * (i as u32 + 1);
        attempt(&mut core, t, id);
        core.handle_acquire_reply(t, id, busy(5_000));
    }
    assert!(
        drain(&mut core).is_empty(),
        "still starting: no second start"
    );
    core.handle_subscribed();
    let woken: BTreeSet<WaiterId> = drain(&mut core)
        .into_iter()
        .map(|e| match e {
            CoreEvent::Wake(id) => id,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(woken, BTreeSet::from([a, b]));
    attempt(&mut core, now + secs(1), a);
    core.handle_acquire_reply(now + secs(1), a, busy(5_000));
    assert!(drain(&mut core).is_empty(), "subscribed: no second start");
}

#[test]
fn when_the_subscription_is_confirmed_every_backing_off_head_checks_once_more() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "a", 1, 5_000);
    let b = busy_head(&mut core, now, "b", 2, 5_000);
    let behind = join(&mut core, now, "b", 3, secs(60));
    let c = join(&mut core, now, "c", 4, secs(60));
    attempt(&mut core, now, c); // c's attempt is in flight
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);

    core.handle_subscribed();
    let woken: BTreeSet<WaiterId> = drain(&mut core)
        .into_iter()
        .map(|e| match e {
            CoreEvent::Wake(id) => id,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        woken,
        BTreeSet::from([a, b]),
        "backing-off heads only, never the waiters behind them"
    );
    let t = now + ms(1);
    attempt(&mut core, t, a);
    attempt(&mut core, t, b);
    assert_eq!(wait_until(&mut core, t, behind), Some(now + secs(60)));
    // c was in flight: its busy reply is retried at once
    core.handle_acquire_reply(t, c, busy(5_000));
    attempt(&mut core, t, c);
}

#[test]
fn head_retries_at_once_when_release_notification_arrives() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, secs(60));
    drain(&mut core);
    assert_eq!(wait_until(&mut core, now, a), Some(now + POLL));

    let t = now + ms(5);
    notify(&mut core, "k");
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    attempt(&mut core, t, a);
    assert_eq!(wait_until(&mut core, t, b), Some(now + secs(60)));
}

#[test]
fn a_notification_wakes_only_the_head_of_its_own_key() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "a", 1, 5_000);
    let a2 = join(&mut core, now, "a", 2, secs(60));
    let b = busy_head(&mut core, now, "b", 3, 5_000);
    drain(&mut core);
    for id in [a, b] {
        wait_until(&mut core, now, id);
    }
    notify(&mut core, "a");
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    assert_eq!(head_state(&core, "a"), Some(HeadState::Ready));
    assert_eq!(
        head_state(&core, "b"),
        Some(HeadState::Backoff {
            retry_at: Some(now + POLL)
        })
    );
    assert_eq!(wait_until(&mut core, now, a2), Some(now + secs(60)));
    // a notification for a key nobody here waits for wakes nobody
    notify(&mut core, "unrelated");
    assert!(drain(&mut core).is_empty());
}

#[test]
fn garbage_notification_payloads_are_ignored() {
    let now = t0();
    let mut core = core_at(now);
    busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    let before = head_state(&core, "k");
    let hex = KeyId::of("k").to_hex();
    let garbage: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"garbage".to_vec(),
        hex.to_uppercase().into_bytes(),
        hex.as_bytes()[..63].to_vec(),
        format!("{hex}0").into_bytes(),
        format!("{hex}\n").into_bytes(),
        vec![0xff; 64],
        "z".repeat(64).into_bytes(),
        b"k".to_vec(),
    ];
    for payload in garbage {
        core.handle_notification(&payload);
        assert!(drain(&mut core).is_empty(), "{payload:?}");
        assert_eq!(head_state(&core, "k"), before);
    }
    core.handle_notification(hex.as_bytes());
    assert_eq!(drain(&mut core).len(), 1);
}

#[test]
fn a_notification_during_the_attempt_makes_the_busy_reply_retry_at_once() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(60));
    attempt(&mut core, now, a);
    notify(&mut core, "k");
    assert!(
        drain(&mut core).is_empty(),
        "the head is busy talking to Redis"
    );
    let t = now + ms(2);
    core.handle_acquire_reply(t, a, busy(5_000));
    attempt(&mut core, t, a);
    // only once: the next busy reply backs off again
    core.handle_acquire_reply(t, a, busy(5_000));
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));
}

// ----- wait zero --------------------------------------------------------------

#[test]
fn wait_zero_tries_once_then_reports_busy_with_the_holders_remaining_time() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, Duration::ZERO);
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now + ms(1), a, busy(1_500));
    match failed(&mut core, now + ms(1), a) {
        Error::Busy { remaining } => assert_eq!(remaining, Some(ms(1_500))),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(drain(&mut core).is_empty(), "a try-once never subscribes");
    assert_eq!(core.counts(), CoreCounts::default());
    assert!(core.lines.is_empty());

    let b = join(&mut core, now, "k", 2, Duration::ZERO);
    attempt(&mut core, now, b);
    core.handle_acquire_reply(now, b, busy_unknown());
    assert!(matches!(
        failed(&mut core, now, b),
        Error::Busy { remaining: None }
    ));

    let c = join(&mut core, now, "k", 3, Duration::ZERO);
    attempt(&mut core, now, c);
    core.handle_acquire_reply(now, c, acquired(9));
    assert_eq!(granted(&mut core, now, c).fence, Fence::new(9));
}

#[test]
fn wait_zero_is_busy_at_once_without_an_attempt_when_the_line_has_a_waiter() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    let e = core
        .acquire(now, "k", token(2), waiting(Duration::ZERO))
        .unwrap_err();
    assert!(
        matches!(e, Error::Busy { remaining: None }),
        "holder unknown yet: {e:?}"
    );
    assert_eq!(core.counts().waiters, 1);
    assert_eq!(core.counts().attempts_in_flight, 1);

    core.handle_acquire_reply(now, a, busy(3_000));
    drain(&mut core);
    let e = core
        .acquire(now + secs(1), "k", token(2), waiting(Duration::ZERO))
        .unwrap_err();
    assert!(
        matches!(e, Error::Busy { remaining: Some(r) } if r == secs(2)),
        "{e:?}"
    );
    assert_line(&core, "k", &[a]);

    // another key is not affected
    let other = join(&mut core, now, "other", 3, Duration::ZERO);
    attempt(&mut core, now, other);
}

// ----- limits -------------------------------------------------------------------

#[test]
fn queue_full_counts_every_acquire_in_progress() {
    let now = t0();
    let mut core = Core::new(settings(3, 100), now);
    let a = join(&mut core, now, "a", 1, secs(5));
    attempt(&mut core, now, a); // in flight
    join(&mut core, now, "a", 2, secs(5)); // waiting behind
    let c = join(&mut core, now, "c", 3, Duration::ZERO); // try-once
    attempt(&mut core, now, c);
    for wait in [secs(5), Duration::ZERO] {
        let e = core.acquire(now, "d", token(4), waiting(wait)).unwrap_err();
        assert!(matches!(e, Error::QueueFull { limit: 3 }), "{e:?}");
        assert_eq!(e.code(), "QUEUE_FULL");
    }
    core.handle_acquire_reply(now, c, acquired(1));
    assert_eq!(core.counts().waiters, 3, "the grant is not taken yet");
    assert!(core.acquire(now, "d", token(4), waiting(secs(5))).is_err());
    granted(&mut core, now, c);
    join(&mut core, now, "d", 4, secs(5)); // a held lease is not an acquire in progress
}

#[test]
fn too_many_leases_is_refused_at_acquire() {
    let now = t0();
    let mut core = Core::new(settings(128, 1), now);
    let grant = grant_now(&mut core, now, "a", 1, 1);
    let e = core
        .acquire(now, "b", token(2), waiting(secs(5)))
        .unwrap_err();
    assert!(matches!(e, Error::TooManyLeases { limit: 1 }), "{e:?}");
    assert_eq!(e.code(), "QUEUE_FULL");
    assert_eq!(core.counts().waiters, 0);
    core.handle_release_reply(grant.lease, ok(Value::Int(1)))
        .unwrap();
    join(&mut core, now, "b", 2, secs(5));
}

#[test]
fn a_grant_beyond_max_tracked_leases_becomes_an_orphan_released_by_token() {
    let now = t0();
    let mut core = Core::new(settings(128, 1), now);
    let a = join(&mut core, now, "a", 1, secs(5));
    let b = join(&mut core, now, "b", 2, secs(5));
    attempt(&mut core, now, a);
    attempt(&mut core, now, b);
    core.handle_acquire_reply(now, a, acquired(1));
    granted(&mut core, now, a);
    core.handle_acquire_reply(now, b, acquired(2));
    assert!(matches!(
        failed(&mut core, now, b),
        Error::TooManyLeases { limit: 1 }
    ));
    assert_eq!(core.counts().tracked_leases, 1);
    assert_eq!(core.counts().orphans, 1);
    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(2)));
    assert_eq!(core.counts().orphans, 0);
    assert!(core.take_orphans().is_empty());
}

// ----- timeouts -----------------------------------------------------------------

#[test]
fn the_wait_times_out_at_its_deadline_with_the_holders_remaining_time() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, ms(100));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now + ms(2), a, busy(3_000));
    assert_eq!(wait_until(&mut core, now + ms(2), a), Some(now + ms(27)));
    assert_eq!(wait_until(&mut core, now + ms(20), a), Some(now + ms(27)));
    match failed(&mut core, now + ms(100), a) {
        Error::WaitTimeout { waited, remaining } => {
            assert_eq!(waited, ms(100));
            assert_eq!(remaining, Some(ms(2_902)));
        }
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    assert_eq!(core.counts(), CoreCounts::default());

    // an unknown holder time stays unknown
    let b = join(&mut core, now, "k", 2, ms(100));
    attempt(&mut core, now, b);
    core.handle_acquire_reply(now, b, busy_unknown());
    assert!(matches!(
        failed(&mut core, now + secs(1), b),
        Error::WaitTimeout {
            remaining: None,
            ..
        }
    ));
}

#[test]
fn a_waiter_behind_the_head_times_out_at_its_own_deadline_and_the_head_keeps_its_state() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, ms(100));
    let c = join(&mut core, now, "k", 3, secs(60));
    drain(&mut core);
    assert_eq!(wait_until(&mut core, now, b), Some(now + ms(100)));
    let state = head_state(&core, "k");

    let t = now + ms(100);
    match failed(&mut core, t, b) {
        Error::WaitTimeout { waited, remaining } => {
            assert_eq!(waited, ms(100));
            assert_eq!(
                remaining,
                Some(ms(4_900)),
                "the line knows the holder's time"
            );
        }
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    assert!(drain(&mut core).is_empty());
    assert_eq!(head_state(&core, "k"), state);
    assert_line(&core, "k", &[a, c]);
}

#[test]
fn when_the_head_gives_up_the_next_waiter_becomes_head() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, ms(50));
    let b = join(&mut core, now, "k", 2, secs(60));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, busy(5_000));
    drain(&mut core);
    let t = now + ms(50);
    assert_eq!(failed(&mut core, t, a).code(), "WAIT_TIMEOUT");
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, t, b);
}

#[test]
fn an_attempt_in_flight_at_the_deadline_is_answered_before_the_wait_ends() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "a", 1, ms(50));
    attempt(&mut core, now, a);
    assert_eq!(wait_until(&mut core, now + ms(60), a), None);
    core.handle_acquire_reply(now + ms(70), a, acquired(3));
    assert_eq!(granted(&mut core, now + ms(70), a).fence, Fence::new(3));

    let b = join(&mut core, now, "b", 2, ms(50));
    attempt(&mut core, now, b);
    core.handle_acquire_reply(now + ms(60), b, busy(1_000));
    match failed(&mut core, now + ms(60), b) {
        Error::WaitTimeout { waited, remaining } => {
            assert_eq!(waited, ms(60));
            assert_eq!(remaining, Some(secs(1)));
        }
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
}

#[test]
fn a_waiter_without_a_deadline_never_times_out() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, Duration::MAX);
    drain(&mut core);
    assert_eq!(wait_until(&mut core, now, b), None);
    let later = now + secs(365 * 24 * 3600);
    assert_eq!(wait_until(&mut core, later, b), None);
    assert_eq!(failed(&mut core, later, a).code(), "WAIT_TIMEOUT");
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, later, b);
    core.handle_acquire_reply(later, b, busy(5_000));
    assert_eq!(wait_until(&mut core, later, b), Some(later + POLL));
}

// ----- cancel and abandon ---------------------------------------------------------

#[test]
fn cancelling_a_waiting_waiter_ends_it_and_the_line_continues() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, secs(60));
    drain(&mut core);
    core.cancel(a);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    assert!(matches!(failed(&mut core, now, a), Error::Cancelled));
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, now, b);
    assert_eq!(core.counts().waiters, 1);
}

#[test]
fn cancelling_from_the_middle_does_not_disturb_the_head() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, secs(60));
    let c = join(&mut core, now, "k", 3, secs(60));
    drain(&mut core);
    let state = head_state(&core, "k");
    assert_eq!(
        state,
        Some(HeadState::Backoff {
            retry_at: Some(now + POLL)
        })
    );

    core.cancel(b);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    assert!(matches!(failed(&mut core, now, b), Error::Cancelled));
    assert!(drain(&mut core).is_empty(), "nobody else is woken");
    assert_eq!(head_state(&core, "k"), state);
    assert_line(&core, "k", &[a, c]);
    assert_eq!(wait_until(&mut core, now, a), Some(now + POLL));
    attempt(&mut core, now + POLL, a);

    // also while the head's attempt is in flight
    core.cancel(c);
    drain(&mut core);
    assert!(matches!(failed(&mut core, now + POLL, c), Error::Cancelled));
    assert_eq!(
        head_state(&core, "k"),
        Some(HeadState::Attempting { notified: false })
    );
    assert_eq!(core.counts().attempts_in_flight, 1);
}

#[test]
fn a_cancelled_head_whose_attempt_acquires_still_gets_its_lease() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(5));
    attempt(&mut core, now, a);
    core.cancel(a);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    assert_eq!(
        wait_until(&mut core, now, a),
        None,
        "the reply is still due"
    );
    core.handle_acquire_reply(now, a, acquired(11));
    assert_eq!(granted(&mut core, now, a).fence, Fence::new(11));
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    assert_eq!(wait_until(&mut core, now, b), Some(now + POLL));
    core.handle_notification(KeyId::of("k").to_hex().as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);

    // the same with a busy reply: the cancel wins
    attempt(&mut core, now, b);
    core.cancel(b);
    drain(&mut core);
    core.handle_acquire_reply(now, b, busy(1_000));
    assert!(matches!(failed(&mut core, now, b), Error::Cancelled));
    assert_eq!(core.counts().waiters, 0);
}

#[test]
fn abandoning_during_an_attempt_orphans_the_token_and_wakes_the_next_head() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(5));
    attempt(&mut core, now, a);
    core.abandon(now, a);
    assert_eq!(
        core.counts(),
        CoreCounts {
            waiters: 1,
            tracked_leases: 0,
            attempts_in_flight: 0,
            orphans: 1,
            safety_polls: 0,
        }
    );
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, now, b);

    // the abandoned attempt's late reply changes nothing
    let before = core.counts();
    core.handle_acquire_reply(now, a, acquired(5));
    assert_eq!(core.counts(), before);
    assert!(drain(&mut core).is_empty());

    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
}

#[test]
fn abandoning_a_waiter_that_is_not_talking_to_redis_leaves_no_orphan() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, secs(60));
    let c = join(&mut core, now, "k", 3, secs(60));
    drain(&mut core);
    core.abandon(now, b);
    assert!(drain(&mut core).is_empty());
    assert_line(&core, "k", &[a, c]);
    core.abandon(now, a);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(c)]);
    assert_eq!(core.counts().orphans, 0);
    assert!(core.take_orphans().is_empty());
}

#[test]
fn abandoning_after_a_grant_that_was_not_taken_releases_the_lease_by_token() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(1));
    assert_eq!(core.counts().tracked_leases, 1);
    core.abandon(now, a);
    assert_eq!(core.counts().tracked_leases, 0);
    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
}

#[test]
fn a_stale_waiter_id_after_finish_is_harmless() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(1));
    granted(&mut core, now, a);

    let before = core.counts();
    assert!(matches!(
        core.poll_waiter(now, a),
        WaiterStep::Done(Err(Error::Cancelled))
    ));
    core.cancel(a);
    core.abandon(now, a);
    core.handle_acquire_reply(now, a, acquired(2));
    assert_eq!(core.counts(), before);
    assert!(drain(&mut core).is_empty());

    // the slot is reused by a new waiter; the old id cannot reach it
    let b = join(&mut core, now, "k", 2, secs(5));
    assert_ne!(a, b);
    attempt(&mut core, now, b);
    core.cancel(a);
    core.abandon(now, a);
    core.handle_acquire_reply(now, a, acquired(3));
    assert!(drain(&mut core).is_empty());
    assert_eq!(core.counts().attempts_in_flight, 1);
    assert_eq!(core.counts().orphans, 0);
    core.handle_acquire_reply(now, b, acquired(4));
    assert_eq!(granted(&mut core, now, b).fence, Fence::new(4));
}

// ----- failed attempts ----------------------------------------------------------

#[test]
fn every_acquire_reply_is_summarised_for_statistics() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    assert_eq!(
        core.handle_acquire_reply(now, a, acquired(1)),
        AttemptSummary::Ignored,
        "no attempt in flight yet"
    );
    attempt(&mut core, now, a);
    let summary = core.handle_acquire_reply(now, a, busy(100));
    assert!(summary.is_busy());
    attempt(&mut core, now + ms(100), a);
    assert_eq!(
        core.handle_acquire_reply(now, a, timed_out()),
        AttemptSummary::Failed
    );
    failed(&mut core, now, a);
    let b = join(&mut core, now, "k", 2, secs(5));
    attempt(&mut core, now, b);
    assert_eq!(
        core.handle_acquire_reply(now, b, acquired(2)),
        AttemptSummary::Acquired
    );
    assert_eq!(
        core.handle_acquire_reply(now, b, acquired(3)),
        AttemptSummary::Ignored,
        "answered exactly once"
    );
    granted(&mut core, now, b);
    assert_eq!(
        core.handle_acquire_reply(now, b, acquired(4)),
        AttemptSummary::Ignored,
        "a finished waiter"
    );
}

#[test]
fn an_acquire_with_unknown_outcome_orphans_its_token() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, timed_out());
    let e = failed(&mut core, now, a);
    assert_eq!(e.code(), "OUTCOME_UNKNOWN");
    assert!(matches!(
        e,
        Error::OutcomeUnknown {
            op: Operation::Acquire,
            ..
        }
    ));
    assert!(std::error::Error::source(&e).is_some());
    assert_eq!(core.counts().orphans, 1);
    assert_eq!(core.counts().tracked_leases, 0);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, now, b);
    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
}

#[test]
fn a_server_error_reply_is_provider_failed_and_leaves_no_orphan() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, server_error());
    let e = failed(&mut core, now, a);
    assert_eq!(e.code(), "PROVIDER_FAILED");
    assert!(e.redis_error().is_some());
    assert_eq!(core.counts().orphans, 0);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, now, b);
}

#[test]
fn an_acquire_that_was_never_sent_is_provider_failed_and_leaves_no_orphan() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    let refused = RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "connect timed out",
    ));
    let reply: Result<Value, Failure> = Err(Failure::NotSent(refused));
    assert_eq!(
        core.handle_acquire_reply(now, a, reply),
        AttemptSummary::Failed
    );
    let e = failed(&mut core, now, a);
    assert_eq!(
        e.code(),
        "PROVIDER_FAILED",
        "even a timeout, when nothing was sent"
    );
    assert_eq!(core.counts().orphans, 0);
}

#[test]
fn an_unexpected_reply_shape_is_outcome_unknown_and_orphans_its_token() {
    let shapes = [
        Value::Okay,
        Value::BulkString(b"0".to_vec()),
        Value::BulkString(b"12a".to_vec()),
        Value::BulkString(b"1.5e+15".to_vec()),
        Value::Int(-3),
        Value::Array(vec![Value::Int(1)]),
        Value::SimpleString("OK".into()),
    ];
    for (i, shape) in shapes.into_iter().enumerate() {
        let now = t0();
        let mut core = core_at(now);
        let a = join(&mut core, now, "k", i as u8, secs(5));
        attempt(&mut core, now, a);
        core.handle_acquire_reply(now, a, ok(shape));
        let e = failed(&mut core, now, a);
        assert_eq!(e.code(), "OUTCOME_UNKNOWN");
        assert!(matches!(
            e,
            Error::UnexpectedReply {
                op: Operation::Acquire,
                ..
            }
        ));
        let calls = core.take_orphans();
        assert_eq!(calls.len(), 1);
        assert!(releases(&calls[0], token(i as u8)));
    }
}

// ----- the subscription -------------------------------------------------------------

#[test]
fn the_subscriber_listens_while_waiters_exist_and_stops_a_second_after_the_last_leaves() {
    let now = t0();
    let mut core = core_at(now);
    assert_eq!(
        core.poll_subscriber(now),
        SubscriberStep::Stop,
        "never started"
    );

    let a = busy_head(&mut core, now, "k", 1, 5_000);
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);
    assert_eq!(core.poll_subscriber(now), SubscriberStep::Listen(None));
    core.handle_subscribed();
    drain(&mut core);
    assert_eq!(core.poll_subscriber(now), SubscriberStep::Listen(None));

    let t1 = now + ms(100);
    attempt(&mut core, t1, a);
    core.handle_acquire_reply(t1, a, acquired(1));
    granted(&mut core, t1, a);
    let until = t1 + secs(1);
    assert_eq!(
        core.poll_subscriber(t1),
        SubscriberStep::Listen(Some(until))
    );
    assert_eq!(
        core.poll_subscriber(until - ms(1)),
        SubscriberStep::Listen(Some(until))
    );
    assert!(core.is_subscribed());
    assert_eq!(core.poll_subscriber(until), SubscriberStep::Stop);
    assert!(!core.is_subscribed());
    assert_eq!(core.poll_subscriber(until + secs(1)), SubscriberStep::Stop);

    // without contention it never subscribes again
    let t2 = until + secs(2);
    grant_now(&mut core, t2, "other", 2, 1);
    assert!(drain(&mut core).is_empty());
    // with contention it does
    busy_head(&mut core, t2, "k", 3, 5_000);
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);
}

#[test]
fn a_waiter_returning_within_the_linger_keeps_the_subscription() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    core.handle_subscribed();
    drain(&mut core);
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(1));
    granted(&mut core, now, a);

    let t = now + ms(500);
    let b = busy_head(&mut core, t, "k", 2, 5_000);
    assert!(
        drain(&mut core).is_empty(),
        "still subscribed: no new start"
    );
    assert_eq!(wait_until(&mut core, t, b), Some(t + NOTIFY));
    assert_eq!(
        core.poll_subscriber(now + secs(2)),
        SubscriberStep::Listen(None)
    );
    assert!(core.is_subscribed());
}

#[test]
fn a_failed_subscription_is_reported_once_and_heads_poll_at_poll_interval() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    core.handle_subscribed();
    drain(&mut core);
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, busy(5_000));
    assert_eq!(wait_until(&mut core, now, a), Some(now + NOTIFY));

    let t = now + ms(10);
    assert!(
        core.handle_subscription_failed(t),
        "log LOCK_NOTIFY_UNAVAILABLE"
    );
    assert!(!core.is_subscribed());
    assert_eq!(
        drain(&mut core),
        vec![CoreEvent::Wake(a)],
        "the backing-off head is clamped"
    );
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));
    assert!(!core.handle_subscription_failed(t), "logged once");
    assert!(drain(&mut core).is_empty(), "already within poll_interval");
    assert_eq!(core.poll_subscriber(t), SubscriberStep::Stop);

    let t = t + POLL;
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy(5_000));
    assert!(
        drain(&mut core).is_empty(),
        "no new start while unavailable"
    );
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));
}

#[test]
fn waiters_returning_five_seconds_after_the_last_left_subscribe_again() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    assert!(core.handle_subscription_failed(now));
    drain(&mut core);
    let t1 = now + ms(30);
    attempt(&mut core, t1, a);
    core.handle_acquire_reply(t1, a, acquired(1));
    granted(&mut core, t1, a);

    let t2 = t1 + RESUBSCRIBE_AFTER;
    let b = busy_head(&mut core, t2, "k", 2, 5_000);
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);
    assert_eq!(wait_until(&mut core, t2, b), Some(t2 + POLL));
    assert_eq!(core.poll_subscriber(t2), SubscriberStep::Listen(None));
    core.handle_subscribed();
    assert!(core.is_subscribed());
}

#[test]
fn waiters_returning_sooner_than_five_seconds_do_not_subscribe_again() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    assert!(core.handle_subscription_failed(now));
    drain(&mut core);
    let t1 = now + ms(30);
    attempt(&mut core, t1, a);
    core.handle_acquire_reply(t1, a, acquired(1));
    granted(&mut core, t1, a);

    let t2 = t1 + RESUBSCRIBE_AFTER - ms(1);
    let b = busy_head(&mut core, t2, "k", 2, 5_000);
    assert!(drain(&mut core).is_empty());
    assert_eq!(wait_until(&mut core, t2, b), Some(t2 + POLL));
    assert_eq!(core.poll_subscriber(t2), SubscriberStep::Stop);
}

#[test]
fn after_the_subscriber_lost_its_connection_heads_poll_faster_and_retry_when_it_is_back() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    core.handle_subscribed();
    drain(&mut core);
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, busy(5_000));
    assert_eq!(wait_until(&mut core, now, a), Some(now + NOTIFY));

    let t = now + ms(10);
    core.handle_subscriber_lost(t);
    assert!(!core.is_subscribed());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));
    assert_eq!(
        core.poll_subscriber(t),
        SubscriberStep::Listen(None),
        "reconnecting"
    );

    let t = t + POLL;
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy(5_000));
    assert!(drain(&mut core).is_empty(), "reconnecting, not a new start");
    assert_eq!(wait_until(&mut core, t, a), Some(t + POLL));

    core.handle_subscribed();
    assert!(core.is_subscribed());
    assert_eq!(
        drain(&mut core),
        vec![CoreEvent::Wake(a)],
        "every head retries"
    );
    attempt(&mut core, t, a);
}

#[test]
fn a_stopped_subscriber_makes_heads_retry_at_once_and_the_next_busy_reply_starts_it_again() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    core.handle_subscribed();
    drain(&mut core);
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, busy(5_000));
    assert_eq!(wait_until(&mut core, now, a), Some(now + NOTIFY));

    let t = now + ms(10);
    core.handle_subscriber_stopped();
    assert!(!core.is_subscribed());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    assert_eq!(core.poll_subscriber(t), SubscriberStep::Stop);

    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, busy(5_000));
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);
    assert_eq!(core.poll_subscriber(t), SubscriberStep::Listen(None));
}

#[test]
fn a_stopped_subscriber_does_not_undo_an_unavailable_subscription() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    assert!(core.handle_subscription_failed(now));
    core.handle_subscriber_stopped();
    assert!(!core.handle_subscription_failed(now), "still unavailable");
    drain(&mut core);
    attempt(&mut core, now + POLL, a);
    core.handle_acquire_reply(now + POLL, a, busy(5_000));
    assert!(drain(&mut core).is_empty(), "no restart while unavailable");
}

// ----- shutdown -------------------------------------------------------------------

#[test]
fn shutdown_ends_every_wait_and_refuses_new_acquires() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, secs(60));
    let c = join(&mut core, now, "other", 3, secs(60));
    attempt(&mut core, now, c);
    drain(&mut core);

    core.begin_shutdown();
    assert!(core.is_shutting_down());
    let woken: BTreeSet<WaiterId> = drain(&mut core)
        .into_iter()
        .map(|e| match e {
            CoreEvent::Wake(id) => id,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(woken, BTreeSet::from([a, b, c]));
    assert!(matches!(failed(&mut core, now, a), Error::ShuttingDown));
    assert!(matches!(failed(&mut core, now, b), Error::ShuttingDown));
    assert_eq!(
        wait_until(&mut core, now, c),
        None,
        "its reply is still due"
    );
    for wait in [secs(5), Duration::ZERO] {
        let e = core
            .acquire(now, "new", token(4), waiting(wait))
            .unwrap_err();
        assert!(matches!(e, Error::ShuttingDown), "{e:?}");
    }
    assert_eq!(core.poll_subscriber(now), SubscriberStep::Stop);

    drain(&mut core);
    core.handle_acquire_reply(now, c, busy(5_000));
    assert!(drain(&mut core).is_empty(), "no subscriber during shutdown");
    assert!(matches!(failed(&mut core, now, c), Error::ShuttingDown));
    assert_eq!(core.counts(), CoreCounts::default());
}

#[test]
fn an_attempt_that_acquires_after_shutdown_is_released_at_cleanup() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.begin_shutdown();
    drain(&mut core);
    assert_eq!(core.attempts_in_flight(), 1);
    core.handle_acquire_reply(now, a, acquired(8));
    assert!(matches!(failed(&mut core, now, a), Error::ShuttingDown));
    assert_eq!(core.counts().orphans, 1);
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
}

#[test]
fn a_grant_taken_before_shutdown_is_still_the_callers() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(8));
    core.begin_shutdown();
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    let grant = granted(&mut core, now, a);
    assert_eq!(grant.fence, Fence::new(8));
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 1, "shutdown releases it");
    assert!(releases(&calls[0], token(1)));
}

#[test]
fn a_grant_its_waiter_had_not_taken_when_cleanup_ran_ends_with_shutting_down() {
    // A front end handles the reply and polls the waiter in two separate
    // calls; shutdown's cleanup can run in between.
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(5));
    core.begin_shutdown();
    drain(&mut core);
    assert_eq!(core.attempts_in_flight(), 0);
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
    let e = failed(&mut core, now, a);
    assert!(
        matches!(e, Error::ShuttingDown),
        "a lease already released by the cleanup is never handed out: {e:?}"
    );
    assert_eq!(core.counts(), CoreCounts::default());
    assert!(core.take_cleanup().is_empty(), "released exactly once");
}

#[test]
fn cleanup_releases_every_tracked_lease_once_and_forgets_them() {
    let now = t0();
    let mut core = core_at(now);
    let leases: Vec<LeaseId> = ["a", "b", "c"]
        .iter()
        .zip(1u8..)
        .map(|(key, i)| grant_now(&mut core, now, key, i, u64::from(i)).lease)
        .collect();
    let d = join(&mut core, now, "d", 4, secs(5));
    attempt(&mut core, now, d);
    core.handle_acquire_reply(now, d, timed_out());
    failed(&mut core, now, d);
    assert_eq!(core.counts().tracked_leases, 3);
    assert_eq!(core.counts().orphans, 1);

    core.begin_shutdown();
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 4);
    for i in 1..=4 {
        assert_eq!(
            calls.iter().filter(|c| releases(c, token(i))).count(),
            1,
            "token {i}"
        );
    }
    assert_eq!(core.counts(), CoreCounts::default());
    for lease in leases {
        assert!(matches!(core.release_call(lease), Err(Error::ShuttingDown)));
        assert!(matches!(
            core.renew_call(lease, LEASE_MS),
            Err(Error::ShuttingDown)
        ));
    }
    assert!(core.take_cleanup().is_empty());
}

// ----- release and renew --------------------------------------------------------

#[test]
fn an_abandoned_lease_is_released_with_the_orphans() {
    let now = t0();
    let mut core = core_at(now);
    let grant = grant_now(&mut core, now, "k", 1, 1);
    let kept = grant_now(&mut core, now, "other", 2, 2);
    core.abandon_lease(grant.lease);
    assert_eq!(core.counts().tracked_leases, 1);
    assert_eq!(core.counts().orphans, 1);
    core.abandon_lease(grant.lease); // a second time is harmless
    assert_eq!(core.counts().orphans, 1);
    assert!(core.release_call(grant.lease).is_err());
    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
    assert!(core.release_call(kept.lease).is_ok());
}

#[test]
fn release_replies_settle_the_lease_or_keep_it_tracked() {
    let now = t0();
    let mut core = core_at(now);
    for (reply, expected) in [
        (1, ReleaseOutcome::Released),
        (0, ReleaseOutcome::Expired),
        (2, ReleaseOutcome::Conflict),
    ] {
        let grant = grant_now(&mut core, now, "k", 1, 1);
        let call = core.release_call(grant.lease).unwrap();
        assert!(releases(&call, token(1)));
        let text = packed(&call);
        assert!(text.contains("PUBLISH") && text.contains("ns:lock-released"));
        assert!(
            text.contains(&KeyId::of("k").to_hex()),
            "the message is the sha"
        );
        let outcome = core.handle_release_reply(grant.lease, ok(Value::Int(reply)));
        assert_eq!(outcome.unwrap(), expected);
        assert_eq!(core.counts().tracked_leases, 0);
    }

    let grant = grant_now(&mut core, now, "k", 1, 1);
    for (reply, code) in [
        (timed_out(), "OUTCOME_UNKNOWN"),
        (server_error(), "PROVIDER_FAILED"),
        (ok(Value::Int(7)), "OUTCOME_UNKNOWN"),
    ] {
        let e = core.handle_release_reply(grant.lease, reply).unwrap_err();
        assert_eq!(e.code(), code);
        assert_eq!(core.counts().tracked_leases, 1, "kept for the cleanup");
        assert!(core.release_call(grant.lease).is_ok());
    }
    let outcome = core.handle_release_reply(grant.lease, ok(Value::Int(1)));
    assert_eq!(outcome.unwrap(), ReleaseOutcome::Released);
    assert_eq!(core.counts().tracked_leases, 0);
}

#[test]
fn renew_replies_map_to_renew_results_and_keep_the_lease_tracked() {
    let now = t0();
    let mut core = core_at(now);
    let grant = grant_now(&mut core, now, "k", 1, 1);
    let call = core.renew_call(grant.lease, 4_321).unwrap();
    assert_eq!(call.kind, ScriptKind::Renew);
    assert!(packed(&call).contains("4321"));
    assert!(packed(&call).contains(&token(1).to_hex()));

    let (result, outcome) = core.handle_renew_reply(grant.lease, ok(Value::Int(1)));
    assert_eq!(result, RenewResult::Outcome(RenewOutcome::Renewed));
    assert_eq!(outcome.unwrap(), RenewOutcome::Renewed);

    let (result, outcome) = core.handle_renew_reply(grant.lease, server_error());
    assert_eq!(result, RenewResult::NotApplied);
    assert_eq!(outcome.unwrap_err().code(), "PROVIDER_FAILED");

    for reply in [timed_out(), ok(Value::Okay)] {
        let (result, outcome) = core.handle_renew_reply(grant.lease, reply);
        assert_eq!(result, RenewResult::Unknown);
        assert_eq!(outcome.unwrap_err().code(), "OUTCOME_UNKNOWN");
    }
    assert_eq!(core.counts().tracked_leases, 1);

    for (reply, expected) in [(0, RenewOutcome::Expired), (2, RenewOutcome::Conflict)] {
        let grant = grant_now(&mut core, now, "other", 2, 2);
        let (result, outcome) = core.handle_renew_reply(grant.lease, ok(Value::Int(reply)));
        assert_eq!(result, RenewResult::Outcome(expected));
        assert_eq!(outcome.unwrap(), expected);
        // Still tracked, so that its release can report what it finds.
        let call = core.release_call(grant.lease).unwrap();
        assert!(releases(&call, token(2)));
        let released = core.handle_release_reply(grant.lease, ok(Value::Int(reply)));
        assert!(released.is_ok());
    }
    assert_eq!(core.counts().tracked_leases, 1);
}

// ----- random operation sequences against a reference model ---------------------

mod sequences {
    //! Random operation sequences over three keys, driven the way a front
    //! end drives the core and checked after every step against a small
    //! reference model. The model lives in `crate::fuzzing` (shared with
    //! the `line` fuzz target and its corpus replay); this drives it with
    //! proptest's inputs and shrinking.

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn random_operation_sequences_keep_every_line_fifo_and_lose_no_waiter(
            data in proptest::collection::vec(any::<u8>(), 0..2048)
        ) {
            crate::fuzzing::check_line(&data);
        }
    }
}

#[test]
fn only_retries_at_the_retry_instant_count_as_safety_polls() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    let t = now + POLL;
    attempt(&mut core, t, a);
    assert_eq!(core.counts().safety_polls, 1, "the retry instant came");
    core.handle_acquire_reply(t, a, busy(5_000));
    core.handle_notification(KeyId::of("k").to_hex().as_bytes());
    drain(&mut core);
    attempt(&mut core, t, a);
    assert_eq!(
        core.counts().safety_polls,
        1,
        "a notification is not a poll"
    );
}
