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

/// A tokio runtime, current-thread or multi-thread, with or without its IO
/// driver (`enable_io`): with feature `tokio` the first two put the
/// connection on the runtime's reactor, the third keeps async-io's.
#[cfg(feature = "tokio")]
fn check_on_tokio(runtime: tokio::runtime::Runtime, ns: &str) {
    let server = RedisServer::start();
    runtime.block_on(async {
        let locker = Arc::new(Locker::connect(server.url(), config(ns)).await.unwrap());
        check_contention(locker, |l| {
            Box::pin(async move { tokio::spawn(worker(l)).await.expect("join") })
        })
        .await;
    });
}

/// A current-thread runtime with its IO driver, as `#[tokio::main(flavor =
/// "current_thread")]` builds it.
#[cfg(feature = "tokio")]
fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[cfg(feature = "tokio")]
#[test]
fn runs_on_a_tokio_current_thread_runtime() {
    let runtime = current_thread_runtime();
    check_on_tokio(runtime, "tokio-current");
}

#[cfg(feature = "tokio")]
#[test]
fn runs_in_a_tokio_runtime_without_its_io_driver() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    check_on_tokio(runtime, "tokio-no-io");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    check_on_tokio(runtime, "tokio-no-io-2");
}

/// A locker opened inside a tokio runtime that then shuts down opens a new
/// connection for its next operation, instead of sending on a socket whose
/// reactor is gone (where a reply could never be read).
#[cfg(feature = "tokio")]
#[test]
fn a_locker_opened_in_a_tokio_runtime_outlives_it() {
    let server = RedisServer::start();
    let runtime = current_thread_runtime();
    let locker = runtime.block_on(async {
        let locker = Locker::connect(server.url(), config("outlived"))
            .await
            .unwrap();
        let lease = locker.acquire("k").await.expect("acquire in the runtime");
        lease.release().await.expect("release in the runtime");
        locker
    });
    drop(runtime);
    three_cycles_after_the_runtime_send_six_scripts(&locker, &server);
}

/// After the runtime `locker` was opened in is gone, three acquire and
/// release cycles under `futures::executor` send one script each: nothing
/// is sent on the dead reactor and then again.
#[cfg(feature = "tokio")]
fn three_cycles_after_the_runtime_send_six_scripts(locker: &Locker, server: &RedisServer) {
    server.reset_stats();
    futures::executor::block_on(async {
        for _ in 0..3 {
            let lease = locker.acquire("k").await.expect("acquire after it");
            lease.release().await.expect("release after it");
        }
        locker.shutdown().await.expect("shutdown");
    });
    let stats = server.commandstats();
    let scripts =
        stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0);
    assert_eq!(scripts, 6, "{stats:?}");
}

/// A current-thread runtime turns its reactor only inside its `block_on`.
/// A locker opened in one that then sits idle holds nothing up: another
/// thread's operations go through at once, and a leadership's keeper
/// renews it past its lease many times over.
#[cfg(feature = "tokio")]
#[test]
fn a_current_thread_runtime_that_is_not_running_holds_up_nothing() {
    let server = RedisServer::start();
    let runtime = current_thread_runtime();
    let config = config("idle-runtime").lease(Duration::from_millis(300));
    let (locker, leadership) = runtime.block_on(async {
        let locker = Locker::connect(server.url(), config).await.unwrap();
        let election = locker.election("e").unwrap();
        let leadership = election.campaign(b"me").await.expect("campaign");
        (locker, leadership)
    });
    futures::executor::block_on(async {
        let lease = locker.acquire("k").await.expect("acquire outside it");
        lease.release().await.expect("release outside it");
        // Four leases' time without a loss: the keeper renewed it.
        let lost = std::pin::pin!(leadership.lost().wait());
        let passed = async_io::Timer::after(Duration::from_millis(1200));
        let raced = futures::future::select(lost, passed).await;
        assert!(matches!(raced, futures::future::Either::Right(_)), "lost");
    });
    let term = leadership.term();
    futures::executor::block_on(async {
        leadership.resign().await.expect("resign");
        let leader = locker.election("e").unwrap().leader().await.unwrap();
        assert!(leader.is_none(), "a leader after term {term:?}");
        locker.shutdown().await.expect("shutdown");
    });
    drop(runtime);
}

/// A runtime that has shut down but is still entered through its handle
/// refuses new sockets: the locker connects on async-io's reactor instead.
#[cfg(feature = "tokio")]
#[test]
fn a_shut_down_runtime_still_entered_leaves_the_connection_on_async_io() {
    let server = RedisServer::start();
    let runtime = current_thread_runtime();
    let handle = runtime.handle().clone();
    drop(runtime);
    let _entered = handle.enter();
    futures::executor::block_on(async {
        let locker = Locker::connect(server.url(), config("shut-down"))
            .await
            .expect("connect");
        let lease = locker.acquire("k").await.expect("acquire");
        lease.release().await.expect("release");
        locker.shutdown().await.expect("shutdown");
    });
}

/// A server that also listens on a unix socket named for `tag` (removed
/// when dropped), and that socket's URL.
#[cfg(all(feature = "tokio", unix))]
struct UnixSocketServer {
    server: RedisServer,
    socket: std::path::PathBuf,
    url: String,
}

#[cfg(all(feature = "tokio", unix))]
impl UnixSocketServer {
    fn start(tag: &str) -> Self {
        let name = format!("redlease-{tag}-{}.sock", std::process::id());
        let socket = std::env::temp_dir().join(name);
        let path = socket.to_string_lossy().into_owned();
        let server = RedisServer::builder()
            .args(["--unixsocket", path.as_str(), "--unixsocketperm", "700"])
            .start();
        let url = format!("redis+unix://{path}?db=0");
        UnixSocketServer {
            server,
            socket,
            url,
        }
    }
}

#[cfg(all(feature = "tokio", unix))]
impl Drop for UnixSocketServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Over a unix socket, in a tokio runtime, the connection is on the
/// runtime's reactor as over TCP: it serves a spawned task, notices a
/// server-side close before the next command, and after the runtime is
/// gone the locker opens a new connection rather than send on the old one
/// (one script per operation).
#[cfg(all(feature = "tokio", unix))]
#[test]
fn a_unix_socket_connection_in_a_tokio_runtime_serves_notices_a_close_and_outlives_it() {
    let unix = UnixSocketServer::start("tokio");
    let (server, url) = (&unix.server, &unix.url);
    let runtime = current_thread_runtime();
    let locker = runtime.block_on(async {
        let locker = Arc::new(Locker::connect(url.as_str(), config("unix")).await.unwrap());
        // One worker: contention would leave hand-over registrations whose
        // removal, later, the script count below would see.
        let fences = tokio::spawn(worker(locker.clone())).await.expect("join");
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
        assert!(
            server.client_kill_type("normal") >= 1,
            "the connection was killed"
        );
        support::wait_until(
            Duration::from_secs(10),
            "the locker notices the close",
            || !locker.stats().connected,
        );
        let lease = locker.acquire("k").await.expect("a new connection serves");
        lease.release().await.expect("release");
        locker
    });
    drop(runtime);
    three_cycles_after_the_runtime_send_six_scripts(&locker, server);
}

/// A server-side close that comes while a current-thread runtime is busy
/// (its reactor does not turn) is still seen before the next operation,
/// which opens a new connection, as on async-io's reactor: even after a
/// look at the connection (`stats()`) made tokio's cached readiness say
/// "nothing to read". Over TCP and a unix socket.
#[cfg(all(feature = "tokio", unix))]
#[test]
fn a_close_while_a_current_thread_runtime_is_busy_is_seen_before_the_next_operation() {
    let unix = UnixSocketServer::start("busy");
    let server = &unix.server;
    for url in [server.url(), unix.url.clone()] {
        current_thread_runtime().block_on(async {
            let locker = Locker::connect(url.as_str(), config("busy")).await.unwrap();
            for _ in 0..3 {
                let lease = locker.try_acquire("k").await.expect("acquire");
                lease.release().await.expect("release");
                assert!(locker.stats().connected);
                assert!(
                    server.client_kill_type("normal") >= 1,
                    "the connection was killed"
                );
                // Busy: nothing here lets the runtime turn its reactor.
                std::thread::sleep(Duration::from_millis(20));
                let lease = locker
                    .try_acquire("k")
                    .await
                    .expect("a new connection serves");
                lease.release().await.expect("release");
            }
            locker.shutdown().await.expect("shutdown");
        });
    }
}
