//! Observed elections: the subscription is wanted while an observer lives,
//! and notifications and resubscriptions move the name's change count.

use super::*;

fn notice(id: KeyId, what: &str) -> Vec<u8> {
    format!("e:{}:7-1:{what}", id.to_hex()).into_bytes()
}

#[test]
fn an_observer_starts_the_subscriber_at_once_and_it_lingers_after_the_last_observer() {
    let now = t0();
    let mut core = core_at(now);
    let id = KeyId::of("scheduler");
    core.handle_observer_started(now, id);
    assert_eq!(drain(&mut core), vec![CoreEvent::StartSubscriber]);
    core.handle_observer_started(now, id);
    assert!(drain(&mut core).is_empty(), "one subscriber");
    core.handle_subscribed();
    assert_eq!(core.poll_subscriber(now), SubscriberStep::Listen(None));

    core.handle_observer_stopped(now, id);
    assert_eq!(core.poll_subscriber(now), SubscriberStep::Listen(None));
    let t1 = now + ms(10);
    core.handle_observer_stopped(t1, id);
    assert_eq!(
        core.poll_subscriber(t1),
        SubscriberStep::Listen(Some(t1 + secs(1)))
    );
    assert_eq!(core.poll_subscriber(t1 + secs(1)), SubscriberStep::Stop);
}

#[test]
fn a_waiter_leaving_keeps_the_subscription_while_an_observer_lives() {
    let now = t0();
    let mut core = core_at(now);
    core.handle_observer_started(now, KeyId::of("scheduler"));
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    drain(&mut core);
    core.handle_subscribed();
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(1));
    granted(&mut core, now, a);
    assert_eq!(
        core.poll_subscriber(now + secs(5)),
        SubscriberStep::Listen(None)
    );
}

#[test]
fn every_notification_of_an_observed_election_and_every_resubscription_moves_its_count() {
    let now = t0();
    let mut core = core_at(now);
    let (id, other) = (KeyId::of("scheduler"), KeyId::of("other"));
    core.handle_observer_started(now, id);
    assert_eq!(core.observed_changes(id), 0);
    for (what, count) in [("l", 1), ("v", 2), ("r", 3)] {
        assert!(core.handle_notice(now, &notice(id, what)));
        assert_eq!(core.observed_changes(id), count, "{what}");
    }
    // Another election's, a lock's release, a malformed one: not ours.
    core.handle_notice(now, &notice(other, "l"));
    core.handle_notice(now, id.to_hex().as_bytes());
    core.handle_notice(now, format!("e:{}:7-1:l:x", id.to_hex()).as_bytes());
    assert_eq!(core.observed_changes(id), 3);
    assert_eq!(core.observed_changes(other), 0, "nobody observes it");
    // Back after a loss: a change may have gone unseen.
    core.handle_subscriber_lost(now);
    core.handle_subscribed();
    assert_eq!(core.observed_changes(id), 4);
}

#[test]
fn an_observed_election_keeps_its_cluster_channel_and_reads_when_it_is_confirmed_or_lost() {
    let now = t0();
    let mut core = sharded_core_at(now, 100);
    let id = KeyId::of("scheduler");
    core.handle_observer_started(now, id);
    assert_eq!(core.wanted_keys(now), vec![id]);
    assert!(!core.hears_grants(id));
    core.handle_channel_subscribed(id);
    assert_eq!(core.observed_changes(id), 1);
    core.handle_channel_lost(id);
    assert_eq!(core.observed_changes(id), 2);
    core.handle_channel_subscribed(id);
    core.handle_observer_stopped(now, id);
    assert_eq!(core.wanted_keys(now + ms(999)), vec![id], "lingers");
    assert!(core.wanted_keys(now + secs(1)).is_empty());
    assert_eq!(core.subscription.tracked_keys(), 0);
}
