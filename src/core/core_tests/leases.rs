//! Tracked leases: release and renew replies, abandoned leases.

use super::*;

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

#[test]
fn an_abandoned_lease_wakes_the_head_waiting_for_its_key_to_release_it() {
    // Bug: a dropped async lease stalled a waiter of the same locker until
    // the TTL, because orphans were released only at the next call.
    let now = t0();
    let mut core = core_at(now);
    let grant = grant_now(&mut core, now, "k", 1, 1);
    let b = busy_head(&mut core, now, "k", 2, 10_000);
    drain(&mut core);
    core.abandon_lease(grant.lease);
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(b)]);
    let sweep = core.take_sweep();
    assert_eq!(sweep.calls.len(), 1);
    assert!(releases(&sweep.calls[0], token(1)));
}

#[test]
fn an_abandoned_read_or_write_lease_wakes_the_other_modes_head_of_its_key() {
    // Bug: a dropped async reader stalled a writer of the same locker
    // waiting for that key until a safety poll (and a dropped writer its
    // readers): only the head of the abandoned lease's own line was woken.
    for (held, waits) in [(Want::Read, Want::Write), (Want::Write, Want::Read)] {
        let now = t0();
        let mut core = core_at(now);
        let holder = core
            .acquire_for(now, "k", held, token(1), waiting(secs(5)))
            .unwrap();
        attempt(&mut core, now, holder);
        core.handle_acquire_reply(now, holder, acquired(7));
        let grant = granted(&mut core, now, holder);
        let waiter = core
            .acquire_for(now, "k", waits, token(2), waiting(secs(60)))
            .unwrap();
        attempt(&mut core, now, waiter);
        core.handle_acquire_reply(now, waiter, busy(10_000));
        assert!(wait_until(&mut core, now, waiter).is_some(), "backing off");
        drain(&mut core);

        core.abandon_lease(grant.lease);
        assert_eq!(
            drain(&mut core),
            vec![CoreEvent::Wake(waiter)],
            "{held:?} dropped, {waits:?} waits"
        );
        let sweep = core.take_sweep();
        assert_eq!(sweep.calls.len(), 1);
        assert!(packed(&sweep.calls[0]).contains(&token(1).to_hex()));
    }
}
