//! TLS (SPEC §14, feature `tls-rustls`), on both front ends, against a real
//! `redis-server` listening with TLS (`RedisServer::builder().tls()`, a CA
//! and a server certificate made at test time): leases over `rediss://`
//! with the CA given through `redis::Client::build_with_tls`, a waiter
//! woken by a release notification over TLS (the subscriber thread's
//! connections keep the TLS parameters), and a client that does not trust
//! the CA failing with "TLS handshake failed".
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

use behaviour::common::{config, granted, leased, namespace, spawn, wait_for_stats, BOUND};
use behaviour::front::{Async, Front};
use behaviour::Blocking;
use support::RedisServer;

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
        server.keys(&format!("{ns}*")).len(),
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

macro_rules! suite {
    ($module:ident, $front:ty) => {
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
        }
    };
}

suite!(blocking, crate::Blocking);
suite!(aio, crate::Async);
