//! The async locker on every executor it promises to run on: smol,
//! async-std, `futures::executor` (a `LocalPool` and a `ThreadPool`) and a
//! tokio program, none of which the library starts or needs.
#![allow(clippy::disallowed_methods)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::task::SpawnExt;
use redlease::{aio::Locker, AcquireOptions, Config, Fence};
use support::RedisServer;

const WORKERS: usize = 4;
const ROUNDS: usize = 3;

fn config(ns: &str) -> Config {
    Config::new(ns)
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(10))
}

/// One worker: acquires the shared key `ROUNDS` times, releasing each time.
async fn worker(locker: Arc<Locker>) -> Vec<Fence> {
    let mut fences = Vec::new();
    for _ in 0..ROUNDS {
        let lease = locker.acquire("shared").await.expect("acquire");
        fences.push(lease.fence());
        lease.release().await.expect("release");
    }
    fences
}

/// Every grant got its own fence and the holder of the key while busy is
/// refused with wait zero.
async fn check_contention(
    locker: Arc<Locker>,
    spawn: impl Fn(Arc<Locker>) -> futures::future::BoxFuture<'static, Vec<Fence>>,
) {
    let held = locker.acquire("busy").await.expect("acquire busy");
    let busy = locker
        .acquire_with("busy", AcquireOptions::new().wait(Duration::ZERO))
        .await
        .expect_err("busy");
    assert_eq!(busy.code(), "LOCK_BUSY");
    held.release().await.expect("release busy");

    let runs: Vec<_> = (0..WORKERS).map(|_| spawn(locker.clone())).collect();
    let mut all: Vec<Fence> = futures::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "every grant has a distinct fence");
    assert_eq!(n, WORKERS * ROUNDS);
    locker.shutdown().await.expect("shutdown");
}

#[test]
fn runs_on_smol() {
    let server = RedisServer::start();
    smol::block_on(async {
        let locker = Arc::new(Locker::connect(server.url(), config("smol")).await.unwrap());
        check_contention(locker, |l| Box::pin(smol::spawn(worker(l)))).await;
    });
}

#[test]
fn runs_on_async_std() {
    let server = RedisServer::start();
    async_std::task::block_on(async {
        let locker = Arc::new(
            Locker::connect(server.url(), config("async-std"))
                .await
                .unwrap(),
        );
        check_contention(locker, |l| Box::pin(async_std::task::spawn(worker(l)))).await;
    });
}

#[test]
fn runs_on_a_futures_thread_pool() {
    let server = RedisServer::start();
    let pool = futures::executor::ThreadPool::builder()
        .pool_size(2)
        .create()
        .unwrap();
    let spawner = pool.clone();
    futures::executor::block_on(async {
        let locker = Arc::new(
            Locker::connect(server.url(), config("threadpool"))
                .await
                .unwrap(),
        );
        check_contention(locker, move |l| {
            Box::pin(spawner.spawn_with_handle(worker(l)).expect("spawn"))
        })
        .await;
    });
}

#[test]
fn runs_on_a_futures_local_pool() {
    let server = RedisServer::start();
    let mut pool = futures::executor::LocalPool::new();
    let spawner = pool.spawner();
    let url = server.url();
    let done = pool.run_until(async move {
        let locker = Arc::new(Locker::connect(url, config("localpool")).await.unwrap());
        let handles: Vec<_> = (0..WORKERS)
            .map(|_| {
                futures::task::LocalSpawnExt::spawn_local_with_handle(
                    &spawner,
                    worker(locker.clone()),
                )
                .expect("spawn")
            })
            .collect();
        let fences: Vec<Fence> = futures::future::join_all(handles)
            .await
            .into_iter()
            .flatten()
            .collect();
        locker.shutdown().await.expect("shutdown");
        fences
    });
    let mut sorted = done.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), WORKERS * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_inside_a_tokio_program() {
    let server = RedisServer::start();
    let locker = Arc::new(
        Locker::connect(server.url(), config("tokio"))
            .await
            .unwrap(),
    );
    check_contention(locker, |l| {
        Box::pin(async move { tokio::spawn(worker(l)).await.expect("join") })
    })
    .await;
}
