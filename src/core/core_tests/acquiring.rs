//! Acquiring a free key, the FIFO line's single head, and the limits
//! (`max_waiters`, `max_tracked_leases`).

use super::*;

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
    assert_eq!(grant.clock.lock().remaining(replied), LEASE - ms(400));
    assert!(grant.clock.lock().is_valid(submitted + LEASE - ms(1)));
    assert!(!grant.clock.lock().is_valid(submitted + LEASE));

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
            // The first waiter to wait behind the locker's own grant starts
            // the subscriber (the crate docs' "How it works": it really waits).
            let expected = match n {
                0 => vec![CoreEvent::Wake(next), CoreEvent::StartSubscriber],
                _ => vec![CoreEvent::Wake(next)],
            };
            assert_eq!(events, expected);
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
    assert_eq!(
        drain(&mut core),
        vec![CoreEvent::Wake(b), CoreEvent::StartSubscriber],
        "b really waits now, behind its own locker's grant: the locker subscribes"
    );
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
    assert_eq!(e.code(), "TOO_MANY_LEASES");
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
