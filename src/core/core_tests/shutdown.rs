//! Shutdown and its cleanup.

use super::*;

#[test]
fn shutdown_ends_every_wait_and_refuses_new_acquires() {
    let now = t0();
    let mut core = core_at(now);
    let a = busy_head(&mut core, now, "k", 1, 5_000);
    let b = join(&mut core, now, "k", 2, secs(60));
    let c = join(&mut core, now, "other", 3, secs(60));
    attempt(&mut core, now, c);
    drain(&mut core);

    core.begin_shutdown();
    assert!(core.is_shutting_down());
    let woken: BTreeSet<WaiterId> = drain(&mut core)
        .into_iter()
        .map(|e| match e {
            CoreEvent::Wake(id) => id,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(woken, BTreeSet::from([a, b, c]));
    assert!(matches!(failed(&mut core, now, a), Error::ShuttingDown));
    assert!(matches!(failed(&mut core, now, b), Error::ShuttingDown));
    assert_eq!(
        wait_until(&mut core, now, c),
        None,
        "its reply is still due"
    );
    for wait in [secs(5), Duration::ZERO] {
        let e = core
            .acquire(now, "new", token(4), waiting(wait))
            .unwrap_err();
        assert!(matches!(e, Error::ShuttingDown), "{e:?}");
    }
    assert_eq!(core.poll_subscriber(now), SubscriberStep::Stop);

    drain(&mut core);
    core.handle_acquire_reply(now, c, busy(5_000));
    assert!(drain(&mut core).is_empty(), "no subscriber during shutdown");
    assert!(matches!(failed(&mut core, now, c), Error::ShuttingDown));
    assert_eq!(core.counts(), CoreCounts::default());
}

#[test]
fn an_attempt_that_acquires_after_shutdown_is_released_at_cleanup() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.begin_shutdown();
    drain(&mut core);
    assert_eq!(core.attempts_in_flight(), 1);
    core.handle_acquire_reply(now, a, acquired(8));
    assert!(matches!(failed(&mut core, now, a), Error::ShuttingDown));
    assert_eq!(core.counts().orphans, 1);
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
}

#[test]
fn a_grant_taken_before_shutdown_is_still_the_callers() {
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(8));
    core.begin_shutdown();
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(a)]);
    let grant = granted(&mut core, now, a);
    assert_eq!(grant.fence, Fence::new(8));
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 1, "shutdown releases it");
    assert!(releases(&calls[0], token(1)));
}

#[test]
fn a_grant_its_waiter_had_not_taken_when_cleanup_ran_ends_with_shutting_down() {
    // A front end handles the reply and polls the waiter in two separate
    // calls; shutdown's cleanup can run in between.
    let now = t0();
    let mut core = core_at(now);
    let a = join(&mut core, now, "k", 1, secs(5));
    attempt(&mut core, now, a);
    core.handle_acquire_reply(now, a, acquired(5));
    core.begin_shutdown();
    drain(&mut core);
    assert_eq!(core.attempts_in_flight(), 0);
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(1)));
    let e = failed(&mut core, now, a);
    assert!(
        matches!(e, Error::ShuttingDown),
        "a lease already released by the cleanup is never handed out: {e:?}"
    );
    assert_eq!(core.counts(), CoreCounts::default());
    assert!(core.take_cleanup().is_empty(), "released exactly once");
}

#[test]
fn cleanup_releases_every_tracked_lease_once_and_forgets_them() {
    let now = t0();
    let mut core = core_at(now);
    let leases: Vec<LeaseId> = ["a", "b", "c"]
        .iter()
        .zip(1u8..)
        .map(|(key, i)| grant_now(&mut core, now, key, i, u64::from(i)).lease)
        .collect();
    let d = join(&mut core, now, "d", 4, Duration::ZERO);
    attempt(&mut core, now, d);
    core.handle_acquire_reply(now, d, timed_out());
    failed(&mut core, now, d);
    assert_eq!(core.counts().tracked_leases, 3);
    assert_eq!(core.counts().orphans, 1);

    core.begin_shutdown();
    let calls = core.take_cleanup();
    assert_eq!(calls.len(), 4);
    for i in 1..=4 {
        assert_eq!(
            calls.iter().filter(|c| releases(c, token(i))).count(),
            1,
            "token {i}"
        );
    }
    assert_eq!(core.counts(), CoreCounts::default());
    for lease in leases {
        assert!(matches!(core.release_call(lease), Err(Error::ShuttingDown)));
        assert!(matches!(
            core.renew_call(lease, LEASE_MS),
            Err(Error::ShuttingDown)
        ));
    }
    assert!(core.take_cleanup().is_empty());
}
