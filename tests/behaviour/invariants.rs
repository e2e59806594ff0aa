//! The protocol's invariants (docs/PROTOCOL.md) through the public API, in
//! the orders of faults that once broke them: a reply lost after Redis ran
//! the read, lockers killed while registered, a reader whose locker has
//! the hand-over off.
//!
//! A killed holder or registrant is written as what it leaves in Redis: a
//! lease key that lapses, a queue entry whose bound has passed.

use std::time::Duration;

use redis::Value;
use redlease::Error;

use super::common::{
    config, connect, exists, granted, key_sha, leased, lock_name, namespace, no_wait, polls_off,
    refused, server_time_ms, spawn, waiting, BOUND,
};
use super::front::Front;
use crate::support::proxy::ReplyHoldProxy;
use crate::support::{wait_until, RedisServer};

/// `<ns>:<kind>:{<sha>}`
fn name(ns: &str, kind: &str, key: &str) -> String {
    format!("{ns}:{kind}:{{{}}}", key_sha(key))
}

/// Appends the entry of a locker killed while registered: its bound has
/// passed, its registration key is gone, and the queue stays flagged.
fn dead_registration(server: &RedisServer, ns: &str, kind: &str, key: &str, reg: &str) {
    let deadline = server_time_ms(server) - 1;
    server.query(
        redis::cmd("RPUSH")
            .arg(name(ns, &format!("{kind}-queue"), key))
            .arg(format!("{reg}|{deadline}|{reg}-gone:2000")),
    );
    server.query(
        redis::cmd("SET")
            .arg(name(ns, &format!("{kind}-queued"), key))
            .arg("1"),
    );
}

/// A holder that is killed: its lease key stays until `ms` from now.
fn killed_holder(server: &RedisServer, key_name: &str, ms: u64) {
    server.query(
        redis::cmd("SET")
            .arg(key_name)
            .arg("killed-holder:1")
            .arg("PX")
            .arg(ms),
    );
}

/// Lets the killed holder's lease lapse now (its locker never renews it).
fn lapse(server: &RedisServer, key_name: &str) {
    server.query(redis::cmd("PEXPIRE").arg(key_name).arg(1));
    wait_until(BOUND, "the killed holder's lease to lapse", || {
        !exists(server, key_name)
    });
}

fn queue_len(server: &RedisServer, queue: &str) -> i64 {
    match server.query(redis::cmd("LLEN").arg(queue)) {
        Value::Int(n) => n,
        other => panic!("LLEN: {other:?}"),
    }
}

/// A read whose replies were held back until the locker had timed out and
/// sent it again: Redis ran the first send, so the locker counts the
/// lease from that send, and never past the reader's expiry in Redis.
pub(crate) fn a_read_whose_reply_was_lost_counts_its_lease_from_the_first_send<F: Front>() {
    let server = RedisServer::start();
    let proxy = ReplyHoldProxy::start(server.port());
    let ns = namespace("lost-read");
    let locker = F::connect(
        &proxy.url(),
        config(&ns).command_timeout(Duration::from_millis(200)),
    )
    .unwrap_or_else(|e| panic!("connect through the proxy: {e}"));
    // A pooled connection and the script cached, so the read is sent.
    F::release_read(granted(locker.read_with("warm", no_wait()), "warm-up")).unwrap();
    let sent = locker.stats().scripts_sent;

    proxy.hold();
    let locker = std::sync::Arc::new(locker);
    let reading = std::sync::Arc::clone(&locker);
    let read = spawn("the read", move || {
        reading.read_with("doc", leased(Duration::from_secs(10)).wait(BOUND))
    });
    let readers = name(&ns, "rw-read", "doc");
    wait_until(BOUND, "Redis to run the read, and a re-send", || {
        matches!(
            server.query(redis::cmd("ZCARD").arg(&readers)),
            Value::Int(1)
        ) && locker.stats().scripts_sent >= sent + 2
    });
    proxy.release();
    let read = granted(read.join_within(BOUND), "the read");

    let expiry: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(&readers)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut server.conn())
        .unwrap();
    let in_redis = expiry[0].1.saturating_sub(server_time_ms(&server));
    let counted = F::read_remaining(&read).as_millis() as u64;
    // Measured after Redis's: only a locker counting past the expiry
    // could exceed it (1 ms for the clocks' rounding).
    assert!(
        counted <= in_redis + 1,
        "the locker counts {counted} ms, Redis keeps the reader {in_redis} ms"
    );
}

/// A writer excludes every reader, also when a reader's locker has the
/// hand-over off: a writer queued behind a killed reader's registration is
/// not granted beside that reader when the next reader with the hand-over
/// comes.
pub(crate) fn a_reader_without_the_handover_never_has_a_writer_granted_beside_it<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-no-handover");
    let write_key = name(&ns, "rw-write", "doc");
    killed_holder(&server, &write_key, 60_000);
    dead_registration(&server, &ns, "rw", "doc", "rdead");
    let writer: F = connect(&server, polls_off(&ns));
    let writing = spawn("the writer", move || {
        writer
            .write_with("doc", waiting(Duration::from_secs(3)))
            .map(|w| F::write_fence(&w))
    });
    let queue = name(&ns, "rw-queue", "doc");
    wait_until(BOUND, "the writer to register", || {
        queue_len(&server, &queue) == 2
    });
    lapse(&server, &write_key);

    let plain: F = connect(&server, config(&ns).handover(false));
    let reader = granted(
        plain.read_with("doc", leased(Duration::from_secs(30)).wait(Duration::ZERO)),
        "a reader without the hand-over",
    );
    let other: F = connect(&server, config(&ns));
    let e = refused(
        other.read_with("doc", no_wait()),
        "a reader behind the writer",
    );
    assert_eq!(e.code(), "LOCK_BUSY", "{e:?}");

    let written = writing.join_within(BOUND);
    assert!(
        written.is_err(),
        "a writer was granted beside a live reader: fence {written:?}"
    );
    F::release_read(reader).unwrap();
}

/// FIFO among live registrations: a try-once attempt that finds the lock
/// free behind eight killed lockers' registrations does not take it ahead
/// of the live one; the waiting locker gets it.
pub(crate) fn killed_registrants_let_no_attempt_jump_a_waiting_locker<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("dead-regs");
    let lock = lock_name(&ns, "k");
    killed_holder(&server, &lock, 60_000);
    for i in 0..8 {
        dead_registration(&server, &ns, "lock", "k", &format!("dead{i}"));
    }
    let waiter: F = connect(&server, polls_off(&ns));
    let waiting_for = spawn("the waiter", move || {
        waiter
            .acquire_with("k", waiting(BOUND))
            .map(|l| F::fence(&l))
    });
    let queue = name(&ns, "lock-queue", "k");
    wait_until(BOUND, "the waiter to register", || {
        queue_len(&server, &queue) == 9
    });
    lapse(&server, &lock);

    let outsider: F = connect(&server, config(&ns));
    let e = refused(
        outsider.acquire_with("k", no_wait()),
        "a try-once attempt behind a live registration",
    );
    assert_eq!(e.code(), "LOCK_BUSY", "{e:?}");
    granted(waiting_for.join_within(BOUND), "the waiting locker");
}

/// A queued registration always has the queue's flag beside it, so a
/// release hands over to it. A locker with three waiters, leases of
/// 300 ms and registrations of 300 ms, gets the lock for its first
/// waiter and is stopped at once (SIGSTOP): its second waiter's next
/// attempt, which refreshes the registration, waits while the first
/// lease and the registration lapse. Continued, that attempt takes the
/// free lock; the locker's entry, if queued again for the third waiter,
/// is flagged, and the third waiter gets the lock after the release.
pub(crate) fn a_locker_queued_again_for_its_next_waiter_keeps_the_queue_flagged<F: Front>() {
    let server = RedisServer::start();
    let proxy = ReplyHoldProxy::start(server.port());
    let ns = namespace("flagged");
    let lock = lock_name(&ns, "k");
    let (queue, flag) = (name(&ns, "lock-queue", "k"), name(&ns, "lock-queued", "k"));
    killed_holder(&server, &lock, 60_000);
    // Attempts every 100 ms; a registration lives 300 ms and is refreshed
    // by an attempt 150 ms or more after the last refresh.
    let quick = config(&ns)
        .poll_interval(Duration::from_millis(100))
        .notify_poll_interval(Duration::from_millis(100))
        .wait(BOUND);
    let locker = std::sync::Arc::new(
        F::connect(&proxy.url(), quick)
            .unwrap_or_else(|e| panic!("connect through the proxy: {e}")),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let _waiters: Vec<_> = (0..3)
        .map(|_| {
            let (locker, tx) = (std::sync::Arc::clone(&locker), tx.clone());
            spawn("a waiter", move || {
                let options = leased(Duration::from_millis(300)).wait(BOUND);
                let _ = tx.send(locker.acquire_with("k", options));
            })
        })
        .collect();
    wait_until(BOUND, "three waiters, registered once", || {
        locker.stats().waiters == 3 && queue_len(&server, &queue) == 1
    });
    lapse(&server, &lock);
    let first = granted(
        rx.recv_timeout(BOUND).expect("a waiter within the bound"),
        "the first waiter",
    );
    proxy.stop();
    let dead_at = {
        let entry: String = redis::cmd("LINDEX")
            .arg(&queue)
            .arg(0)
            .query(&mut server.conn())
            .unwrap();
        entry.split('|').nth(1).unwrap().parse::<u64>().unwrap()
    };
    wait_until(
        BOUND,
        "the first lease and the registration to lapse",
        || !exists(&server, &lock) && server_time_ms(&server) > dead_at,
    );
    proxy.release();

    let second = granted(
        rx.recv_timeout(BOUND)
            .expect("the second waiter within the bound"),
        "the second waiter",
    );
    assert!(
        queue_len(&server, &queue) == 0 || exists(&server, &flag),
        "a registration is queued without the queue's flag"
    );
    F::release(second).unwrap();
    F::release(granted(
        rx.recv_timeout(BOUND)
            .expect("the third waiter within the bound"),
        "the third waiter",
    ))
    .unwrap();
    drop(first);
}

/// Every key the crate writes ends with the leases and registrations that
/// use it, or is kept on purpose (docs/PROTOCOL.md §2: the fence counters,
/// the permit-count record, the election's term and log, the key-names
/// marker). Each kind is held, waited for, handed over and given up on;
/// a registrant is killed while queued; then, once every window has
/// passed, only the kept keys are left.
pub(crate) fn only_the_keys_kept_on_purpose_outlive_the_leases_and_registrations<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("leftovers");
    let quick = || {
        config(&ns)
            .poll_interval(Duration::from_millis(100))
            .notify_poll_interval(Duration::from_millis(100))
            .claim_window(Duration::from_millis(200))
    };
    let (a, b): (F, F) = (connect(&server, quick()), connect(&server, quick()));
    let short = || waiting(Duration::from_millis(300));
    let gave_up = |e: Error| assert_eq!(e.code(), "WAIT_TIMEOUT", "{e:?}");

    let lock = granted(a.acquire("k"), "a lock");
    gave_up(refused(b.acquire_with("k", short()), "a wait for the lock"));
    F::release(lock).unwrap();
    let permit = granted(a.acquire_permit("s", 1, no_wait()), "a permit");
    gave_up(refused(
        b.acquire_permit("s", 1, short()),
        "a wait for a permit",
    ));
    F::release_permit(permit).unwrap();
    let read = granted(a.read_with("r", no_wait()), "a read");
    gave_up(refused(b.write_with("r", short()), "a wait to write"));
    F::release_read(read).unwrap();
    let held = granted(a.acquire("m1"), "one of a set");
    gave_up(refused(
        b.acquire_all_with(&["m1", "m2"], short()),
        "a wait for the set",
    ));
    F::release(held).unwrap();
    let leader = granted(a.campaign("e", b"v", no_wait()), "a leadership");
    F::resign(leader).unwrap();

    // A hand-over, then a registrant killed while queued: its grant lapses.
    let b = std::sync::Arc::new(b);
    let handed = granted(a.acquire("h"), "a lock to hand over");
    let waiter = {
        let b = std::sync::Arc::clone(&b);
        spawn("a waiter served by the hand-over", move || {
            b.acquire_with("h", waiting(BOUND)).map(F::release)
        })
    };
    let queue = name(&ns, "lock-queue", "h");
    wait_until(BOUND, "the waiter to register", || {
        queue_len(&server, &queue) == 1
    });
    F::release(handed).unwrap();
    granted(waiting_for_release(waiter), "the hand-over").unwrap();
    let dead = granted(a.acquire("d"), "a lock a killed registrant waits for");
    killed_registrant(&server, &ns, "d");
    F::release(dead).unwrap();

    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let kept = [
        ":lock-fence:",
        ":sem-fence:",
        ":rw-fence:",
        ":sem-permits:",
        ":elect-term:",
        ":elect-log:",
    ];
    let left = || -> Vec<String> {
        super::common::stored_names(&server, &ns)
            .into_iter()
            .filter(|n| !kept.iter().any(|k| n.contains(k)))
            .collect()
    };
    crate::support::polled_until(BOUND, || left().is_empty());
    assert_eq!(
        left(),
        Vec::<String>::new(),
        "keys left once every window passed"
    );
}

fn waiting_for_release<T>(waiter: super::common::Bounded<T>) -> T {
    waiter.join_within(BOUND)
}

/// A registration as the lock's acquire script writes it for a waiting
/// locker (a 300 ms bound), whose process is then killed: it never claims,
/// renews or deregisters.
fn killed_registrant(server: &RedisServer, ns: &str, key: &str) {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(super::fences::script_lua("ACQUIRE_LUA"))
        .arg(5)
        .arg(lock_name(ns, key))
        .arg(name(ns, "lock-fence", key))
        .arg(name(ns, "lock-queue", key))
        .arg(name(ns, "lock-queued", key))
        .arg(format!("{}:killed-reg", name(ns, "lock-reg", key)))
        .arg("killed-token")
        .arg(5000)
        .arg(0)
        .arg("killed-reg")
        .arg(300)
        .arg(200)
        .arg("PUBLISH")
        .arg(format!("{ns}:lock-released"))
        .arg(key_sha(key))
        .arg("")
        .arg("d")
        .arg("killed-grant");
    // Busy, with the server time it registered at.
    assert!(
        matches!(server.query(&cmd), Value::Array(v) if matches!(v[..], [Value::Int(_), Value::Int(_)])),
        "registered busy"
    );
}
