//! Bad input: keys, configs, options and URLs out of bounds are refused
//! with `INVALID_KEY` / `INVALID_CONFIG`, before anything reaches Redis.

use std::time::Duration;

use redlease::{AcquireOptions, Config, Error};

use super::common::{config, connect, granted, namespace, no_wait, refused, stored_names};
use super::front::Front;
use crate::support::RedisServer;

/// Empty keys and keys over `max_key_bytes` (UTF-8 bytes, not chars) are
/// refused with `INVALID_KEY`; keys at the limit are fine.
pub(crate) fn bad_keys_are_refused_with_invalid_key<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("keys");
    let locker: F = connect(&server, config(&ns));

    for key in [String::new(), "k".repeat(1025), "é".repeat(513)] {
        for options in [AcquireOptions::new(), no_wait()] {
            let e = refused(locker.acquire_with(&key, options), "bad key");
            assert!(
                matches!(e, Error::InvalidKey { .. }),
                "{} bytes: {e:?}",
                key.len()
            );
            assert_eq!(e.code(), "INVALID_KEY");
        }
    }
    assert!(
        stored_names(&server, &ns).is_empty(),
        "nothing reached Redis"
    );
    for key in ["k".repeat(1024), "é".repeat(512)] {
        F::release(granted(
            locker.acquire_with(&key, no_wait()),
            "1024-byte key",
        ))
        .unwrap();
    }

    let small: F = connect(&server, config(&ns).max_key_bytes(8));
    assert_eq!(
        refused(small.acquire("123456789"), "9 bytes").code(),
        "INVALID_KEY"
    );
    F::release(granted(small.acquire("12345678"), "8 bytes")).unwrap();
}

/// The option an `InvalidConfig` names; panics on anything else.
pub(crate) fn invalid_option(e: &Error) -> &'static str {
    match e {
        Error::InvalidConfig { option, .. } => option,
        other => panic!("expected INVALID_CONFIG, got {other:?}"),
    }
}

/// Namespaces with `{` or `}` (or empty), zero or oversized leases in the
/// config or per acquire, and zero intervals are refused with
/// `INVALID_CONFIG` naming the option.
pub(crate) fn bad_configs_and_options_are_refused_with_invalid_config<F: Front>() {
    let server = RedisServer::start();
    let url = server.url();
    let ns = namespace("configs");
    let too_long = Duration::from_millis(1_000_000_000_000_000);
    let cases: Vec<(Config, &str)> = vec![
        (config("a{b"), "namespace"),
        (config("a}b"), "namespace"),
        (config(""), "namespace"),
        (config(&ns).lease(Duration::ZERO), "lease"),
        (config(&ns).lease(too_long), "lease"),
        (config(&ns).poll_interval(Duration::ZERO), "poll_interval"),
        (
            config(&ns).notify_poll_interval(Duration::ZERO),
            "notify_poll_interval",
        ),
        (
            config(&ns).command_timeout(Duration::ZERO),
            "command_timeout",
        ),
        (config(&ns).max_waiters(0), "max_waiters"),
    ];
    for (config, option) in cases {
        let e = refused(F::connect(&url, config), option);
        assert_eq!(e.code(), "INVALID_CONFIG");
        assert_eq!(invalid_option(&e), option, "{e:?}");
    }

    let locker: F = connect(&server, config(&ns));
    for lease in [Duration::ZERO, Duration::from_micros(999), too_long] {
        let e = refused(
            locker.acquire_with("k", AcquireOptions::new().lease(lease)),
            "lease option",
        );
        assert_eq!(invalid_option(&e), "lease", "{lease:?}: {e:?}");
    }
    assert!(
        stored_names(&server, &ns).is_empty(),
        "nothing reached Redis"
    );
}

/// A namespace with a glob character (`*`, `?`, `[`, `]`, `\`) is refused
/// with `INVALID_CONFIG` naming the rule, not the namespace: the ACL key
/// and channel patterns README gives for it would match other namespaces'
/// names (`~a*:lock:{*` matches every namespace's locks that start with
/// `a`). Nothing reaches Redis.
pub(crate) fn namespaces_with_glob_characters_are_refused<F: Front>() {
    let server = RedisServer::start();
    let url = server.url();
    for ns in ["svc*", "s?c", "svc[12]", "svc]", "svc\\x"] {
        let e = refused(F::connect(&url, config(ns)), ns);
        assert_eq!(invalid_option(&e), "namespace", "{ns}: {e:?}");
        let text = e.to_string();
        assert!(text.contains("glob"), "{ns}: {text}");
        assert!(
            !text.contains(ns),
            "the message shows the namespace: {text}"
        );
        assert!(server.keys("*").is_empty(), "{ns} reached Redis");
    }
    // Other punctuation is fine: `:` and `-` are in the patterns already.
    let ok = namespace("glob-free.v2:a_b");
    let locker: F = connect(&server, config(&ok));
    F::release(granted(locker.acquire_with("k", no_wait()), "a lease")).unwrap();
}

/// Malformed URLs are refused with `INVALID_CONFIG`, without echoing them.
pub(crate) fn malformed_urls_are_refused_with_invalid_config<F: Front>() {
    let ns = namespace("urls");
    for url in [
        "",
        "not a url",
        "http://127.0.0.1:1/0",
        "redis://user:hunter2@127.0.0.1:notaport/0",
    ] {
        let e = refused(F::connect(url, config(&ns)), url);
        assert_eq!(e.code(), "INVALID_CONFIG", "{url:?}: {e:?}");
        for text in [e.to_string(), format!("{e:?}")] {
            assert!(
                !text.contains("hunter2") && !text.contains("notaport"),
                "{text}"
            );
        }
    }
}
