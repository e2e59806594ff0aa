//! Failed attempts: unknown outcomes, server errors, unexpected replies.

use super::*;

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
