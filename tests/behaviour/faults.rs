//! Faults: flushed scripts, killed connections, a paused or restarted
//! server, server error replies, a closed port. Only the operation in
//! flight may fail; nothing is stranded; the outcome class is right.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use redlease::{Error, Operation, ReleaseOutcome, RenewOutcome};

use super::common::{
    config, connect, exists, granted, leased, lock_name, namespace, no_wait, refused, spawn,
    wait_for_stats, BOUND,
};
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// A loopback port nothing listens on (bound to port 0, then closed).
pub(crate) fn closed_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// The redis error behind `e`, reached through `source()`.
fn redis_source(e: &Error) -> &redis::RedisError {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<redis::RedisError>())
        .unwrap_or_else(|| panic!("{} keeps the redis error as its source: {e:?}", e.code()))
}

/// After `SCRIPT FLUSH`, acquire, renew and release load their script again
/// and succeed.
pub(crate) fn flushed_scripts_are_loaded_again<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("noscript");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire("k"), "first acquire");
    let first = F::fence(&lease);
    let reloads = locker.stats().noscript_reloads;

    server.script_flush();
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    server.script_flush();
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    server.script_flush();
    let lease = granted(locker.acquire("k"), "acquire after a flush");
    assert!(F::fence(&lease) > first);
    F::release(lease).unwrap();

    let after = locker.stats().noscript_reloads;
    assert!(
        after >= reloads + 3,
        "one reload per flushed script: {reloads} -> {after}"
    );
}

/// Killing the lockers' command connections (`CLIENT KILL TYPE normal`)
/// while threads wait strands nobody: after the holder lets go, every
/// waiter ends within a bound, with the lock or with an error.
pub(crate) fn killed_command_connections_strand_no_waiter<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("kill-normal");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(15)),
    ));
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(2))),
        "holder",
    );
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let w = waiters.clone();
            spawn(&format!("waiter-{i}"), move || {
                w.acquire("k")
                    .map(|lease| F::release(lease).map_err(|e| e.code()))
            })
        })
        .collect();
    wait_for_stats(&*waiters, "three waiters, subscribed", |s| {
        s.waiters == 3 && s.subscribed
    });

    let killed = server.client_kill_type("normal");
    assert!(
        killed >= 2,
        "both lockers had a command connection: {killed}"
    );
    // The holder's release may fail on its killed connection; its lease
    // then ends by TTL.
    let _ = F::release(held);

    let mut codes = Vec::new();
    for t in threads {
        match t.join_within(Duration::from_secs(20)) {
            Ok(released) => codes.push(format!("lease, release {released:?}")),
            Err(e) => codes.push(e.code().to_owned()),
        }
    }
    assert_eq!(codes.len(), 3);
    assert_eq!(waiters.stats().waiters, 0, "nobody left waiting: {codes:?}");
    let lease = granted(waiters.acquire("k"), "the locker works afterwards");
    F::release(lease).unwrap();
}

/// After its subscriber connection is killed (`CLIENT KILL TYPE pubsub`),
/// a locker subscribes again and its waiters are still handed the lock by
/// release notifications (safety polls are 30 s, far beyond the bound).
pub(crate) fn waiters_are_still_notified_after_the_subscriber_connection_is_killed<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("kill-pubsub");
    let slow = Duration::from_secs(30);
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .poll_interval(slow)
            .notify_poll_interval(slow)
            .wait(Duration::from_secs(25)),
    ));
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(60))),
        "holder",
    );
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let w = waiters.clone();
            let t = spawn(&format!("waiter-{i}"), move || {
                F::release(granted(w.acquire("k"), "waiter")).unwrap()
            });
            wait_for_stats(&*waiters, "waiter queued", |s| s.waiters == i + 1);
            t
        })
        .collect();
    wait_for_stats(&*waiters, "subscribed, head in its long backoff", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    let busy = waiters.stats().busy_replies;
    assert_eq!(
        server.client_kill_type("pubsub"),
        1,
        "one subscriber connection"
    );
    // A new subscriber connection, confirmed (the head checks once more).
    wait_until(BOUND, "the locker subscribed again", || {
        server.client_list().iter().any(|c| c.contains(" sub=1 "))
            && waiters.stats().subscribed
            && waiters.stats().busy_replies > busy
    });
    let notified = waiters.stats().notifications;

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    for t in threads {
        assert_eq!(t.join_within(BOUND), ReleaseOutcome::Released);
    }
    assert!(waiters.stats().notifications > notified);
}

/// A command connection killed while idle (nothing in flight) is
/// re-established for the next operation, which succeeds.
pub(crate) fn a_command_connection_killed_while_idle_does_not_fail_the_next_operation<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("kill-idle");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire("k"), "warm-up acquire");
    F::release(lease).unwrap();

    let killed = || {
        assert!(server.client_kill_type("normal") >= 1);
        // A request racing the close is in flight when the connection drops
        // (outcome unknown); one sent after the locker noticed must work.
        if F::NOTICES_IDLE_CLOSE {
            wait_until(BOUND, "the locker noticed the close", || {
                !locker.stats().connected
            });
        }
    };
    killed();
    let lease = granted(
        locker.acquire_with("k", no_wait()),
        "acquire after the kill",
    );
    killed();
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    killed();
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// After the server restarted (all data lost, connections dropped), the
/// next acquire works and its fence is still larger.
pub(crate) fn a_locker_keeps_working_after_the_server_restarts<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("restart");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire("k"), "before the restart");
    let before = F::fence(&lease);
    F::release(lease).unwrap();

    server.restart();
    let lease = granted(locker.acquire_with("k", no_wait()), "after the restart");
    assert!(F::fence(&lease) > before, "seeded again from TIME");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// An acquire against a paused server times out with `OUTCOME_UNKNOWN`
/// (keeping the redis error as its source); the script it sent runs after
/// the resume, and its token is released at the locker's next operation.
pub(crate) fn an_acquire_on_a_paused_server_is_outcome_unknown_and_its_token_is_released_later<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("paused");
    let locker: F = connect(
        &server,
        config(&ns).command_timeout(Duration::from_millis(200)),
    );
    // A pooled connection and a cached script, so the acquire is sent.
    F::release(granted(locker.acquire("warm"), "warm-up")).unwrap();

    let e = {
        let _paused = server.pause_guard();
        refused(
            locker.acquire_with("k", no_wait()),
            "acquire on a paused server",
        )
    };
    assert_eq!(e.code(), "OUTCOME_UNKNOWN");
    assert!(e.is_outcome_unknown());
    assert!(
        matches!(
            e,
            Error::OutcomeUnknown {
                op: Operation::Acquire,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(redis_source(&e).is_timeout(), "{e:?}");

    // Redis runs the buffered script on resume, before it answers a
    // connection opened afterwards: the unknown acquire did take the lock.
    let lock = lock_name(&ns, "k");
    assert!(exists(&server, &lock), "the timed-out acquire was applied");

    // The next operation of the locker releases the orphaned token first.
    F::release(granted(locker.acquire("other"), "next operation")).unwrap();
    assert!(!exists(&server, &lock), "the orphan was released by token");
    let fresh: F = connect(&server, config(&ns));
    F::release(granted(
        fresh.acquire_with("k", no_wait()),
        "the key is free",
    ))
    .unwrap();
}

/// An acquire whose script fails inside Redis (the lock name holds a hash:
/// `WRONGTYPE`) reports `PROVIDER_FAILED`: certainly not applied.
pub(crate) fn an_acquire_rejected_by_redis_is_provider_failed<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("wrongtype");
    let locker: F = connect(&server, config(&ns));
    let lock = lock_name(&ns, "k");
    server.query(redis::cmd("HSET").arg(&lock).arg("field").arg("value"));

    let e = refused(locker.acquire_with("k", no_wait()), "acquire on a hash");
    assert_eq!(e.code(), "PROVIDER_FAILED");
    assert!(!e.is_outcome_unknown());
    assert!(
        matches!(
            e,
            Error::ProviderFailed {
                op: Operation::Acquire,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(redis_source(&e).code(), Some("WRONGTYPE"), "{e:?}");
    let kind: String = redis::cmd("TYPE")
        .arg(&lock)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(kind, "hash", "nothing was changed");

    F::release(granted(locker.acquire("other"), "another key works")).unwrap();
}

/// Connecting to a closed port reports `PROVIDER_FAILED` (nothing sent).
pub(crate) fn connecting_to_a_closed_port_is_provider_failed<F: Front>() {
    let port = closed_port();
    let result = F::connect(
        &format!("redis://127.0.0.1:{port}/0"),
        config(&namespace("closed")),
    );
    let e = refused(result, "connect to a closed port");
    assert_eq!(e.code(), "PROVIDER_FAILED");
    assert!(
        matches!(
            e,
            Error::ProviderFailed {
                op: Operation::Connect,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(redis_source(&e).is_connection_refusal(), "{e:?}");
}
