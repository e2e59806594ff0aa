//! `redlease::testing` (feature `test-server`): the throwaway
//! `redis-server` a program's own tests can start.
#![allow(clippy::disallowed_methods)]

use std::net::{Ipv4Addr, TcpStream};

use redlease::testing::{StartError, TestServer};
use redlease::{blocking::Locker, Config, ReleaseOutcome};

/// A started server serves a locker; dropped, it no longer listens; a
/// binary that does not exist is `StartError::NotFound`, not a panic.
#[test]
fn a_test_server_serves_a_locker_until_dropped_and_a_missing_binary_is_an_error() {
    let server = TestServer::start().unwrap_or_else(|e| panic!("start: {e}"));
    assert!(server.url().starts_with("redis://127.0.0.1:"));
    assert_eq!(format!("{server:?}"), "TestServer { .. }");
    let locker = Locker::connect(server.url(), Config::new("testing")).unwrap();
    let lease = locker.acquire("k").unwrap();
    assert_eq!(lease.release().unwrap(), ReleaseOutcome::Released);
    locker.shutdown().unwrap();

    let port = server.port();
    drop(server);
    assert!(
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err(),
        "the server still listens after the drop"
    );

    match TestServer::start_with("/nonexistent/redis-server") {
        Err(e @ StartError::NotFound) => assert!(e.to_string().contains("not found"), "{e}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
}
