//! Failed attempts: unknown outcomes, server errors, unexpected replies;
//! a try-once acquire returns the first failure, a waiting one keeps its
//! place and tries again (the crate docs' "How it works": waiting survives faults).

use super::*;

const TRY_ONCE: Duration = Duration::ZERO;

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
        core.handle_acquire_reply(now + ms(100), a, timed_out()),
        AttemptSummary::Retrying
    );
    let b = join(&mut core, now, "other", 2, TRY_ONCE);
    attempt(&mut core, now, b);
    assert_eq!(
        core.handle_acquire_reply(now, b, timed_out()),
        AttemptSummary::Failed
    );
    failed(&mut core, now, b);
    let c = join(&mut core, now, "third", 3, secs(5));
    attempt(&mut core, now, c);
    assert_eq!(
        core.handle_acquire_reply(now, c, acquired(2)),
        AttemptSummary::Acquired
    );
    assert_eq!(
        core.handle_acquire_reply(now, c, acquired(3)),
        AttemptSummary::Ignored,
        "answered exactly once"
    );
    granted(&mut core, now, c);
    assert_eq!(
        core.handle_acquire_reply(now, c, acquired(4)),
        AttemptSummary::Ignored,
        "a finished waiter"
    );
}

#[test]
fn a_try_once_acquire_with_unknown_outcome_fails_at_once_and_orphans_its_token() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, TRY_ONCE);
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
fn a_try_once_server_error_reply_is_provider_failed_and_leaves_no_orphan() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, TRY_ONCE);
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
fn a_try_once_acquire_that_was_never_sent_is_provider_failed_and_leaves_no_orphan() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, TRY_ONCE);
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
fn a_try_once_unexpected_reply_shape_is_outcome_unknown_and_orphans_its_token() {
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
        let a = join(&mut core, now, "k", i as u8, TRY_ONCE);
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

#[test]
fn a_waiter_whose_attempt_was_not_applied_keeps_its_place_and_retries_with_backoff() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let b = join(&mut core, now, "k", 2, secs(5));
    let mut t = now;
    for pause in FAILURE_BACKOFF.iter().chain([&FAILURE_BACKOFF[3]]) {
        attempt(&mut core, t, a);
        assert_eq!(
            core.handle_acquire_reply(t, a, server_error()),
            AttemptSummary::Retrying
        );
        assert!(drain(&mut core).is_empty(), "nobody else moves up");
        assert_eq!(wait_until(&mut core, t, a), Some(t + *pause));
        assert_eq!(
            wait_until(&mut core, t, b),
            Some(now + secs(5)),
            "still behind"
        );
        t += *pause;
    }
    assert_eq!(core.counts().orphans, 0, "nothing was applied");
    attempt(&mut core, t, a);
    core.handle_acquire_reply(t, a, acquired(7));
    assert_eq!(granted(&mut core, t, a).fence.get(), 7);
}

#[test]
fn a_waiter_resends_an_unknown_attempt_with_the_same_token_and_orphans_nothing_once_settled() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    let first = attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, timed_out());
    let again = attempt(&mut core, now + ms(10), a);
    assert!(
        releases_same_token(&first, &again),
        "the replay-safe script answers a re-sent acquire with the same fence"
    );
    core.handle_acquire_reply(now + ms(10), a, busy(3_000));
    // A settled busy reply for our token: the unknown attempt granted
    // nothing (or its grant is gone), so nothing is orphaned.
    attempt(&mut core, now + ms(260), a);
    core.handle_acquire_reply(now + ms(260), a, acquired(9));
    assert_eq!(granted(&mut core, now + ms(260), a).fence.get(), 9);
    assert_eq!(core.counts().orphans, 0);
}

#[test]
fn a_wait_that_ends_on_a_failure_returns_the_failure_and_orphans_an_unknown_token() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, ms(100));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, timed_out());
    let e = failed(&mut core, now + ms(100), a);
    assert_eq!(
        e.code(),
        "OUTCOME_UNKNOWN",
        "the last failure, not WAIT_TIMEOUT"
    );
    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));

    let b = join(&mut core, now, "k2", 2, ms(100));
    attempt(&mut core, now, b);
    core.handle_acquire_reply(now, b, server_error());
    let e = failed(&mut core, now + ms(100), b);
    assert_eq!(e.code(), "PROVIDER_FAILED");
    assert!(core.take_orphans().is_empty());
}

#[test]
fn a_failure_after_the_deadline_ends_the_wait_at_once() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, ms(50));
    attempt(&mut core, now, a);
    assert_eq!(
        core.handle_acquire_reply(now + ms(60), a, server_error()),
        AttemptSummary::Failed
    );
    assert_eq!(failed(&mut core, now + ms(60), a).code(), "PROVIDER_FAILED");
}

/// Whether two acquire calls carry the same owner token.
fn releases_same_token(a: &ScriptCall, b: &ScriptCall) -> bool {
    a.evalsha().get_packed_command() == b.evalsha().get_packed_command()
}
