//! Connection errors in words a person reads (the crate docs' "Deployments"), on both front ends:
//! a closed port, a host that does not resolve, a wrong password, a database
//! that does not exist and a server that does not speak Redis each say so
//! in the error's `Display`, keep the `redis::RedisError` as `source()`, and
//! name no address, user or password.
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::io::Write;
use std::net::TcpListener;

use redlease::{Config, Error};

use behaviour::common::namespace;
use behaviour::front::Front;
use support::RedisServer;

const PASSWORD: &str = "s3cret-pa55";

/// Connects and returns the error, checking what every connect error must
/// hold: `PROVIDER_FAILED`, a redis source, and no address or secret in
/// `Display` or `Debug`.
fn connect_error<F: Front>(url: &str, secrets: &[&str]) -> String {
    let e: Error = match F::connect(url, Config::new(namespace("connect"))) {
        Ok(_) => panic!("connecting to {url} must fail"),
        Err(e) => e,
    };
    assert_eq!(e.code(), "PROVIDER_FAILED", "{e:?}");
    assert!(
        std::error::Error::source(&e).is_some(),
        "the redis error is kept"
    );
    let (shown, debug) = (e.to_string(), format!("{e:?}"));
    for secret in secrets {
        assert!(!shown.contains(secret), "{shown:?} names {secret:?}");
        assert!(!debug.contains(secret), "{debug:?} names {secret:?}");
    }
    shown
}

fn a_closed_port_says_connection_refused<F: Front>() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let shown = connect_error::<F>(
        &format!("redis://127.0.0.1:{port}/0"),
        &["127.0.0.1", &port.to_string()],
    );
    assert_eq!(shown, "could not connect to redis: connection refused");
}

fn a_host_that_does_not_resolve_says_no_such_host<F: Front>() {
    let shown = connect_error::<F>(
        "redis://no-such-host.invalid:6390/0",
        &["no-such-host", "6390"],
    );
    assert_eq!(shown, "could not connect to redis: no such host");
}

fn a_wrong_password_says_authentication_failed<F: Front>() {
    let server = RedisServer::start();
    server.config_set("requirepass", PASSWORD);
    let port = server.port().to_string();
    let url = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{port}/0");
    let shown = connect_error::<F>(&url, &[PASSWORD, "127.0.0.1", &port]);
    assert_eq!(shown, "could not connect to redis: authentication failed");
    let url = format!("redis://127.0.0.1:{port}/0");
    let shown = connect_error::<F>(&url, &["127.0.0.1", &port]);
    assert_eq!(
        shown, "could not connect to redis: authentication failed",
        "no password given"
    );
}

fn a_database_that_does_not_exist_says_no_such_database<F: Front>() {
    let server = RedisServer::start();
    let port = server.port().to_string();
    let shown = connect_error::<F>(
        &format!("redis://127.0.0.1:{port}/99"),
        &["127.0.0.1", &port],
    );
    assert_eq!(shown, "could not connect to redis: no such database");
}

fn a_server_that_does_not_speak_redis_says_so<F: Front>() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        // Answer every connection like a web server would, then hang up.
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { break };
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let shown = connect_error::<F>(
        &format!("redis://127.0.0.1:{port}/0"),
        &["127.0.0.1", &port.to_string()],
    );
    assert!(
        shown == format!("could not connect to redis: not a Redis server: {MAY_EXPECT_TLS}")
            || shown
                == format!("could not connect to redis: the server closed the connection: {MAY_EXPECT_TLS}"),
        "{shown}"
    );
    drop(server);
}

/// What a plain connection says when the server hung up or answered
/// garbage at once, as a TLS port does.
const MAY_EXPECT_TLS: &str = "it may expect TLS (rediss://)";

/// A server that hangs up at once (as a TLS-only port does when it reads
/// plain bytes): "the server closed the connection: it may expect TLS".
fn a_server_that_hangs_up_at_once_says_it_may_expect_tls<F: Front>() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        for stream in listener.incoming().take(8) {
            let Ok(stream) = stream else { break };
            drop(stream);
        }
    });
    let shown = connect_error::<F>(
        &format!("redis://127.0.0.1:{port}/0"),
        &["127.0.0.1", &port.to_string()],
    );
    assert_eq!(
        shown,
        format!("could not connect to redis: the server closed the connection: {MAY_EXPECT_TLS}")
    );
    drop(server);
}

macro_rules! suite {
    ($module:ident, $front:ty) => {
        mod $module {
            #[test]
            fn a_closed_port_says_connection_refused() {
                super::a_closed_port_says_connection_refused::<$front>();
            }

            #[test]
            fn a_host_that_does_not_resolve_says_no_such_host() {
                super::a_host_that_does_not_resolve_says_no_such_host::<$front>();
            }

            #[test]
            fn a_wrong_password_says_authentication_failed() {
                super::a_wrong_password_says_authentication_failed::<$front>();
            }

            #[test]
            fn a_database_that_does_not_exist_says_no_such_database() {
                super::a_database_that_does_not_exist_says_no_such_database::<$front>();
            }

            #[test]
            fn a_server_that_does_not_speak_redis_says_so() {
                super::a_server_that_does_not_speak_redis_says_so::<$front>();
            }

            #[test]
            fn a_server_that_hangs_up_at_once_says_it_may_expect_tls() {
                super::a_server_that_hangs_up_at_once_says_it_may_expect_tls::<$front>();
            }
        }
    };
}

suite!(blocking, crate::behaviour::Blocking);
suite!(aio, crate::behaviour::Async);
