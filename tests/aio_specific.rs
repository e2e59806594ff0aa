//! Async-only behaviour: cancellation by dropping futures, dropped leases
//! handed back to the locker, and many leases on one multiplexed connection.
#![allow(clippy::disallowed_methods)]

mod support;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::executor::block_on;
use futures::task::noop_waker_ref;
use redlease::{aio::Locker, AcquireOptions, Config};
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
            assert!(
                poll_once(fut.as_mut()).is_pending(),
                "the attempt is in flight"
            );
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
        assert_eq!(refused.code(), "QUEUE_FULL");
        assert!(refused.to_string().contains("max_tracked_leases"));

        futures::future::try_join_all(leases.into_iter().map(|l| l.release()))
            .await
            .expect("all released");
        assert!(lock_keys(&server, "many").is_empty());
        locker.shutdown().await.unwrap();
    });
}
