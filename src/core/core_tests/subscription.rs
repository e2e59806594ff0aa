//! The notification subscription: start, linger, failure, loss, stop.

use super::*;

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
fn uncontended_acquires_on_a_cluster_track_no_per_key_channel_state() {
    // Bug: `recently_idle` grew by one entry per key ever acquired while
    // nothing was subscribed (10 000 distinct keys left 10 000 entries).
    let now = t0();
    let mut core = sharded_core_at(now, 100_000);
    for i in 0..10_000u32 {
        let key = format!("k{i}");
        let id = core
            .acquire(now, &key, token((i % 250) as u8), waiting(secs(5)))
            .expect("admitted");
        attempt(&mut core, now, id);
        core.handle_acquire_reply(now, id, acquired(u64::from(i) + 1));
        let grant = granted(&mut core, now, id);
        core.handle_release_reply(grant.lease, ok(Value::Int(1)))
            .unwrap();
    }
    assert_eq!(core.subscription.tracked_keys(), 0);
    assert!(core.wanted_keys(now).is_empty());
}

#[test]
fn a_subscribed_key_lingers_for_a_second_after_its_line_empties_then_is_forgotten() {
    let now = t0();
    let mut core = sharded_core_at(now, 100);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    core.handle_channel_subscribed(KeyId::of("k"));
    drain(&mut core);
    core.cancel(a);
    drain(&mut core);
    core.poll_waiter(now, a);
    assert_eq!(core.wanted_keys(now + ms(999)), vec![KeyId::of("k")]);
    assert!(core.wanted_keys(now + secs(1)).is_empty());
    assert_eq!(core.subscription.tracked_keys(), 0);
}

#[test]
fn the_default_claim_window_is_four_connect_round_trips_and_at_least_100_ms() {
    let claim_after = |claim_window: Option<Duration>, took: Duration| {
        let mut s = settings(128, 10_000);
        s.handover_wanted = true;
        s.claim_window = claim_window;
        let mut core = Core::new(s.with_registration(RegId(1)), t0());
        core.handle_connected(took);
        core.settings.handover.map(|h| h.claim_ms)
    };
    assert_eq!(claim_after(None, ms(1)), Some(100), "a loopback connect");
    assert_eq!(claim_after(None, ms(60)), Some(240), "a distant server");
    assert_eq!(
        claim_after(None, secs(u64::MAX / 2)),
        Some(999_999_999_999_999)
    );
    assert_eq!(
        claim_after(Some(ms(30)), ms(60)),
        Some(30),
        "set by the config"
    );
}
