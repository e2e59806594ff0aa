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
