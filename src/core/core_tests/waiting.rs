//! Wait zero (try once) and the wait's deadline.

use super::*;

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

#[test]
fn a_tiny_positive_wait_makes_at_least_one_attempt() {
    // Bug: a 1 µs wait could time out before asking Redis at all.
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, Duration::from_micros(1));
    attempt(&mut core, now + ms(5), a);
    core.handle_acquire_reply(now + ms(5), a, acquired(3));
    assert_eq!(granted(&mut core, now + ms(5), a).fence.get(), 3);

    let b = join(&mut core, now, "other", 2, Duration::from_micros(1));
    attempt(&mut core, now + ms(5), b);
    core.handle_acquire_reply(now + ms(5), b, busy(1_000));
    assert_eq!(failed(&mut core, now + ms(5), b).code(), "WAIT_TIMEOUT");
}

#[test]
fn a_busy_reply_timed_to_the_microsecond_is_retried_to_reach_redis_as_the_key_expires() {
    let now = t0();
    let us = Duration::from_micros;
    let mut core = core_at(now);
    let a = candidate(&mut core, now, "k", 1, secs(60));
    attempt(&mut core, now, a);
    // Answered 400 µs after it was sent: held 2 345 µs after Redis read it.
    let answered = now + us(400);
    core.handle_acquire_reply(answered, a, busy_for_us(2_345));
    drain(&mut core);
    // Sent at `sent + remaining` it would travel as the first did and reach
    // Redis as the key expires; half a round trip earlier for the timer's
    // late wake.
    let retry = now + us(2_345) - us(200);
    assert_eq!(wait_until(&mut core, answered, a), Some(retry));
    attempt(&mut core, retry, a);
    // Early after all: busy for less than a round trip, retried at once.
    let answered = retry + us(400);
    core.handle_acquire_reply(answered, a, busy_for_us(150));
    attempt(&mut core, answered, a);

    // A plain `PTTL` (whole milliseconds) is retried that long after the
    // reply, as before.
    let b = candidate(&mut core, now, "other", 2, secs(60));
    attempt(&mut core, now, b);
    core.handle_acquire_reply(answered, b, busy(2));
    drain(&mut core);
    assert_eq!(wait_until(&mut core, answered, b), Some(answered + ms(2)));
}

#[test]
fn a_busy_reply_timed_to_the_microsecond_still_retries_within_the_safety_interval() {
    let now = t0();
    let mut core = core_at(now);
    let a = candidate(&mut core, now, "k", 1, secs(3_600));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, busy_for_us(600_000_000));
    drain(&mut core);
    assert_eq!(
        wait_until(&mut core, now, a),
        Some(now + core.safety_interval())
    );
}

#[test]
fn only_a_campaign_reads_a_busy_reply_in_microseconds() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, Duration::ZERO);
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, busy_for_us(2_345));
    assert_eq!(failed(&mut core, now, a).code(), "OUTCOME_UNKNOWN");
}

/// A candidate of the election `name` (no value), waiting up to `wait`.
fn candidate(core: &mut Core, now: Instant, name: &str, i: u8, wait: Duration) -> WaiterId {
    core.acquire_for(now, name, Want::Leader, token(i), waiting(wait))
        .expect("the campaign is admitted")
}
