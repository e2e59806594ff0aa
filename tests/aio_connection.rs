//! The async locker's own connection to one server (`src/aio/driven.rs`,
//! reached through the hidden `redlease::micro` hook): requests pipelined
//! from many tasks, dropped requests, the set-up, and a server-side close.
#![cfg(all(feature = "aio", feature = "bench-hooks"))]
#![allow(clippy::disallowed_methods)]

mod support;

use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::executor::block_on;
use futures::future::{join_all, select, Either};
use futures::task::noop_waker_ref;
use redis::{RedisResult, Value};
use redlease::micro::DrivenConnection;
use support::{wait_until, RedisServer};

const BOUND: Duration = Duration::from_secs(10);

fn open(url: &str) -> DrivenConnection {
    block_on(DrivenConnection::connect(url, BOUND)).expect("connects")
}

async fn echo(conn: DrivenConnection, text: String) -> RedisResult<String> {
    conn.query(redis::cmd("ECHO").arg(&text)).await
}

/// `fut`, or a panic once `BOUND` has passed.
async fn bounded<F: std::future::Future + Unpin>(fut: F) -> F::Output {
    match select(fut, async_io::Timer::after(BOUND)).await {
        Either::Left((out, _)) => out,
        Either::Right(_) => panic!("no answer within {BOUND:?}"),
    }
}

/// Polls `fut` once: its request is queued and written.
fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(noop_waker_ref()))
}

#[test]
fn requests_from_many_tasks_on_many_threads_each_get_their_own_reply() {
    let server = RedisServer::start();
    let conn = open(&server.url());
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let conn = conn.clone();
            std::thread::spawn(move || {
                block_on(async {
                    for round in 0..10 {
                        // Forty at once from this task: pipelined behind one
                        // another and behind the other threads' requests.
                        let texts: Vec<String> =
                            (0..40).map(|i| format!("t{t}-r{round}-{i}")).collect();
                        let replies =
                            join_all(texts.iter().map(|s| echo(conn.clone(), s.clone()))).await;
                        for (text, reply) in texts.iter().zip(replies) {
                            assert_eq!(&reply.expect("a reply"), text);
                        }
                        // A pipeline gets its own replies too, past its offset.
                        let mut pipe = redis::pipe();
                        pipe.cmd("SET").arg(format!("k{t}")).arg(round).ignore();
                        pipe.cmd("GET").arg(format!("k{t}"));
                        pipe.cmd("ECHO").arg(format!("p{t}"));
                        let (got, echoed): (i64, String) =
                            conn.pipeline(&pipe).await.expect("a pipeline");
                        assert_eq!((got, echoed), (round, format!("p{t}")));
                    }
                })
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no task saw another's reply");
    }
    assert!(conn.is_open());
}

#[test]
fn a_request_dropped_while_it_waits_does_not_shift_the_replies_behind_it() {
    let server = RedisServer::start();
    let conn = open(&server.url());
    block_on(async {
        // Each waits a tenth of a second on the server for a list that
        // never fills; dropped once written, its reply (nil) comes later.
        for _ in 0..3 {
            let blpop = redis::cmd("BLPOP").arg("never").arg(0.1).clone();
            let mut waiting = pin!(conn.query::<Value>(&blpop));
            assert!(
                poll_once(waiting.as_mut()).is_pending(),
                "written, not answered"
            );
        }
        let reply = bounded(pin!(echo(conn.clone(), "after".into()))).await;
        assert_eq!(reply.expect("its own reply"), "after");
        let reply = bounded(pin!(echo(conn.clone(), "next".into()))).await;
        assert_eq!(reply.expect("its own reply"), "next");
    });
}

#[test]
fn the_connection_is_set_up_as_the_redis_crate_sets_it_up() {
    let server = RedisServer::builder().password("s3cret").start();
    let url = format!("redis://:s3cret@127.0.0.1:{}/3", server.port());
    let conn = open(&url);
    let info: String =
        block_on(conn.query(redis::cmd("CLIENT").arg("INFO"))).expect("authenticated");
    for field in [" db=3 ", " resp=3\n", " user=default "] {
        assert!(info.contains(field), "{field:?} in {info:?}");
    }
    // A wrong password fails as the redis crate's own connection fails.
    let wrong = format!(
        "redis://:wrong@127.0.0.1:{}/0?protocol=resp3",
        server.port()
    );
    let refused = block_on(DrivenConnection::connect(&wrong, BOUND)).expect_err("refused");
    let client = redis::Client::open(wrong.as_str()).unwrap();
    let theirs = block_on(client.get_multiplexed_async_connection()).expect_err("refused");
    assert_eq!(
        (refused.kind(), refused.code()),
        (theirs.kind(), theirs.code())
    );
    assert!(refused.code().is_some(), "{refused:?}");
}

#[test]
fn a_server_side_close_fails_every_waiting_request_and_is_seen_while_idle() {
    let server = RedisServer::start();
    let conn = open(&server.url());
    block_on(async {
        let blpop = redis::cmd("BLPOP").arg("never").arg(30).clone();
        let mut first = pin!(conn.query::<Value>(&blpop));
        let mut second = pin!(echo(conn.clone(), "behind".into()));
        assert!(poll_once(first.as_mut()).is_pending());
        assert!(poll_once(second.as_mut()).is_pending());
        assert!(server.client_kill_type("normal") >= 1);
        let first = bounded(first).await.expect_err("the connection was closed");
        assert!(first.is_connection_dropped(), "{first:?}");
        let second = bounded(second).await.expect_err("queued behind it");
        assert!(second.is_connection_dropped(), "{second:?}");
        assert!(!conn.is_open());
        let later = echo(conn.clone(), "later".into()).await.expect_err("ended");
        assert!(later.is_connection_dropped(), "{later:?}");
    });
    // Idle: nothing reads the socket, `is_open` looks.
    let idle = open(&server.url());
    block_on(echo(idle.clone(), "x".into())).expect("open");
    assert!(server.client_kill_type("normal") >= 1);
    wait_until(BOUND, "the idle connection sees the close", || {
        !idle.is_open()
    });
}
