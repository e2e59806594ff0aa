//! The blocking locker's own connection to one server over plain TCP or a
//! unix socket (`src/driver/wire.rs`): a pooled connection the server
//! closed while idle is noticed before a request goes out on it, without a
//! `PING` (the redis crate's connection needed one in front of every
//! request on a reused connection), and the set-up is the redis crate's.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::HashMap;
use std::time::Duration;

use redlease::blocking::Locker;
use redlease::{Config, ReleaseOutcome, RenewOutcome};
use support::{wait_until, RedisServer};

const BOUND: Duration = Duration::from_secs(10);

fn config(ns: &str) -> Config {
    Config::new(format!("t-{ns}-{}", std::process::id()))
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(2))
}

/// One acquire, renew and release on `locker`, each of which must work.
fn cycle(locker: &Locker, key: &str) {
    let lease = locker
        .acquire(key)
        .unwrap_or_else(|e| panic!("acquire: {} ({e:?})", e.code()));
    assert_eq!(lease.renew().expect("renew"), RenewOutcome::Renewed);
    assert_eq!(lease.release().expect("release"), ReleaseOutcome::Released);
}

fn calls(stats: &HashMap<String, u64>, command: &str) -> u64 {
    stats.get(command).copied().unwrap_or(0)
}

/// `total_connections_received` of `INFO stats`.
fn connections_received(server: &RedisServer) -> u64 {
    let info = server.info("stats");
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_connections_received in INFO stats")
}

/// Acquire, renew and release on a reused connection send no `PING`, and
/// open no connection after the first.
#[test]
fn cycles_on_a_reused_connection_send_no_ping_and_open_no_new_connection() {
    let server = RedisServer::start();
    let locker = Locker::connect(server.url().as_str(), config("no-ping")).unwrap();
    cycle(&locker, "warm");
    server.reset_stats();
    let before = connections_received(&server);
    for i in 0..20 {
        cycle(&locker, &format!("k{}", i % 3));
    }
    // The helper's own connection for this `INFO` is the only new one.
    assert_eq!(connections_received(&server), before + 1);
    let stats = server.commandstats();
    assert_eq!(calls(&stats, "ping"), 0, "{stats:?}");
    assert!(calls(&stats, "evalsha") >= 60, "{stats:?}");
    locker.shutdown().unwrap();
}

/// `CLIENT KILL` of the idle pooled connection: the next request goes out
/// on a fresh connection and succeeds (no error, no unknown outcome),
/// still without a `PING`.
#[test]
fn a_request_after_client_kill_of_the_idle_connection_succeeds_on_a_fresh_one() {
    let server = RedisServer::start();
    let locker = Locker::connect(server.url().as_str(), config("kill")).unwrap();
    cycle(&locker, "k");
    server.reset_stats();
    for round in 0..3 {
        assert!(
            server.client_kill_type("normal") >= 1,
            "round {round}: the pooled connection was killed"
        );
        cycle(&locker, "k");
    }
    let stats = server.commandstats();
    assert_eq!(calls(&stats, "ping"), 0, "{stats:?}");
    locker.shutdown().unwrap();
}

/// A restart on the same port (every connection closed, the scripts
/// gone): the next request connects anew and succeeds.
#[test]
fn a_request_after_a_restart_on_the_same_port_succeeds_on_a_fresh_connection() {
    let server = RedisServer::start();
    let locker = Locker::connect(server.url().as_str(), config("restart")).unwrap();
    cycle(&locker, "k");
    for _ in 0..2 {
        server.restart();
        // The helper's own `PING`s waited for the server to come up.
        server.reset_stats();
        cycle(&locker, "k");
        assert_eq!(calls(&server.commandstats(), "ping"), 0);
    }
    locker.shutdown().unwrap();
}

/// The shutdown's pipelined releases on a connection the server closed
/// while idle go out on a fresh one: every lock is released.
#[test]
fn shutdown_after_client_kill_releases_every_lease_on_a_fresh_connection() {
    let server = RedisServer::start();
    let ns = config("shutdown-kill").namespace().to_owned();
    let locker = Locker::connect(server.url().as_str(), config("shutdown-kill")).unwrap();
    let leases: Vec<_> = (0..3)
        .map(|i| locker.acquire(&format!("k{i}")).expect("acquire"))
        .collect();
    assert_eq!(server.keys(&format!("{ns}:lock:*")).len(), 3);
    server.reset_stats();
    assert!(server.client_kill_type("normal") >= 1);
    locker.shutdown().expect("every release confirmed");
    assert!(server.keys(&format!("{ns}:lock:*")).is_empty());
    assert_eq!(calls(&server.commandstats(), "ping"), 0);
    drop(leases);
}

/// An ACL user's credentials and the URL's database are sent as the redis
/// crate sends them, over RESP2 (`AUTH user pass`, `SELECT`) and RESP3
/// (`HELLO 3 AUTH`), on the first connection and on a fresh one after
/// `CLIENT KILL`.
#[test]
fn an_acl_user_and_a_database_are_honoured_over_resp2_and_resp3() {
    let server = RedisServer::start();
    server.query(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg("on")
            .arg(">app-pass")
            .arg("~*")
            .arg("&*")
            .arg("+@all"),
    );
    for (protocol, resp) in [("resp2", "resp=2"), ("resp3", "resp=3")] {
        let url = format!(
            "redis://app:app-pass@127.0.0.1:{}/5?protocol={protocol}",
            server.port()
        );
        let ns = format!("acl-{protocol}");
        let locker = Locker::connect(url.as_str(), config(&ns)).unwrap();
        for round in 0..2 {
            let lease = locker.acquire("k").expect("acquire");
            let mut db5 = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let in_db5: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{}:lock:*", config(&ns).namespace()))
                .query(&mut db5)
                .unwrap();
            assert_eq!(in_db5.len(), 1, "{protocol} round {round}: held in db 5");
            let ours = server
                .client_list()
                .into_iter()
                .filter(|l| l.contains(" user=app ") && l.contains(" db=5 "))
                .filter(|l| l.contains(" cmd=eval"))
                .collect::<Vec<_>>();
            assert!(
                ours.iter().any(|l| l.contains(resp)),
                "{protocol}: the locker's connection as app on db 5: {ours:?}"
            );
            assert_eq!(lease.release().unwrap(), ReleaseOutcome::Released);
            assert!(server.client_kill_type("normal") >= 1);
        }
        locker.shutdown().unwrap();
    }
    assert!(server.keys("*").is_empty(), "nothing written to db 0");
}

/// Over a unix socket: it works, sends no `PING`, and a connection the
/// server closed while idle is seen so (`stats().connected`) and replaced
/// before the next request.
#[test]
fn over_a_unix_socket_it_works_and_replaces_a_killed_connection() {
    let socket = std::env::temp_dir().join(format!("redlease-wire-{}.sock", std::process::id()));
    let path = socket.to_string_lossy().into_owned();
    let server = RedisServer::builder()
        .args(["--unixsocket", path.as_str(), "--unixsocketperm", "700"])
        .start();
    let url = format!("redis+unix://{path}?db=0");
    let locker = Locker::connect(url.as_str(), config("unix")).unwrap();
    cycle(&locker, "k");
    assert!(locker.stats().connected);
    server.reset_stats();
    assert!(server.client_kill_type("normal") >= 1);
    // Seen while idle, without a request.
    wait_until(BOUND, "the locker sees the close", || {
        !locker.stats().connected
    });
    cycle(&locker, "k");
    cycle(&locker, "k");
    let stats = server.commandstats();
    assert_eq!(calls(&stats, "ping"), 0, "{stats:?}");
    assert!(calls(&stats, "evalsha") >= 6, "{stats:?}");
    locker.shutdown().unwrap();
    let _ = std::fs::remove_file(&socket);
}
