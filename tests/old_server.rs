//! A server older than Redis 7.0 is refused at connect, by both front ends,
//! with an error that names the version needed and the version found, and
//! nothing is written to it.
//!
//! The old server is the `redis-server` binary `REDLEASE_TEST_OLD_REDIS`
//! names (`.ci/run` unpacks Redis 6.0.9 from the `redis-server` package on
//! PyPI); without it the test says so and passes.

use redlease::testing::TestServer;
use redlease::Config;

fn old_server() -> Option<TestServer> {
    let Some(binary) = std::env::var_os("REDLEASE_TEST_OLD_REDIS") else {
        eprintln!("skipped: REDLEASE_TEST_OLD_REDIS names no redis-server older than 7.0");
        return None;
    };
    Some(TestServer::start_with(binary).unwrap_or_else(|e| panic!("the old server: {e}")))
}

fn assert_refused(e: &redlease::Error) {
    assert_eq!(e.code(), "INVALID_CONFIG", "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("the server is Redis 6.0;") && text.contains("Redis 7.0 or newer"),
        "{text}"
    );
}

fn keys(server: &TestServer) -> Vec<String> {
    let client = redis::Client::open(server.url()).unwrap();
    redis::cmd("KEYS")
        .arg("*")
        .query(&mut client.get_connection().unwrap())
        .unwrap()
}

#[test]
fn a_server_older_than_seven_is_refused_at_connect_by_name() {
    let Some(server) = old_server() else { return };
    let e = redlease::blocking::Locker::connect(server.url(), Config::new("old"))
        .expect_err("a blocking locker on Redis 6.0");
    assert_refused(&e);
    let e = futures::executor::block_on(redlease::aio::Locker::connect(
        server.url(),
        Config::new("old"),
    ))
    .expect_err("an async locker on Redis 6.0");
    assert_refused(&e);
    assert_eq!(keys(&server), Vec::<String>::new(), "nothing written");
}
