//! Both lockers through Redis Sentinel (1 primary, 1 replica, 3
//! sentinels): connect and acquire/release, then a failover (the primary
//! SIGKILLed) while a lease is held and waiters wait. The observed failover
//! time is printed (no timed assertions).
#![allow(clippy::disallowed_methods)]
// The standalone suite's macro is not used here, only its helpers.
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use behaviour::common::{granted, lock_name, namespace, spawn, waiting, BOUND};
use behaviour::front::{Async, Front};
use futures::executor::block_on;
use redlease::{Config, Error, RenewOutcome};
use support::sentinel::SentinelSet;

/// Generous: detection (1 s down-after) + vote + promotion, plus the TTL.
const FAILOVER_BOUND: Duration = Duration::from_secs(45);

/// A front end that can connect through Sentinel.
trait SentinelFront: Front + Sized {
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error>;
}

impl SentinelFront for redlease::blocking::Locker {
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error> {
        redlease::blocking::Locker::connect_sentinel(
            urls.iter().map(String::as_str),
            master,
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

    #[test]
    fn unknown_master_fails_at_connect() {
        super::unknown_master_fails_at_connect::<F>();
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
}
