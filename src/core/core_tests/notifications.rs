//! Busy replies, the safety interval, and release notifications.

use super::*;

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
