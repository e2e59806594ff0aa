//! Secrets: owner tokens, keys and server addresses never appear in a
//! lease's `Debug`, in an error's `Display` or `Debug`, or in a log line.

use std::sync::Arc;
use std::time::Duration;

use redlease::Error;

use super::common::{
    config, connect, granted, key_sha, lock_name, namespace, no_wait, refused, spawn,
    wait_for_stats, waiting, BOUND,
};
use super::faults::closed_port;
use super::front::Front;
use super::logs;
use crate::support::RedisServer;

struct Secrets(Vec<String>);

impl Secrets {
    fn check(&self, what: &str, text: &str) {
        for secret in &self.0 {
            assert!(
                !text.contains(secret.as_str()),
                "{what} shows {secret:?}: {text}"
            );
        }
    }

    fn check_error(&self, what: &str, e: &Error) {
        self.check(what, &e.to_string());
        self.check(what, &format!("{e:?}"));
        self.check(what, &format!("{e:#?}"));
    }
}

/// The `Debug` of a lease, and the `Display` and `Debug` of every error a
/// caller can provoke (busy, timeout, queue full, bad key, server error,
/// refused connection, unknown outcome, shutdown, cleanup timeout), contain
/// neither the token, the key, its digest nor the server address; neither
/// do the `redlease` log records.
pub(crate) fn leases_errors_and_logs_never_show_tokens_keys_or_addresses<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("secrets");
    let key = format!("secret-key-{ns}");
    let closed = closed_port();
    let holder: F = connect(&server, config(&ns));
    let lease = granted(holder.acquire(&key), "holder");
    let token = super::common::token_of(&server, &ns, &key);
    let secrets = Secrets(vec![
        token,
        key.clone(),
        key_sha(&key),
        lock_name(&ns, &key),
        format!("127.0.0.1:{}", server.port()),
        format!("127.0.0.1:{closed}"),
        format!(":{closed}"),
        format!(":{}/", server.port()),
    ]);
    secrets.check("lease Debug", &F::debug(&lease));

    let mut errors: Vec<(&str, Error)> = Vec::new();
    let other = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .max_waiters(1)
            .command_timeout(Duration::from_millis(200))
            .shutdown_timeout(Duration::from_millis(300)),
    ));
    errors.push(("busy", refused(other.acquire_with(&key, no_wait()), "busy")));
    errors.push((
        "wait timeout",
        refused(
            other.acquire_with(&key, waiting(Duration::from_millis(50))),
            "timeout",
        ),
    ));
    let o = other.clone();
    let (k, long) = (key.clone(), Duration::from_secs(20));
    let queued = spawn("queued waiter", move || {
        o.acquire_with(&k, waiting(long)).map(|_| ())
    });
    wait_for_stats(&*other, "one waiter", |s| s.waiters == 1);
    errors.push(("queue full", refused(other.acquire(&key), "queue full")));
    errors.push((
        "invalid key",
        refused(other.acquire(&key.repeat(100)), "long key"),
    ));

    let hash_key = format!("{key}-hash");
    server.query(
        redis::cmd("HSET")
            .arg(lock_name(&ns, &hash_key))
            .arg("f")
            .arg("v"),
    );
    let holder_errors: Vec<(&str, Error)> = vec![
        (
            "server error",
            refused(holder.acquire_with(&hash_key, no_wait()), "wrongtype"),
        ),
        (
            "refused connection",
            refused(
                F::connect(&format!("redis://127.0.0.1:{closed}/0"), config(&ns)),
                "closed port",
            ),
        ),
    ];
    errors.extend(holder_errors);

    // The waiter keeps `other`'s only slot; free it before the next ones.
    let _ = F::release(lease);
    queued
        .join_within(BOUND)
        .expect("the queued waiter got the key");
    let free_key = format!("{key}-free");
    {
        let _paused = server.pause_guard();
        errors.push((
            "outcome unknown",
            refused(other.acquire_with(&free_key, no_wait()), "paused acquire"),
        ));
    }
    let kept = granted(other.acquire(&format!("{key}-kept")), "kept lease");
    {
        let _paused = server.pause_guard();
        let o = other.clone();
        let shutdown = spawn("shutdown", move || o.shutdown()).join_within(BOUND);
        errors.push(("cleanup timeout", shutdown.expect_err("paused cleanup")));
    }
    errors.push((
        "shutting down",
        refused(other.acquire(&key), "after shutdown"),
    ));
    drop(kept);

    let codes: Vec<&str> = errors.iter().map(|(_, e)| e.code()).collect();
    assert_eq!(
        codes,
        [
            "LOCK_BUSY",
            "WAIT_TIMEOUT",
            "QUEUE_FULL",
            "INVALID_KEY",
            "PROVIDER_FAILED",
            "PROVIDER_FAILED",
            "OUTCOME_UNKNOWN",
            "CLEANUP_TIMEOUT",
            "SHUTTING_DOWN",
        ]
    );
    for (what, e) in &errors {
        secrets.check_error(what, e);
    }
    for record in logs.records() {
        secrets.check("a log record", &record.message);
    }
}
