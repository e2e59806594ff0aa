//! TLS (the crate docs' "Deployments", feature `tls-rustls`), on both front ends, against a real
//! `redis-server` listening with TLS (`RedisServer::builder().tls()`, a CA
//! and a server certificate made at test time): leases over `rediss://`
//! with the CA given through `redis::Client::build_with_tls`, a waiter
//! woken by a release notification over TLS (the subscriber thread's
//! connections keep the TLS parameters), and a client that does not trust
//! the CA failing with "TLS handshake failed", and a URL whose scheme does
//! not match the server's port: `rediss://` to a plain port says
//! the TLS handshake did not complete (a plain server never answers a
//! ClientHello), `redis://` to a TLS port says the server may expect TLS, at
//! connect and at a later reconnect, on one server, a cluster and through
//! Sentinel.
#![cfg(feature = "tls-rustls")]
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::sync::Arc;
use std::time::Duration;

use futures::executor::block_on;
use redlease::{Config, Error, ReleaseOutcome, RenewOutcome};

use behaviour::common::{
    config, granted, leased, namespace, spawn, stored_names, wait_for_stats, BOUND,
};
use behaviour::front::{Async, ClusterFront, Front};
use behaviour::Blocking;
use support::{RedisServer, TlsMaterial};

/// Safety polls that never fire within a test.
const SLOW_POLL: Duration = Duration::from_secs(30);

/// A front end that can be built over an existing `redis::Client`.
trait TlsFront: Front + Sized {
    /// `Locker::new(client, config)`.
    fn new(client: redis::Client, config: Config) -> Result<Self, Error>;
}

impl TlsFront for Blocking {
    fn new(client: redis::Client, config: Config) -> Result<Self, Error> {
        redlease::blocking::Locker::new(client, config)
    }
}

impl TlsFront for Async {
    fn new(client: redis::Client, config: Config) -> Result<Self, Error> {
        block_on(redlease::aio::Locker::new(client, config)).map(Async::from_locker)
    }
}

/// A client for the server's `rediss://` URL trusting the server's CA.
fn trusting_client(server: &RedisServer) -> redis::Client {
    redis::Client::build_with_tls(
        server.tls_url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(server.ca_pem().into_bytes()),
        },
    )
    .expect("build_with_tls with the test CA")
}

fn connect_tls<F: TlsFront>(server: &RedisServer, config: Config) -> F {
    F::new(trusting_client(server), config)
        .unwrap_or_else(|e| panic!("connect over TLS: {} ({e})", e.code()))
}

/// Acquire, renew and release over TLS with the CA from `build_with_tls`;
/// the lock really is in the server (seen through its plain port).
fn acquire_renew_release_over_tls<F: TlsFront>() {
    let server = RedisServer::builder().tls().start();
    let ns = namespace("tls");
    let locker: F = connect_tls(&server, config(&ns));
    let lease = granted(locker.acquire("k"), "acquire over TLS");
    assert!(F::is_valid(&lease));
    assert_eq!(
        stored_names(&server, &ns).len(),
        2,
        "the lock and its fence counter are in redis"
    );
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    let first = F::fence(&lease);
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let again = granted(locker.acquire("k"), "acquire again over TLS");
    assert!(F::fence(&again) > first);
    assert_eq!(F::release(again).unwrap(), ReleaseOutcome::Released);
    locker.shutdown().unwrap();
}

/// A waiter of a locker with 30 s safety polls is woken by the release
/// notification: the subscriber thread connected over TLS.
fn a_waiter_is_woken_by_a_release_notification_over_tls<F: TlsFront>() {
    let server = RedisServer::builder().tls().start();
    let ns = namespace("tls-notify");
    let waiters = Arc::new(connect_tls::<F>(
        &server,
        config(&ns)
            .poll_interval(SLOW_POLL)
            .notify_poll_interval(SLOW_POLL)
            .wait(Duration::from_secs(20)),
    ));
    let holder: F = connect_tls(&server, config(&ns));
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(60))),
        "holder",
    );
    let held_fence = F::fence(&held);
    let w = waiters.clone();
    let waiter = spawn("waiter", move || {
        let lease = granted(w.acquire("k"), "waiter");
        (F::fence(&lease), F::release(lease))
    });
    wait_for_stats(&*waiters, "the waiter subscribed and checked again", |s| {
        s.subscribed && s.busy_replies >= 2
    });
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let (fence, released) = waiter.join_within(BOUND);
    assert!(fence > held_fence);
    assert_eq!(released.unwrap(), ReleaseOutcome::Released);
    assert!(
        waiters.stats().notifications >= 1,
        "the hand-over came through a notification: {:?}",
        waiters.stats()
    );
}

/// `rediss://` with the platform roots only (which do not hold the test
/// CA): `PROVIDER_FAILED`, "TLS handshake failed", no address.
fn a_client_that_does_not_trust_the_ca_says_the_tls_handshake_failed<F: TlsFront>() {
    let server = RedisServer::builder().tls().start();
    let url = server.tls_url();
    for result in [
        F::connect(&url, Config::new(namespace("tls-untrusted"))),
        F::new(
            redis::Client::open(url.as_str()).unwrap(),
            Config::new(namespace("tls-untrusted")),
        ),
    ] {
        let e = match result {
            Ok(_) => panic!("a client without the CA must not connect"),
            Err(e) => e,
        };
        assert_eq!(e.code(), "PROVIDER_FAILED", "{e:?}");
        assert!(
            std::error::Error::source(&e).is_some(),
            "the redis error is kept"
        );
        let shown = e.to_string();
        assert!(
            shown.starts_with("could not connect to redis: TLS handshake failed: "),
            "{shown}"
        );
        assert!(
            shown.contains("UnknownIssuer"),
            "the reason is kept: {shown}"
        );
        let port = server.tls_port().to_string();
        for secret in ["127.0.0.1", "localhost", port.as_str()] {
            assert!(!shown.contains(secret), "{shown:?} names {secret:?}");
        }
    }
}

/// A `rediss://` URL with a fragment other than `#insecure` is refused by
/// the redis crate: `INVALID_CONFIG`, before any connection.
fn a_rediss_url_with_an_unknown_fragment_is_invalid_config<F: TlsFront>() {
    let server = RedisServer::builder().tls().start();
    let url = format!("{}#nope", server.tls_url());
    match F::connect(&url, Config::new(namespace("tls-fragment"))) {
        Ok(_) => panic!("an unknown URL fragment must be refused"),
        Err(e) => assert_eq!(e.code(), "INVALID_CONFIG", "{e:?}"),
    }
}

/// A short command timeout: a plain server never answers a TLS ClientHello,
/// so with `rediss://` the handshake can only end there.
const QUICK: Duration = Duration::from_millis(500);

/// What a `rediss://` URL to a plain port says.
const TLS_STALLED: &str = "the TLS handshake did not complete: is the server speaking TLS?";
/// What a `redis://` URL to a TLS port says.
const MAY_EXPECT_TLS: &str = "the server closed the connection: it may expect TLS (rediss://)";

fn quick(topic: &str) -> Config {
    Config::new(namespace(topic))
        .command_timeout(QUICK)
        .wait(Duration::ZERO)
}

/// A `PROVIDER_FAILED` error whose `Display` (and that of its redis
/// source) names no address or port, and whose source is kept. Returns the
/// `Display` and the source's.
fn provider_failed(e: &Error, ports: &[u16]) -> (String, String) {
    assert_eq!(e.code(), "PROVIDER_FAILED", "{e:?}");
    assert!(!e.is_outcome_unknown(), "{e:?}");
    let source = std::error::Error::source(e).expect("the redis error is kept");
    let (shown, debug, source) = (e.to_string(), format!("{e:?}"), source.to_string());
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    for text in [&shown, &debug, &source] {
        for secret in ["127.0.0.1", "localhost"]
            .into_iter()
            .chain(ports.iter().map(String::as_str))
        {
            assert!(!text.contains(secret), "{text:?} names {secret:?}");
        }
    }
    (shown, source)
}

fn connect_failure<F>(result: Result<F, Error>) -> Error {
    match result {
        Ok(_) => panic!("connecting must fail"),
        Err(e) => e,
    }
}

/// `rediss://` to a plain Redis port: the server waits for a line that a
/// ClientHello never ends, so the handshake ends at the command timeout,
/// and the error says the TLS handshake did not complete, not "connection
/// timed out"; by URL and over a client built with a CA.
fn a_rediss_url_to_a_plain_port_says_the_tls_handshake_did_not_complete<F: TlsFront>() {
    let server = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}/0", server.port());
    let client = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(TlsMaterial::generate().ca_pem().into_bytes()),
        },
    )
    .unwrap();
    for result in [
        F::connect(&url, quick("tls-to-plain")),
        F::new(client, quick("tls-to-plain")),
    ] {
        let e = connect_failure(result);
        let (shown, _) = provider_failed(&e, &[server.port()]);
        assert_eq!(shown, format!("could not connect to redis: {TLS_STALLED}"));
    }
}

/// `redis://` to a TLS port: the server resets the connection at the
/// first plain bytes, and the error says it may expect TLS.
fn a_redis_url_to_a_tls_port_says_the_server_may_expect_tls<F: TlsFront>() {
    let server = RedisServer::builder().tls().start();
    let url = format!("redis://127.0.0.1:{}/0", server.tls_port());
    let e = connect_failure(F::connect(&url, quick("plain-to-tls")));
    let (shown, _) = provider_failed(&e, &[server.tls_port(), server.port()]);
    assert_eq!(
        shown,
        format!("could not connect to redis: {MAY_EXPECT_TLS}")
    );
}

/// Moves a TLS server's listeners (on `admin`, a connection to its plain
/// port, which survives the move) and drops every other client, so that a
/// locker's next command connects anew.
fn move_listeners(admin: &mut redis::Connection, moves: &[(&str, u16)]) {
    for (option, port) in moves {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(*option)
            .arg(*port)
            .query::<()>(admin)
            .unwrap_or_else(|e| panic!("CONFIG SET {option}: {e}"));
    }
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query::<i64>(admin)
        .unwrap();
}

/// The error of an acquire after `move_listeners`. The first may still go
/// out on the killed connection before its driver saw the close (then its
/// outcome is unknown); a bounded few later ones must reconnect.
fn reconnect_error<F: Front>(locker: &F) -> Error {
    for _ in 0..3 {
        match locker.acquire("k") {
            Ok(_) => panic!("the reconnect must fail"),
            Err(e) if e.is_outcome_unknown() => continue,
            Err(e) => return e,
        }
    }
    panic!("three acquires in a row were sent on a dead connection")
}

/// A locker connected over TLS whose server then serves that port without
/// TLS: the next acquire reconnects, and its error's source says the TLS
/// handshake did not complete.
fn a_reconnect_over_tls_to_a_port_now_plain_says_so<F: TlsFront>() {
    let server = RedisServer::builder().tls().start();
    let (plain, tls) = (server.port(), server.tls_port());
    let locker: F = connect_tls(&server, quick("tls-reconnect"));
    let lease = granted(locker.acquire("k"), "acquire over TLS");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let mut admin = server.conn();
    move_listeners(&mut admin, &[("tls-port", 0), ("port", tls)]);
    let e = reconnect_error(&locker);
    let (_, source) = provider_failed(&e, &[plain, tls]);
    assert_eq!(source, TLS_STALLED);
}

/// A locker connected without TLS whose server then serves that port with
/// TLS only: the next acquire's error source says it may expect TLS.
fn a_plain_reconnect_to_a_port_now_tls_says_so<F: TlsFront>() {
    let server = RedisServer::builder().tls().start();
    let (plain, tls) = (server.port(), server.tls_port());
    let locker = F::connect(&server.url(), quick("plain-reconnect")).unwrap();
    let lease = granted(locker.acquire("k"), "acquire without TLS");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let mut admin = server.conn();
    move_listeners(&mut admin, &[("port", 0), ("tls-port", plain)]);
    let e = reconnect_error(&locker);
    let (_, source) = provider_failed(&e, &[plain, tls]);
    assert_eq!(source, MAY_EXPECT_TLS);
}

/// `connect_cluster` with a scheme that does not match the node's port
/// fails the same way (the first node is a plain or TLS server).
fn a_cluster_url_with_the_wrong_scheme_says_so<F: TlsFront + ClusterFront>() {
    let server = RedisServer::builder().tls().start();
    let (plain, tls) = (server.port(), server.tls_port());
    let nodes = [format!("rediss://127.0.0.1:{plain}/")];
    let e = connect_failure(F::connect_cluster(&nodes, quick("cluster-tls-to-plain")));
    let (shown, _) = provider_failed(&e, &[plain, tls]);
    assert_eq!(shown, format!("could not connect to redis: {TLS_STALLED}"));
    let nodes = [format!("redis://127.0.0.1:{tls}/")];
    let e = connect_failure(F::connect_cluster(&nodes, quick("cluster-plain-to-tls")));
    let (shown, _) = provider_failed(&e, &[plain, tls]);
    assert_eq!(
        shown,
        format!("could not connect to redis: {MAY_EXPECT_TLS}")
    );
}

/// `connect_sentinel` with a `rediss://` sentinel URL to a plain port:
/// the sentinel lookup ends at the command timeout, saying why.
fn a_rediss_sentinel_url_to_a_plain_port_says_so<F: TlsFront>(
    connect: impl Fn(&str, Config) -> Result<F, Error>,
) {
    let server = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}/", server.port());
    let e = connect_failure(connect(&url, quick("sentinel-tls-to-plain")));
    let (shown, _) = provider_failed(&e, &[server.port()]);
    assert_eq!(shown, format!("could not connect to redis: {TLS_STALLED}"));
}

fn blocking_sentinel(url: &str, config: Config) -> Result<Blocking, Error> {
    redlease::blocking::Locker::connect_sentinel([url], "mymaster", config)
}

fn aio_sentinel(url: &str, config: Config) -> Result<Async, Error> {
    block_on(redlease::aio::Locker::connect_sentinel(
        [url],
        "mymaster",
        config,
    ))
    .map(Async::from_locker)
}

macro_rules! suite {
    ($module:ident, $front:ty, $sentinel:expr) => {
        mod $module {
            #[test]
            fn acquire_renew_release_over_tls() {
                super::acquire_renew_release_over_tls::<$front>();
            }

            #[test]
            fn a_waiter_is_woken_by_a_release_notification_over_tls() {
                super::a_waiter_is_woken_by_a_release_notification_over_tls::<$front>();
            }

            #[test]
            fn a_client_that_does_not_trust_the_ca_says_the_tls_handshake_failed() {
                super::a_client_that_does_not_trust_the_ca_says_the_tls_handshake_failed::<$front>(
                );
            }

            #[test]
            fn a_rediss_url_with_an_unknown_fragment_is_invalid_config() {
                super::a_rediss_url_with_an_unknown_fragment_is_invalid_config::<$front>();
            }

            #[test]
            fn a_rediss_url_to_a_plain_port_says_the_tls_handshake_did_not_complete() {
                super::a_rediss_url_to_a_plain_port_says_the_tls_handshake_did_not_complete::<
                    $front,
                >();
            }

            #[test]
            fn a_redis_url_to_a_tls_port_says_the_server_may_expect_tls() {
                super::a_redis_url_to_a_tls_port_says_the_server_may_expect_tls::<$front>();
            }

            #[test]
            fn a_reconnect_over_tls_to_a_port_now_plain_says_so() {
                super::a_reconnect_over_tls_to_a_port_now_plain_says_so::<$front>();
            }

            #[test]
            fn a_plain_reconnect_to_a_port_now_tls_says_so() {
                super::a_plain_reconnect_to_a_port_now_tls_says_so::<$front>();
            }

            #[test]
            fn a_cluster_url_with_the_wrong_scheme_says_so() {
                super::a_cluster_url_with_the_wrong_scheme_says_so::<$front>();
            }

            #[test]
            fn a_rediss_sentinel_url_to_a_plain_port_says_so() {
                super::a_rediss_sentinel_url_to_a_plain_port_says_so::<$front>($sentinel);
            }
        }
    };
}

suite!(blocking, crate::Blocking, crate::blocking_sentinel);
suite!(aio, crate::Async, crate::aio_sentinel);
