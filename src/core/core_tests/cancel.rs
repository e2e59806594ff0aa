//! Cancelling and abandoning waiters.

use super::*;

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
    assert_eq!(
        drain(&mut core),
        vec![CoreEvent::Wake(b), CoreEvent::StartSubscriber]
    );
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
fn abandoning_during_an_attempt_orphans_the_token_and_the_next_head_waits_for_the_line_to_settle() {
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
    // One attempt per key at a time: the abandoned one may still be
    // answered until the command timeout (2 s in these settings).
    assert_eq!(wait_until(&mut core, now, b), Some(now + secs(2)));

    // the abandoned attempt's late reply changes nothing
    let before = core.counts();
    core.handle_acquire_reply(now, a, acquired(5));
    assert_eq!(core.counts(), before);
    assert!(drain(&mut core).is_empty());

    let sweep = core.take_sweep();
    assert_eq!(sweep.calls.len(), 1);
    assert!(releases(&sweep.calls[0], token(1)));
    // The release was answered on the same connection after the attempt:
    // the line is settled and the next head goes on at once.
    assert_eq!(sweep.keys(), vec![KeyId::of("k")]);
    core.handle_sweep_answered(sweep, |_| true);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    attempt(&mut core, now + ms(1), b);
}

#[test]
fn a_settling_line_goes_on_by_itself_once_the_abandoned_reply_can_no_longer_come() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(5));
    attempt(&mut core, now, a);
    core.abandon(now, a);
    drain(&mut core);
    assert_eq!(wait_until(&mut core, now + ms(10), b), Some(now + secs(2)));
    attempt(&mut core, now + secs(2), b);
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

#[test]
fn orphans_whose_release_got_no_answer_are_kept_for_the_next_sweep() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, Duration::ZERO);
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, timed_out());
    failed(&mut core, now, a);
    let sweep = core.take_sweep();
    assert_eq!(core.counts().orphans, 0);
    core.handle_sweep_answered(sweep, |_| false);
    assert_eq!(
        core.counts().orphans,
        1,
        "not forgotten while Redis is away"
    );
    let sweep = core.take_sweep();
    core.handle_sweep_answered(sweep, |_| true);
    assert_eq!(core.counts().orphans, 0);
}

#[test]
fn a_sweep_can_leave_some_orphans_for_later() {
    let now = t0();
    let mut core = core_at(now);
    for (key, n) in [("k", 1), ("j", 2)] {
        let w = join(&mut core, now, key, n, Duration::ZERO);
        attempt(&mut core, now, w);
        core.handle_acquire_reply(now, w, timed_out());
        failed(&mut core, now, w);
    }
    assert_eq!(core.counts().orphans, 2);
    let sweep = core.take_sweep_except(|call| releases(call, token(1)));
    assert_eq!(sweep.keys(), vec![KeyId::of("j")]);
    assert_eq!(sweep.first_orphan, 0);
    assert_eq!(core.counts().orphans, 1, "k's is left");
    core.handle_sweep_answered(sweep, |_| true);
    let sweep = core.take_sweep();
    assert_eq!(sweep.keys(), vec![KeyId::of("k")]);
    core.handle_sweep_answered(sweep, |_| true);
    assert_eq!(core.counts().orphans, 0);
}
