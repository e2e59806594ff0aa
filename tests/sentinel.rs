//! Both lockers through Redis Sentinel (1 primary, 1 replica, 3
//! sentinels): connect and acquire/release, then a failover (the primary
//! SIGKILLed) while a lease is held and waiters wait. The observed failover
//! time is printed (no timed assertions). Then sentinels and servers that
//! want passwords (right and wrong ones), and, with feature `tls-rustls`,
//! everything over TLS with a private CA (`SentinelOptions::certificates`).
#![allow(clippy::disallowed_methods)]
// The standalone suite's macro is not used here, only its helpers.
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use behaviour::common::{granted, leased, lock_name, namespace, spawn, waiting, BOUND};
use behaviour::front::{Async, Front};
use futures::executor::block_on;
use redlease::{Config, Error, ReleaseOutcome, RenewOutcome, SentinelOptions};
use support::sentinel::SentinelSet;

/// Generous: detection (1 s down-after) + vote + promotion, plus the TTL.
const FAILOVER_BOUND: Duration = Duration::from_secs(45);

/// A front end that can connect through Sentinel.
trait SentinelFront: Front + Sized {
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error>;
    fn connect_sentinel_with(
        urls: &[String],
        master: &str,
        node: redis::sentinel::SentinelNodeConnectionInfo,
        config: Config,
    ) -> Result<Self, Error>;
    fn connect_sentinel_with_options(
        urls: &[String],
        master: &str,
        options: SentinelOptions,
        config: Config,
    ) -> Result<Self, Error>;
}

impl SentinelFront for redlease::blocking::Locker {
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error> {
        redlease::blocking::Locker::connect_sentinel(
            urls.iter().map(String::as_str),
            master,
            config,
        )
    }

    fn connect_sentinel_with(
        urls: &[String],
        master: &str,
        node: redis::sentinel::SentinelNodeConnectionInfo,
        config: Config,
    ) -> Result<Self, Error> {
        redlease::blocking::Locker::connect_sentinel_with(
            urls.iter().map(String::as_str),
            master,
            Some(node),
            config,
        )
    }

    fn connect_sentinel_with_options(
        urls: &[String],
        master: &str,
        options: SentinelOptions,
        config: Config,
    ) -> Result<Self, Error> {
        redlease::blocking::Locker::connect_sentinel_with_options(
            urls.iter().map(String::as_str),
            master,
            options,
            config,
        )
    }
}

impl SentinelFront for Async {
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error> {
        block_on(redlease::aio::Locker::connect_sentinel(
            urls.iter().map(String::as_str),
            master,
            config,
        ))
        .map(Async::from_locker)
    }

    fn connect_sentinel_with(
        urls: &[String],
        master: &str,
        node: redis::sentinel::SentinelNodeConnectionInfo,
        config: Config,
    ) -> Result<Self, Error> {
        block_on(redlease::aio::Locker::connect_sentinel_with(
            urls.iter().map(String::as_str),
            master,
            Some(node),
            config,
        ))
        .map(Async::from_locker)
    }

    fn connect_sentinel_with_options(
        urls: &[String],
        master: &str,
        options: SentinelOptions,
        config: Config,
    ) -> Result<Self, Error> {
        block_on(redlease::aio::Locker::connect_sentinel_with_options(
            urls.iter().map(String::as_str),
            master,
            options,
            config,
        ))
        .map(Async::from_locker)
    }
}

fn config(ns: &str) -> Config {
    Config::new(ns)
        .lease(Duration::from_secs(3))
        .wait(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(1))
        .shutdown_timeout(Duration::from_secs(3))
}

fn connect<F: SentinelFront>(set: &SentinelSet, config: Config) -> Arc<F> {
    Arc::new(
        F::connect_sentinel(&set.sentinel_urls(), set.master_name(), config)
            .unwrap_or_else(|e| panic!("connect through sentinel: {e}")),
    )
}

/// Lease keys (not fence counters) of `ns` left on the server at `port`.
fn lease_keys(set: &SentinelSet, port: u16, ns: &str) -> Vec<String> {
    set.server(port)
        .keys(&format!("{ns}:lock:*"))
        .into_iter()
        .collect()
}

fn acquire_release<F: SentinelFront>() {
    let set = SentinelSet::start();
    let ns = namespace("sentinel-basic");
    let locker = connect::<F>(&set, config(&ns));
    let first = granted(locker.acquire("job"), "first acquire");
    let primary = set.primary_port();
    assert!(
        set.server(primary).keys(&lock_name(&ns, "job")).len() == 1,
        "the lease is on the primary the sentinels name"
    );
    let fence = F::fence(&first);
    F::release(first).expect("release");
    let second = granted(locker.acquire("job"), "second acquire");
    assert!(F::fence(&second) > fence, "fences increase");
    F::release(second).expect("release");
    locker.shutdown().expect("shutdown");
    assert!(lease_keys(&set, primary, &ns).is_empty(), "no lease left");
}

fn failover_while_waiting<F: SentinelFront>() {
    let set = SentinelSet::start();
    let ns = namespace("sentinel-failover");
    let holder = connect::<F>(&set, config(&ns));
    let waiters = connect::<F>(&set, config(&ns));
    let held = granted(holder.acquire("job"), "holder's acquire");
    let held_fence = F::fence(&held);
    let old = set.primary_port();
    // Let the lease reach the replica, so that the new primary still sees
    // it held (the waiters then get it when its TTL runs out there).
    let _ = set.server(old).query(redis::cmd("WAIT").arg(1).arg(1000));

    let spawn_waiter = |name: &str, hold: Duration| {
        let waiters = waiters.clone();
        spawn(name, move || {
            let lease = waiters.acquire_with("job", waiting(Duration::from_secs(30)))?;
            let fence = F::fence(&lease);
            let at = Instant::now();
            std::thread::sleep(hold);
            F::release(lease)?;
            Ok::<_, Error>((fence, at))
        })
    };
    let first = spawn_waiter("waiter-1", Duration::from_millis(200));
    let second = spawn_waiter("waiter-2", Duration::ZERO);
    // Both waiters are in line before the primary goes.
    support::wait_until(BOUND, "two waiters in line", || {
        waiters.stats().waiters >= 2
    });

    let killed_at = Instant::now();
    let killed = set.kill_primary();
    let new = set.wait_failover(killed, FAILOVER_BOUND);
    let promoted = killed_at.elapsed();

    let (fence_1, at_1) = first
        .join_within(FAILOVER_BOUND)
        .expect("waiter 1 acquires after the failover");
    let (fence_2, at_2) = second
        .join_within(FAILOVER_BOUND)
        .expect("waiter 2 acquires after the failover (none stranded)");
    eprintln!(
        "sentinel failover: new primary named {promoted:?} after the kill, first waiter \
         granted {:?} after it; fences: held {held_fence}, then {fence_1} and {fence_2}",
        at_1.min(at_2).saturating_duration_since(killed_at)
    );
    assert!(
        fence_1 > held_fence && fence_2 > held_fence,
        "fences after failover are larger"
    );
    assert_ne!(fence_1, fence_2, "each grant has its own fence");

    // Expired, Conflict or an error: never Renewed.
    let renewed = F::renew(&held);
    assert!(
        !matches!(renewed, Ok(RenewOutcome::Renewed)),
        "the old holder renewed after losing the lease"
    );
    holder.shutdown().ok();
    waiters.shutdown().expect("waiters' shutdown");
    assert!(
        lease_keys(&set, new, &ns).is_empty(),
        "no lease left on the new primary"
    );
}

/// A manual failover: the old primary keeps running as a replica and
/// answers the locker's open connections with `READONLY`; the locker drops
/// them, asks Sentinel again and acquires on the new primary.
fn demoted_primary_is_left<F: SentinelFront>() {
    let set = SentinelSet::start();
    let ns = namespace("sentinel-demoted");
    let locker = connect::<F>(&set, config(&ns));
    // Leaves an open connection to the current primary.
    let lease = granted(locker.acquire("job"), "acquire before the failover");
    let before = F::fence(&lease);
    F::release(lease).expect("release");
    let started = Instant::now();
    let old = set.manual_failover();
    let new = set.wait_failover(old, FAILOVER_BOUND);
    support::wait_until(FAILOVER_BOUND, "the old primary runs as a replica", || {
        set.role(old).as_deref() == Some("slave")
    });
    eprintln!("sentinel manual failover took {:?}", started.elapsed());
    let lease = granted(
        locker.acquire_with("job", waiting(Duration::from_secs(20))),
        "acquire after the failover",
    );
    assert!(F::fence(&lease) > before, "fence after failover is larger");
    assert_eq!(
        set.server(new).keys(&lock_name(&ns, "job")).len(),
        1,
        "the lease is on the new primary"
    );
    F::release(lease).expect("release");
    locker.shutdown().expect("shutdown");
    assert!(lease_keys(&set, new, &ns).is_empty(), "no lease left");
}

/// The locker's open connection goes to a server that turned replica
/// (roles swapped by hand; the sentinels told to monitor the new primary):
/// its `READONLY` reply makes the locker drop the connection (not reuse
/// it), ask Sentinel again and acquire on the new primary.
fn readonly_connection_is_dropped<F: SentinelFront>() {
    let set = SentinelSet::start();
    let ns = namespace("sentinel-readonly");
    let locker = connect::<F>(&set, config(&ns));
    let lease = granted(locker.acquire("job"), "acquire before the swap");
    let before = F::fence(&lease);
    F::release(lease).expect("release");
    let (old, new) = set.swap_roles_by_hand();
    assert!(
        set.normal_clients(old) >= 1,
        "the locker's connection to the old primary is still open"
    );
    let lease = granted(
        locker.acquire_with("job", waiting(Duration::from_secs(20))),
        "acquire after the swap",
    );
    assert!(F::fence(&lease) > before, "fences increase");
    assert_eq!(
        set.server(new).keys(&lock_name(&ns, "job")).len(),
        1,
        "the lease is on the new primary"
    );
    support::wait_until(BOUND, "no locker connection left on the replica", || {
        set.normal_clients(old) == 0
    });
    F::release(lease).expect("release");
    locker.shutdown().expect("shutdown");
    assert!(lease_keys(&set, new, &ns).is_empty(), "no lease left");
}

/// A master name no sentinel monitors fails at connect, naming no
/// address; no sentinel at all is a config error.
fn unknown_master_fails_at_connect<F: SentinelFront>() {
    let set = SentinelSet::start();
    let ns = namespace("sentinel-unknown");
    let e = match F::connect_sentinel(&set.sentinel_urls(), "no-such-master", config(&ns)) {
        Ok(_) => panic!("connected to a master no sentinel monitors"),
        Err(e) => e,
    };
    assert_eq!(e.code(), "PROVIDER_FAILED", "{e}");
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains("127.0.0.1"), "no address: {shown}");
    let e = match F::connect_sentinel(&[], set.master_name(), config(&ns)) {
        Ok(_) => panic!("connected through no sentinel"),
        Err(e) => e,
    };
    assert_eq!(e.code(), "INVALID_CONFIG", "{e}");
}

const SENTINEL_PASSWORD: &str = "sentinel-secret-3f9a";
const PRIMARY_PASSWORD: &str = "primary-secret-7c21";

/// Acquire twice (fences increase) and release on a locker; the lease is
/// on the primary the sentinels name.
fn leases_work<F: SentinelFront>(set: &SentinelSet, locker: &F, ns: &str) {
    let first = granted(locker.acquire("job"), "first acquire");
    let primary = set.primary_port();
    assert_eq!(
        set.server(primary).keys(&lock_name(ns, "job")).len(),
        1,
        "the lease is on the primary the sentinels name"
    );
    let fence = F::fence(&first);
    assert_eq!(
        F::release(first).expect("release"),
        ReleaseOutcome::Released
    );
    let second = granted(locker.acquire("job"), "second acquire");
    assert!(F::fence(&second) > fence, "fences increase");
    assert_eq!(
        F::release(second).expect("release"),
        ReleaseOutcome::Released
    );
    locker.shutdown().expect("shutdown");
    assert!(lease_keys(set, primary, ns).is_empty(), "no lease left");
}

/// A connect failure: `PROVIDER_FAILED`, `authentication failed`, and
/// none of `secrets` (passwords, the address, the ports) in its Display
/// or Debug.
fn says_authentication_failed<F>(result: Result<F, Error>, what: &str, secrets: &[&str]) {
    let e = match result {
        Ok(_) => panic!("connected with {what}"),
        Err(e) => e,
    };
    assert_eq!(e.code(), "PROVIDER_FAILED", "{what}: {e:?}");
    let shown = e.to_string();
    assert_eq!(
        shown, "could not connect to redis: authentication failed",
        "{what}"
    );
    let debug = format!("{e:?}");
    for secret in secrets {
        assert!(
            !shown.contains(secret) && !debug.contains(secret),
            "{what}: {shown:?} / {debug} names {secret:?}"
        );
    }
}

/// The ports of the set's sentinels and servers, as text.
fn ports(set: &SentinelSet) -> Vec<String> {
    set.sentinel_urls()
        .iter()
        .filter_map(|u| u.rsplit(':').next().map(str::to_owned))
        .chain([set.primary_port().to_string()])
        .collect()
}

/// Sentinels that want a password (in their URLs) in front of servers
/// that want another one (in `SentinelOptions`, or in the redis crate's
/// `SentinelNodeConnectionInfo`): leases work both ways.
fn sentinel_and_primary_passwords<F: SentinelFront>() {
    let set = SentinelSet::builder()
        .sentinel_password(SENTINEL_PASSWORD)
        .primary_password(PRIMARY_PASSWORD)
        .start();
    let ns = namespace("sentinel-auth");
    let locker = F::connect_sentinel_with_options(
        &set.sentinel_urls(),
        set.master_name(),
        SentinelOptions::new().primary_password(PRIMARY_PASSWORD),
        config(&ns),
    )
    .unwrap_or_else(|e| panic!("connect with passwords: {e}"));
    leases_work(&set, &locker, &ns);

    let ns = namespace("sentinel-auth-node");
    let node = redis::sentinel::SentinelNodeConnectionInfo::default().set_redis_connection_info(
        redis::RedisConnectionInfo::default().set_password(PRIMARY_PASSWORD),
    );
    let locker =
        F::connect_sentinel_with(&set.sentinel_urls(), set.master_name(), node, config(&ns))
            .unwrap_or_else(|e| panic!("connect with SentinelNodeConnectionInfo: {e}"));
    leases_work(&set, &locker, &ns);
}

/// A wrong or missing sentinel password, and a wrong or missing primary
/// password: `authentication failed` at connect, naming no password and
/// no address.
fn wrong_passwords_say_authentication_failed<F: SentinelFront>() {
    let set = SentinelSet::builder()
        .sentinel_password(SENTINEL_PASSWORD)
        .primary_password(PRIMARY_PASSWORD)
        .start();
    let ns = namespace("sentinel-wrong-auth");
    let ports = ports(&set);
    let mut secrets = vec![SENTINEL_PASSWORD, PRIMARY_PASSWORD, "wrong-", "127.0.0.1"];
    secrets.extend(ports.iter().map(String::as_str));
    let primary = || SentinelOptions::new().primary_password(PRIMARY_PASSWORD);
    let wrong = format!("wrong-{SENTINEL_PASSWORD}");
    says_authentication_failed(
        F::connect_sentinel_with_options(
            &set.sentinel_urls_with_password(Some(&wrong)),
            set.master_name(),
            primary(),
            config(&ns),
        ),
        "a wrong sentinel password",
        &secrets,
    );
    says_authentication_failed(
        F::connect_sentinel_with_options(
            &set.sentinel_urls_with_password(None),
            set.master_name(),
            primary(),
            config(&ns),
        ),
        "no sentinel password",
        &secrets,
    );
    says_authentication_failed(
        F::connect_sentinel_with_options(
            &set.sentinel_urls(),
            set.master_name(),
            SentinelOptions::new().primary_password(format!("wrong-{PRIMARY_PASSWORD}")),
            config(&ns),
        ),
        "a wrong primary password",
        &secrets,
    );
    says_authentication_failed(
        F::connect_sentinel(&set.sentinel_urls(), set.master_name(), config(&ns)),
        "no primary password",
        &secrets,
    );
}

/// Over TLS with a private CA.
#[cfg(feature = "tls-rustls")]
mod over_tls {
    use super::*;

    /// The test CA as the redis crate takes it.
    pub(super) fn certificates(set: &SentinelSet) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(set.ca_pem().into_bytes()),
        }
    }

    /// The primary's password, TLS to it, the test CA.
    pub(super) fn options(set: &SentinelSet) -> SentinelOptions {
        SentinelOptions::new()
            .primary_password(PRIMARY_PASSWORD)
            .primary_tls(redis::TlsMode::Secure)
            .certificates(certificates(set))
    }

    pub(super) fn tls_set() -> SentinelSet {
        SentinelSet::builder()
            .tls()
            .sentinel_password(SENTINEL_PASSWORD)
            .primary_password(PRIMARY_PASSWORD)
            .start()
    }

    fn connect<F: SentinelFront>(set: &SentinelSet, config: Config) -> F {
        F::connect_sentinel_with_options(
            &set.sentinel_urls(),
            set.master_name(),
            options(set),
            config,
        )
        .unwrap_or_else(|e| panic!("connect through TLS sentinels: {} ({e})", e.code()))
    }

    /// `rediss://` sentinels (password in their URLs) and a TLS primary
    /// (its own password), trusted through the test CA: leases work, and a
    /// waiter with 30 s safety polls is woken by the release notification
    /// (the subscriber found the primary over TLS too).
    pub(super) fn leases_and_notifications_over_tls<F: SentinelFront>() {
        let set = tls_set();
        assert!(set
            .sentinel_urls()
            .iter()
            .all(|u| u.starts_with("rediss://")));
        let primary = set.primary_port();
        assert_eq!(
            primary,
            set.server(primary).tls_port(),
            "the sentinels name the primary's TLS port"
        );
        let ns = namespace("sentinel-tls");
        let slow = Duration::from_secs(30);
        let waiters = Arc::new(connect::<F>(
            &set,
            config(&ns)
                .poll_interval(slow)
                .notify_poll_interval(slow)
                .wait(Duration::from_secs(20)),
        ));
        let holder: F = connect(&set, config(&ns));
        let held = granted(
            holder.acquire_with("job", leased(Duration::from_secs(60))),
            "holder over TLS",
        );
        let held_fence = F::fence(&held);
        let w = waiters.clone();
        let waiter = spawn("waiter", move || {
            let lease = granted(w.acquire("job"), "waiter over TLS");
            (F::fence(&lease), F::release(lease))
        });
        behaviour::common::wait_for_stats(
            &*waiters,
            "the waiter subscribed and checked again",
            |s| s.subscribed && s.busy_replies >= 2,
        );
        assert_eq!(F::release(held).expect("release"), ReleaseOutcome::Released);
        let (fence, released) = waiter.join_within(BOUND);
        assert!(fence > held_fence, "fences increase");
        assert_eq!(
            released.expect("waiter's release"),
            ReleaseOutcome::Released
        );
        assert!(
            waiters.stats().notifications >= 1,
            "the hand-over came through a notification: {:?}",
            waiters.stats()
        );
        holder.shutdown().expect("holder's shutdown");
        leases_work(&set, &*waiters, &ns);
    }

    /// Without the CA (platform roots only): `TLS handshake failed`, no
    /// address; a malformed PEM certificate: `INVALID_CONFIG` before any
    /// connection.
    pub(super) fn without_the_ca_the_tls_handshake_fails<F: SentinelFront>() {
        let set = tls_set();
        let ns = namespace("sentinel-tls-untrusted");
        let e = match F::connect_sentinel_with_options(
            &set.sentinel_urls(),
            set.master_name(),
            SentinelOptions::new()
                .primary_password(PRIMARY_PASSWORD)
                .primary_tls(redis::TlsMode::Secure),
            config(&ns),
        ) {
            Ok(_) => panic!("connected through sentinels whose CA is not trusted"),
            Err(e) => e,
        };
        assert_eq!(e.code(), "PROVIDER_FAILED", "{e:?}");
        let shown = e.to_string();
        assert!(
            shown.starts_with("could not connect to redis: TLS handshake failed"),
            "{shown}"
        );
        for secret in ports(&set)
            .iter()
            .map(String::as_str)
            .chain(["127.0.0.1", SENTINEL_PASSWORD])
        {
            assert!(
                !shown.contains(secret) && !format!("{e:?}").contains(secret),
                "{shown} names {secret}"
            );
        }
        let bad = SentinelOptions::new()
            .primary_tls(redis::TlsMode::Secure)
            .certificates(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(
                    b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"
                        .to_vec(),
                ),
            });
        match F::connect_sentinel_with_options(
            &set.sentinel_urls(),
            set.master_name(),
            bad,
            config(&ns),
        ) {
            Ok(_) => panic!("connected with a malformed PEM certificate"),
            Err(e) => assert_eq!(e.code(), "INVALID_CONFIG", "{e:?}"),
        }
    }

    /// Over TLS, the primary SIGKILLed while a lease is held: a waiter on
    /// another locker acquires on the new primary with a larger fence.
    pub(super) fn failover_over_tls<F: SentinelFront>() {
        let set = tls_set();
        let ns = namespace("sentinel-tls-failover");
        let holder: F = connect(&set, config(&ns));
        let waiters = Arc::new(connect::<F>(&set, config(&ns)));
        let held = granted(holder.acquire("job"), "holder over TLS");
        let held_fence = F::fence(&held);
        let old = set.primary_port();
        let _ = set.server(old).query(redis::cmd("WAIT").arg(1).arg(1000));
        let w = waiters.clone();
        let waiter = spawn("waiter", move || {
            let lease = w.acquire_with("job", waiting(Duration::from_secs(30)))?;
            let fence = F::fence(&lease);
            F::release(lease)?;
            Ok::<_, Error>(fence)
        });
        support::wait_until(BOUND, "the waiter in line", || waiters.stats().waiters >= 1);
        let killed = set.kill_primary();
        let new = set.wait_failover(killed, FAILOVER_BOUND);
        let fence = waiter
            .join_within(FAILOVER_BOUND)
            .expect("the waiter acquires after the failover");
        assert!(fence > held_fence, "the fence after the failover is larger");
        holder.shutdown().ok();
        waiters.shutdown().expect("waiters' shutdown");
        assert!(
            lease_keys(&set, new, &ns).is_empty(),
            "no lease left on the new primary"
        );
    }
}

mod blocking {
    use super::*;
    type F = redlease::blocking::Locker;

    #[test]
    fn acquire_release() {
        super::acquire_release::<F>();
    }

    #[test]
    fn failover_while_waiting() {
        super::failover_while_waiting::<F>();
    }

    #[test]
    fn demoted_primary_is_left() {
        super::demoted_primary_is_left::<F>();
    }

    #[test]
    fn readonly_connection_is_dropped() {
        super::readonly_connection_is_dropped::<F>();
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn failover_over_tls() {
        super::over_tls::failover_over_tls::<F>();
    }

    #[test]
    fn unknown_master_fails_at_connect() {
        super::unknown_master_fails_at_connect::<F>();
    }

    #[test]
    fn sentinel_and_primary_passwords() {
        super::sentinel_and_primary_passwords::<F>();
    }

    #[test]
    fn wrong_passwords_say_authentication_failed() {
        super::wrong_passwords_say_authentication_failed::<F>();
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn leases_and_notifications_over_tls() {
        super::over_tls::leases_and_notifications_over_tls::<F>();
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn without_the_ca_the_tls_handshake_fails() {
        super::over_tls::without_the_ca_the_tls_handshake_fails::<F>();
    }
}

mod aio {
    use super::*;
    type F = Async;

    #[test]
    fn acquire_release() {
        super::acquire_release::<F>();
    }

    #[test]
    fn failover_while_waiting() {
        super::failover_while_waiting::<F>();
    }

    #[test]
    fn demoted_primary_is_left() {
        super::demoted_primary_is_left::<F>();
    }

    #[test]
    fn readonly_connection_is_dropped() {
        super::readonly_connection_is_dropped::<F>();
    }

    #[test]
    fn unknown_master_fails_at_connect() {
        super::unknown_master_fails_at_connect::<F>();
    }

    #[test]
    fn sentinel_and_primary_passwords() {
        super::sentinel_and_primary_passwords::<F>();
    }

    #[test]
    fn wrong_passwords_say_authentication_failed() {
        super::wrong_passwords_say_authentication_failed::<F>();
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn leases_and_notifications_over_tls() {
        super::over_tls::leases_and_notifications_over_tls::<F>();
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn without_the_ca_the_tls_handshake_fails() {
        super::over_tls::without_the_ca_the_tls_handshake_fails::<F>();
    }
}
