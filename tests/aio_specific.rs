//! Async-only behaviour: cancellation by dropping futures, dropped leases
//! handed back to the locker, and many leases on one multiplexed connection.
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_io::Timer;
use futures::executor::block_on;
use futures::future::{select, Either};
use futures::task::noop_waker_ref;
use redlease::{aio::Locker, AcquireOptions, Config, WithLock};
use support::{wait_until, RedisServer};

const BOUND: Duration = Duration::from_secs(10);

fn config(ns: &str) -> Config {
    Config::new(ns)
        .lease(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
}

fn lock_keys(server: &RedisServer, ns: &str) -> Vec<String> {
    server.keys(&format!("{ns}:lock:*"))
}

/// Polls a future once with a waker that does nothing.
fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(noop_waker_ref()))
}

#[test]
fn an_acquire_dropped_right_after_submission_is_released_by_token_at_the_next_operation() {
    let server = RedisServer::start();
    block_on(async {
        let locker = Locker::connect(server.url(), config("drop-submit"))
            .await
            .unwrap();
        {
            let mut fut = pin!(locker.acquire("job"));
            // Usually still in flight after one poll; a grant that already came
            // back is dropped here and handed back to the locker alike.
            drop(poll_once(fut.as_mut()));
        }
        // Whatever Redis decided, the token must not stay held once the
        // locker ran its next operation.
        let other = locker.acquire("unrelated").await.unwrap();
        assert_eq!(
            lock_keys(&server, "drop-submit").len(),
            1,
            "only the new lease is held"
        );
        other.release().await.unwrap();
        let again = locker
            .acquire_with("job", AcquireOptions::new().wait(Duration::ZERO))
            .await
            .expect("the dropped acquire's key is free again");
        again.release().await.unwrap();
        locker.shutdown().await.unwrap();
    });
}

#[test]
fn a_dropped_lease_is_released_by_the_locker_at_its_next_operation() {
    let server = RedisServer::start();
    block_on(async {
        let locker = Locker::connect(server.url(), config("drop-lease"))
            .await
            .unwrap();
        let lease = locker.acquire("job").await.unwrap();
        drop(lease);
        assert_eq!(
            lock_keys(&server, "drop-lease").len(),
            1,
            "drop does not block on Redis"
        );
        let other = locker.acquire("other").await.unwrap();
        let keys = lock_keys(&server, "drop-lease");
        assert_eq!(keys.len(), 1, "the dropped lease was released: {keys:?}");
        other.release().await.unwrap();
        assert_eq!(locker.stats().tracked_leases, 0);
        locker.shutdown().await.unwrap();
    });
}

#[test]
fn a_waiter_dropped_from_the_middle_of_the_line_does_not_disturb_it() {
    let server = RedisServer::start();
    let holder_locker = block_on(Locker::connect(server.url(), config("drop-mid"))).unwrap();
    let locker = block_on(Locker::connect(server.url(), config("drop-mid"))).unwrap();
    let holder = block_on(holder_locker.acquire("job")).unwrap();

    let mut first = Box::pin(locker.acquire("job"));
    let mut middle = Box::pin(locker.acquire("job"));
    let mut last = Box::pin(locker.acquire("job"));
    // Each waiter joins the line on its first poll.
    for fut in [&mut first, &mut middle, &mut last] {
        assert!(poll_once(fut.as_mut()).is_pending());
    }
    wait_until(BOUND, "three waiters in line", || {
        locker.stats().waiters == 3
    });
    drop(middle);
    assert_eq!(locker.stats().waiters, 2);

    block_on(holder.release()).unwrap();
    let first = block_on(first).expect("the head gets the lock");
    let first_fence = first.fence();
    block_on(first.release()).unwrap();
    let last = block_on(last).expect("the last waiter gets it next");
    assert!(last.fence() > first_fence);
    block_on(last.release()).unwrap();
    block_on(locker.shutdown()).unwrap();
    block_on(holder_locker.shutdown()).unwrap();
}

#[test]
fn one_locker_holds_ten_thousand_leases_on_one_connection_then_refuses_the_next() {
    const N: usize = 10_000;
    let server = RedisServer::start();
    block_on(async {
        let locker = Locker::connect(
            server.url(),
            config("many").max_waiters(N).max_tracked_leases(N),
        )
        .await
        .unwrap();
        let keys: Vec<String> = (0..N).map(|i| format!("key-{i}")).collect();
        let leases = futures::future::try_join_all(keys.iter().map(|k| locker.acquire(k)))
            .await
            .expect("all acquired");
        assert_eq!(locker.stats().tracked_leases, N);
        assert_eq!(lock_keys(&server, "many").len(), N);

        let refused = locker
            .acquire("one-too-many")
            .await
            .expect_err("limit reached");
        assert_eq!(refused.code(), "TOO_MANY_LEASES");
        assert!(refused.to_string().contains("max_tracked_leases"));

        futures::future::try_join_all(leases.into_iter().map(|l| l.release()))
            .await
            .expect("all released");
        assert!(lock_keys(&server, "many").is_empty());
        locker.shutdown().await.unwrap();
    });
}

/// An async `with_lock` whose job panics releases its lease by itself: the
/// lock key is gone soon after the panic (lease 30 s, no further call on the
/// locker), and another locker's try-acquire gets the key.
#[test]
fn async_with_lock_releases_the_lease_when_the_job_panics() {
    let server = RedisServer::start();
    let ns = "with-lock-panic";
    let locker = block_on(Locker::connect(server.url(), config(ns))).unwrap();
    let other = block_on(Locker::connect(server.url(), config(ns))).unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| {
        block_on(locker.with_lock(
            "k",
            WithLock::new(),
            async |_lease, _lost| -> Result<(), redlease::Error> {
                assert_eq!(lock_keys(&server, ns).len(), 1, "held while the job runs");
                panic!("the job panicked");
            },
        ))
    }));
    let payload = result.expect_err("the panic comes back to the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"the job panicked"));

    // No call on `locker` from here on: the release must not wait for one.
    wait_until(BOUND, "the panicked job's lock was released", || {
        lock_keys(&server, ns).is_empty()
    });
    let lease = block_on(other.acquire_with("k", AcquireOptions::new().wait(Duration::ZERO)))
        .unwrap_or_else(|e| panic!("the key is free: {} ({e:?})", e.code()));
    block_on(lease.release()).unwrap();
}

/// A head dropped while its attempt is in flight (server stopped) leaves
/// that attempt as the key's one attempt: neither the waiter queued behind
/// the head nor one arriving after the drop sends its own attempt while the
/// first is unanswered (the crate docs' "How it works": one attempt per key per locker at a time).
/// After the resume both get the key in turn and the abandoned attempt's
/// token is released.
#[test]
fn abandoning_an_async_head_with_an_attempt_in_flight_does_not_send_a_second_attempt_at_once() {
    let server = RedisServer::start();
    let ns = "abandon-head";
    // The command timeout outlasts the pause: the first attempt stays in
    // flight (unanswered, not timed out) for the whole observation window.
    let locker = block_on(Locker::connect(
        server.url(),
        config(ns).command_timeout(Duration::from_secs(5)),
    ))
    .unwrap();
    // A pooled connection and a cached script, so the attempt is sent at once.
    block_on(async {
        locker
            .acquire("warm")
            .await
            .unwrap()
            .release()
            .await
            .unwrap()
    });
    let sent = locker.stats().scripts_sent;

    let paused = server.pause_guard();
    let mut head = Box::pin(locker.acquire("k"));
    assert!(
        poll_once(head.as_mut()).is_pending(),
        "the server is stopped"
    );
    wait_until(BOUND, "the head's attempt was sent", || {
        locker.stats().scripts_sent == sent + 1
    });
    let mut queued = Box::pin(locker.acquire("k"));
    assert!(poll_once(queued.as_mut()).is_pending());
    assert_eq!(locker.stats().waiters, 2, "queued behind the head");
    drop(head); // abandoned with its attempt unanswered
    let mut late = Box::pin(locker.acquire("k"));
    // Let both waiters run for a while, the server still stopped.
    let window = block_on(select(
        futures::future::join(queued.as_mut(), late.as_mut()),
        Timer::after(Duration::from_millis(500)),
    ));
    assert!(matches!(window, Either::Right(_)), "the server is stopped");
    let during = locker.stats().scripts_sent;
    drop(paused);
    assert_eq!(
        during,
        sent + 1,
        "acquire scripts sent while the abandoned attempt was unanswered \
         (1 = only that attempt)"
    );

    let first = block_on(queued).unwrap_or_else(|e| panic!("queued: {} ({e:?})", e.code()));
    assert_eq!(
        lock_keys(&server, ns).len(),
        1,
        "only the queued waiter's lock"
    );
    let first_fence = first.fence();
    block_on(first.release()).unwrap();
    let second = block_on(late).unwrap_or_else(|e| panic!("late: {} ({e:?})", e.code()));
    assert!(second.fence() > first_fence);
    block_on(second.release()).unwrap();
    assert!(lock_keys(&server, ns).is_empty());
}

fn sem_keys(server: &RedisServer, ns: &str) -> Vec<String> {
    server.keys(&format!("{ns}:sem:*"))
}

/// A dropped `aio::Permit` is handed back to the locker (drop does not
/// block on Redis), which releases it by token at its next operation.
#[test]
fn a_dropped_permit_is_released_by_the_locker_at_its_next_operation() {
    let server = RedisServer::start();
    let ns = "drop-permit";
    block_on(async {
        let locker = Locker::connect(server.url(), config(ns)).await.unwrap();
        let pool = locker.semaphore("pool", 2).unwrap();
        let permit = pool.acquire().await.unwrap();
        drop(permit);
        assert_eq!(
            sem_keys(&server, ns).len(),
            1,
            "drop does not block on Redis"
        );
        let other = locker.acquire("other").await.unwrap();
        assert_eq!(sem_keys(&server, ns), Vec::<String>::new(), "released");
        other.release().await.unwrap();
        assert_eq!(locker.stats().tracked_leases, 0);
        locker.shutdown().await.unwrap();
    });
}

/// A permit acquire dropped right after it was sent leaves no permit held
/// once the locker ran its next operation, whatever Redis decided: both
/// permits can be taken afterwards.
#[test]
fn a_permit_acquire_dropped_right_after_submission_leaves_no_permit_held() {
    let server = RedisServer::start();
    let ns = "drop-permit-submit";
    block_on(async {
        let locker = Locker::connect(server.url(), config(ns)).await.unwrap();
        let pool = locker.semaphore("pool", 2).unwrap();
        {
            let mut fut = pin!(pool.acquire());
            // Usually still in flight after one poll; a grant that already came
            // back is dropped here and handed back to the locker alike.
            drop(poll_once(fut.as_mut()));
        }
        let other = locker.acquire("unrelated").await.unwrap();
        assert_eq!(
            sem_keys(&server, ns),
            Vec::<String>::new(),
            "no permit held"
        );
        other.release().await.unwrap();
        let first = pool.try_acquire().await.expect("a free permit");
        let second = pool.try_acquire().await.expect("the other free permit");
        assert_ne!(first.slot(), second.slot());
        first.release().await.unwrap();
        second.release().await.unwrap();
        assert_eq!(locker.stats().waiters, 0);
        locker.shutdown().await.unwrap();
    });
}

fn rw_keys(server: &RedisServer, ns: &str) -> Vec<String> {
    server.keys(&format!("{ns}:rw-*"))
}

/// The names a read-write lease holds while it is held: the writer's key
/// and the reader set (the fence counter and an intent are not holds).
fn rw_holds(server: &RedisServer, ns: &str) -> Vec<String> {
    let mut held = server.keys(&format!("{ns}:rw-write:*"));
    held.extend(server.keys(&format!("{ns}:rw-read:*")));
    held
}

/// A locker whose waiters move only on a notification or a wake-up by the
/// locker itself: safety polls (30 s) beyond the waiter's 10 s wait.
fn slow_polling(ns: &str) -> Config {
    config(ns)
        .poll_interval(Duration::from_secs(30))
        .notify_poll_interval(Duration::from_secs(30))
}

/// Starts `acquire` on its own thread (driven by `block_on` there) and
/// waits until it waits in its line, subscribed, its head backing off after
/// a busy reply.
fn waiting_on_a_thread<T: Send + 'static>(
    locker: &std::sync::Arc<Locker>,
    acquire: impl FnOnce(&Locker) -> T + Send + 'static,
) -> behaviour::common::Bounded<T> {
    let l = locker.clone();
    let waiter = behaviour::common::spawn("waiter", move || acquire(&l));
    wait_until(
        BOUND,
        "the waiter waits, subscribed, after a busy reply",
        || {
            let s = locker.stats();
            s.waiters == 1 && s.subscribed && s.busy_replies >= 2
        },
    );
    waiter
}

/// A dropped `aio::ReadLease` is handed back to the locker, which releases
/// it within one round trip when a writer of the same locker waits for the
/// key: the writer gets in (its safety polls are 30 s, its wait 10 s; a
/// writer woken only by its own line's events stayed out).
#[test]
fn a_dropped_read_lease_frees_a_waiting_writer_of_the_same_locker() {
    let server = RedisServer::start();
    let ns = "drop-read";
    let locker =
        std::sync::Arc::new(block_on(Locker::connect(server.url(), slow_polling(ns))).unwrap());
    let read = block_on(locker.rw_lock("doc").unwrap().try_read()).unwrap();
    let epoch = read.epoch();
    let writer = waiting_on_a_thread(&locker, |l| {
        let w = block_on(l.rw_lock("doc")?.write())?;
        let fence = w.fence();
        block_on(w.release()).map(|outcome| (fence, outcome))
    });

    drop(read);
    let (fence, outcome) = writer
        // It ends by its 10 s wait at the latest.
        .join_within(Duration::from_secs(15))
        .unwrap_or_else(|e| {
            panic!(
                "the writer got the dropped reader's key: {} ({e:?})",
                e.code()
            )
        });
    assert_eq!(outcome, redlease::ReleaseOutcome::Released);
    assert!(fence > epoch);
    assert_eq!(rw_holds(&server, ns), Vec::<String>::new());
    block_on(locker.shutdown()).unwrap();
}

/// A dropped `aio::WriteLease` is released within one round trip when a
/// reader of the same locker waits for the key; the reader's epoch is the
/// dropped writer's fence.
#[test]
fn a_dropped_write_lease_frees_a_waiting_reader_of_the_same_locker() {
    let server = RedisServer::start();
    let ns = "drop-write";
    let locker =
        std::sync::Arc::new(block_on(Locker::connect(server.url(), slow_polling(ns))).unwrap());
    let write = block_on(locker.rw_lock("doc").unwrap().try_write()).unwrap();
    let fence = write.fence();
    let reader = waiting_on_a_thread(&locker, |l| {
        let r = block_on(l.rw_lock("doc")?.read())?;
        let epoch = r.epoch();
        block_on(r.release()).map(|outcome| (epoch, outcome))
    });

    drop(write);
    let (epoch, outcome) = reader
        // It ends by its 10 s wait at the latest.
        .join_within(Duration::from_secs(15))
        .unwrap_or_else(|e| {
            panic!(
                "the reader got the dropped writer's key: {} ({e:?})",
                e.code()
            )
        });
    assert_eq!(outcome, redlease::ReleaseOutcome::Released);
    assert_eq!(epoch, fence, "the epoch is the dropped writer's fence");
    assert_eq!(rw_holds(&server, ns), Vec::<String>::new());
    block_on(locker.shutdown()).unwrap();
}

/// A read or write acquire dropped right after it was sent leaves nothing
/// held once the locker ran its next operation, whatever Redis decided:
/// a try-once writer and a try-once reader both get in afterwards.
#[test]
fn a_read_or_write_acquire_dropped_right_after_submission_leaves_nothing_held() {
    let server = RedisServer::start();
    let ns = "drop-rw-submit";
    block_on(async {
        let locker = Locker::connect(server.url(), config(ns)).await.unwrap();
        let doc = locker.rw_lock("doc").unwrap();
        for write in [false, true] {
            if write {
                let mut fut = pin!(doc.write());
                // In flight, or a grant dropped here and handed back alike.
                drop(poll_once(fut.as_mut()));
            } else {
                let mut fut = pin!(doc.read());
                // In flight, or a grant dropped here and handed back alike.
                drop(poll_once(fut.as_mut()));
            }
            let other = locker.acquire("unrelated").await.unwrap();
            assert_eq!(
                rw_holds(&server, ns),
                Vec::<String>::new(),
                "write: {write}"
            );
            other.release().await.unwrap();
            let w = doc.try_write().await.expect("the writer gets in");
            w.release().await.unwrap();
            let r = doc.try_read().await.expect("a reader gets in");
            r.release().await.unwrap();
        }
        assert_eq!(locker.stats().waiters, 0);
        assert_eq!(locker.stats().tracked_leases, 0);
        locker.shutdown().await.unwrap();
        let left = rw_keys(&server, ns);
        assert!(
            left.iter().all(|k| k.contains(":rw-fence:")),
            "only the fence counter stays: {left:?}"
        );
    });
}

/// The locker's connections that are open, besides this test's own.
fn locker_connections(server: &RedisServer) -> usize {
    server
        .client_list()
        .iter()
        .filter(|c| c.contains("flags=N") && !c.contains("cmd=client|list"))
        .count()
}

/// The command connection is driven by the futures that wait on it; the
/// driver keeps its waker, which must not keep the connection alive: a
/// replaced connection (`CLIENT KILL` here) and a dropped locker's
/// connection are closed (regression: the waker held the driver, and every
/// replaced connection stayed open).
#[test]
fn a_replaced_or_dropped_command_connection_is_closed() {
    let server = RedisServer::start();
    block_on(async {
        let locker = Locker::connect(server.url(), config("driven-close"))
            .await
            .unwrap();
        locker.acquire("k").await.unwrap().release().await.unwrap();
        assert_eq!(locker_connections(&server), 1, "one command connection");
        for _ in 0..3 {
            assert!(server.client_kill_type("normal") >= 1);
            wait_until(BOUND, "the killed connection is gone", || {
                locker_connections(&server) == 0
            });
            locker.acquire("k").await.unwrap().release().await.unwrap();
            assert_eq!(locker_connections(&server), 1, "replaced, not added");
        }
        drop(locker);
    });
    wait_until(BOUND, "the dropped locker's connection is closed", || {
        locker_connections(&server) == 0
    });
}

/// An async call does nothing until it is polled: an acquire future made
/// and never polled joins no line, so it neither holds a place ahead of
/// later waiters of its locker nor sends anything.
#[test]
fn an_acquire_future_never_polled_joins_no_line() {
    let server = RedisServer::start();
    block_on(async {
        let locker = Locker::connect(server.url(), config("lazy")).await.unwrap();
        let idle = locker.acquire("job");
        assert_eq!(locker.stats().waiters, 0, "made, not polled: not waiting");
        // A try-once acquire behind a waiter of its own locker is `Busy` at
        // once (the crate docs' "How it works"); here nothing is ahead of it.
        let lease = locker.try_acquire("job").await.unwrap();
        lease.release().await.unwrap();
        drop(idle);
        assert!(lock_keys(&server, "lazy").is_empty());
        locker.shutdown().await.unwrap();
    });
}

/// Over a unix socket the connection is driven by the commands, as over
/// TCP: it works, and a server-side close is noticed before the
/// next command, which opens a new connection.
#[test]
fn a_locker_over_a_unix_socket_acquires_and_reconnects_after_the_server_closed_it() {
    let socket = std::env::temp_dir().join(format!("redlease-{}.sock", std::process::id()));
    let path = socket.to_string_lossy().into_owned();
    let server = RedisServer::builder()
        .args(["--unixsocket", path.as_str(), "--unixsocketperm", "700"])
        .start();
    block_on(async {
        let url = format!("redis+unix://{path}?db=0");
        let locker = Locker::connect(url.as_str(), config("unix")).await.unwrap();
        let lease = locker.acquire("job").await.unwrap();
        assert_eq!(lock_keys(&server, "unix").len(), 1, "held over the socket");
        lease.release().await.unwrap();
        assert!(
            server.client_kill_type("normal") >= 1,
            "the locker's connection was killed"
        );
        wait_until(BOUND, "the locker notices the close", || {
            !locker.stats().connected
        });
        let lease = locker
            .acquire("job")
            .await
            .expect("a new connection serves");
        lease.release().await.unwrap();
        locker.shutdown().await.unwrap();
    });
    let _ = std::fs::remove_file(&socket);
}
