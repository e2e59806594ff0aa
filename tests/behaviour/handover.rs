//! The contended hand-over (docs/PROTOCOL.md §4): waiting lockers register in
//! the key's queue in Redis, a release grants the lock to the head
//! registration, which claims it; grants follow the order of registration
//! across lockers (processes), a dead or silent registration costs at most
//! its bound or the claim window, and nothing is queued when nobody waits.
//! A release or a claim sent twice grants nothing twice, and lockers with
//! and without the hand-over share a key without ever overlapping. (Waiting
//! processes that are stopped or killed: `tests/faults/handover.rs`.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use redis::Value;
use redlease::{ReleaseOutcome, RenewOutcome};

use super::common::{
    config, connect, exists, fence_name, get, granted, key_sha, let_pass, lock_name, namespace,
    no_wait, pttl, refused, spawn, token_of, waiting, Bounded, BOUND,
};
use super::front::Front;
use crate::support::monitor::{Monitor, Monitored};
use crate::support::{wait_until, RedisServer};

/// `<ns>:lock-queue:{<sha>}`
pub(crate) fn queue_name(ns: &str, key: &str) -> String {
    format!("{ns}:lock-queue:{{{}}}", key_sha(key))
}

/// `<ns>:lock-reg:{<sha>}:<reg>`
pub(crate) fn reg_name(ns: &str, key: &str, reg: &str) -> String {
    format!("{ns}:lock-reg:{{{}}}:{reg}", key_sha(key))
}

/// The registrations queued for `key`, in order (each entry of the queue
/// is `<reg>|<deadline ms>|<owner>:<claim ms>`).
pub(crate) fn queued(server: &RedisServer, ns: &str, key: &str) -> Vec<String> {
    list(server, &queue_name(ns, key))
}

/// The grant token the first registration queued for `key` names (its
/// entry is `<reg>|<deadline ms>|<grant token>:<claim ms>`).
fn first_grant_token(server: &RedisServer, ns: &str, key: &str) -> String {
    let entry = queued(server, ns, key);
    let registration = get(server, &reg_name(ns, key, &entry[0])).expect("registered");
    let owner = registration.rsplit('|').next().expect("an entry");
    owner.split(':').next().expect("an owner").to_owned()
}

/// The semaphore's queue: `<ns>:sem-queue:{<sha>}`.
fn sem_queued(server: &RedisServer, ns: &str, key: &str) -> Vec<String> {
    list(server, &format!("{ns}:sem-queue:{{{}}}", key_sha(key)))
}

/// The owners (grant tokens) the semaphore's queue entries name, in order
/// (`<reg>|<deadline ms>|<owner>:<claim ms>`).
fn sem_owners(server: &RedisServer, ns: &str, key: &str) -> Vec<String> {
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{ns}:sem-queue:{{{}}}", key_sha(key)))
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("LRANGE on the test redis: {e}"));
    entries
        .iter()
        .filter_map(|e| e.rsplit('|').next()?.split(':').next())
        .map(str::to_owned)
        .collect()
}

/// The registration ids of the queue `name`.
fn list(server: &RedisServer, name: &str) -> Vec<String> {
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(name)
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("LRANGE on the test redis: {e}"));
    entries
        .into_iter()
        .map(|e| e.split('|').next().unwrap_or_default().to_owned())
        .collect()
}

/// The server's clock in ms (`TIME`), which registrations' bounds count in.
fn server_ms(server: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("TIME on the test redis: {e}"));
    s * 1000 + us / 1000
}

/// Puts a registration of a locker that does not exist at the tail of the
/// queue: alive for `alive` (none: already expired), made out to `token`.
fn fake_registration(
    server: &RedisServer,
    ns: &str,
    key: &str,
    reg: &str,
    token: &str,
    alive: Option<Duration>,
) {
    let alive_ms = alive.map_or(0, |a| a.as_millis() as u64);
    let deadline = if alive.is_some() {
        server_ms(server) + alive_ms
    } else {
        server_ms(server).saturating_sub(1)
    };
    let entry = format!("{reg}|{deadline}|{token}:100");
    server.query(redis::cmd("RPUSH").arg(queue_name(ns, key)).arg(&entry));
    server.query(
        redis::cmd("SET")
            .arg(format!("{ns}:lock-queued:{{{}}}", key_sha(key)))
            .arg("1"),
    );
    if alive.is_some() {
        server.query(
            redis::cmd("SET")
                .arg(reg_name(ns, key, reg))
                .arg(&entry)
                .arg("PX")
                .arg(alive_ms),
        );
    }
}

/// Safety polls far beyond the test's bound: only a grant (or a release
/// notification) can hand the key over in time.
fn slow_polls(ns: &str) -> redlease::Config {
    config(ns)
        .notify_poll_interval(Duration::from_secs(30))
        .wait(Duration::from_secs(20))
}

/// Three lockers (three processes as far as Redis can tell) start waiting
/// one after the other; the releases hand the key over in that order.
pub(crate) fn grants_follow_the_order_in_which_lockers_registered<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-fifo");
    let holder: F = connect(&server, slow_polls(&ns));
    let held = granted(holder.acquire("k"), "holder");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..3 {
        let locker: Arc<F> = Arc::new(connect(&server, slow_polls(&ns)));
        let order = order.clone();
        threads.push(spawn(&format!("locker-{i}"), move || {
            let lease = granted(locker.acquire("k"), "a registered waiter");
            order.lock().unwrap().push(i);
            F::release(lease).unwrap()
        }));
        wait_until(BOUND, &format!("locker {i} registered"), || {
            queued(&server, &ns, "k").len() == i + 1
        });
    }
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    for t in threads {
        assert_eq!(t.join_within(BOUND), ReleaseOutcome::Released);
    }
    assert_eq!(
        *order.lock().unwrap(),
        vec![0, 1, 2],
        "grants in registration order"
    );
    // The last holder's registration lingers a moment after its release
    // (docs/PROTOCOL.md §4.4), then its locker takes it out.
    wait_until(BOUND, "every registration consumed", || {
        queued(&server, &ns, "k").is_empty()
    });
}

/// A hand-over to a waiter of another locker that has a second waiter
/// behind it costs Redis seven commands on the waiter's path
/// (docs/PROTOCOL.md §4.3): the release that grants (`EVALSHA`, `MGET`,
/// `TIME`, `LMOVE`, the counter's and the lock's `SET`, `PUBLISH`). The
/// waiter takes the grant from its notice, without a claim: the lease is
/// held under the grant token with the grant's fence, and the locker's
/// entry stays at the tail for its second waiter. The extension to the
/// full lease follows off that path (`EVAL`, `GET`, `PEXPIRE`), and the
/// release of the hold, by its whole value, hands the key on.
pub(crate) fn a_hand_over_runs_seven_commands_and_the_grant_is_extended_later<F: Front>() {
    use super::fences::{calls, lock_commands, Counts};
    let server = RedisServer::start();
    let ns = namespace("handover-cost");
    let holder: F = connect(&server, slow_polls(&ns));
    let waiters: F = connect(&server, slow_polls(&ns));
    // Warm: both lockers' scripts cached and connections open.
    for f in [&holder, &waiters] {
        let warm = granted(f.acquire_with("k", no_wait()), "warm-up");
        assert_eq!(F::release(warm).unwrap(), ReleaseOutcome::Released);
    }
    let held = granted(holder.acquire("k"), "holder");
    std::thread::scope(|scope| {
        let (leases, granted_to) = std::sync::mpsc::channel();
        for i in 0..2 {
            let (waiters, leases) = (&waiters, leases.clone());
            scope.spawn(move || {
                let lease = granted(waiters.acquire("k"), &format!("waiter {i}"));
                leases.send(lease).expect("the test takes the lease");
            });
            wait_until(BOUND, &format!("waiter {i} queued"), || {
                waiters.stats().waiters == i + 1
            });
        }
        wait_until(BOUND, "the waiters' locker registered", || {
            queued(&server, &ns, "k").len() == 1
        });
        let entry = queued(&server, &ns, "k");
        let grant_token = first_grant_token(&server, &ns, "k");
        let mut counts = Counts::new(&server);
        let first = counts.step(
            "a release that grants, and no claim",
            &[
                ("evalsha", 1),
                ("mget", 1),
                ("time", 1),
                ("lmove", 1),
                ("set", 2),
                ("publish", 1),
            ],
            || {
                assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
                granted_to
                    .recv_timeout(BOUND)
                    .expect("the first waiter took the grant")
            },
        );
        let lock = lock_name(&ns, "k");
        let value = get(&server, &lock).expect("the granted lease");
        assert_eq!(
            value,
            format!("{grant_token}:{}", F::fence(&first).get()),
            "held under the grant token, with the grant's fence"
        );
        assert_eq!(queued(&server, &ns, "k"), entry, "still queued, once");
        counts.finish();
        // Past the 100 ms claim window: the extension ran (about 50 ms in).
        server.reset_stats();
        wait_until(BOUND, "extended to the full lease", || {
            pttl(&server, &lock) > 1_000
        });
        let extension: Vec<_> = lock_commands(&server.commandstats())
            .into_iter()
            .filter(|(name, _)| name != "pttl")
            .collect();
        assert_eq!(
            extension,
            calls(&[("eval", 1), ("get", 1), ("pexpire", 1)]),
            "the extension, off the waiter's path"
        );
        assert_eq!(get(&server, &lock), Some(value), "the same hold");
        assert_eq!(F::release(first).unwrap(), ReleaseOutcome::Released);
        let second = granted_to.recv_timeout(BOUND).expect("the second waiter");
        assert_eq!(F::release(second).unwrap(), ReleaseOutcome::Released);
    });
    // It lingers while the last waiter's lease is held and a moment after
    // its release (docs/PROTOCOL.md §4.4), then the locker takes it out.
    wait_until(BOUND, "the locker left the queue", || {
        queued(&server, &ns, "k").is_empty()
    });
}

/// Lockers served only by grants make no busy attempt, so their claims
/// refresh their registrations' bounds (docs/PROTOCOL.md §4.3): with a
/// 300 ms bound and hand-overs running at least twice as long (300 grants
/// held 2 ms each), no entry ever lapses (a grant drops a lapsed one with
/// `RPOP`), the claims refreshed them in place (`LSET`), and both lockers
/// are served.
pub(crate) fn claims_keep_a_served_lockers_registration_alive<F: Front>() {
    const LOCKERS: usize = 2;
    const WAITERS: usize = 3;
    const GRANTS: usize = 300;
    let server = RedisServer::start();
    let ns = namespace("handover-refresh");
    // Safety polls every 100 ms: a 300 ms registration bound.
    let fast_bound = || {
        config(&ns)
            .notify_poll_interval(Duration::from_millis(100))
            .wait(Duration::from_secs(20))
    };
    let lockers: Vec<F> = (0..LOCKERS)
        .map(|_| connect(&server, fast_bound()))
        .collect();
    let calls = served_in_turns(&server, &lockers, WAITERS, GRANTS);
    // A grant drops an entry past its bound with `RPOP`, and only then.
    assert_eq!(calls.get("rpop"), 0, "no entry lapsed: {calls:?}");
    assert!(calls.get("lset") > 0, "refreshed in place: {calls:?}");
}

/// The calls Redis counted while `waiters` threads on each locker acquired
/// `key` "k" in a loop (acquire, 2 ms of work, release) until `grants`
/// acquisitions were made in all; asserts that the lockers took turns.
/// Call it with a name, as `calls.get("rpush")`; `{calls:?}` shows them all.
fn served_in_turns<F: Front>(
    server: &RedisServer,
    lockers: &[F],
    waiters: usize,
    grants: usize,
) -> Calls {
    let served: Vec<std::sync::atomic::AtomicUsize> =
        lockers.iter().map(|_| Default::default()).collect();
    let total = std::sync::atomic::AtomicUsize::new(0);
    server.reset_stats();
    std::thread::scope(|scope| {
        for (i, locker) in lockers.iter().enumerate() {
            for _ in 0..waiters {
                let (served, total) = (&served, &total);
                scope.spawn(move || {
                    while total.load(Ordering::SeqCst) < grants {
                        let lease = granted(locker.acquire("k"), "a served waiter");
                        served[i].fetch_add(1, Ordering::SeqCst);
                        total.fetch_add(1, Ordering::SeqCst);
                        // The work done under the lease.
                        let_pass(Duration::from_millis(2));
                        assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
                    }
                });
            }
        }
    });
    let counts: Vec<usize> = served.iter().map(|g| g.load(Ordering::SeqCst)).collect();
    // Until every locker is registered the first one may be served
    // several times in a row; then the turns alternate.
    assert!(
        counts.iter().all(|c| *c >= grants / (lockers.len() + 1)),
        "turns alternate: {counts:?}"
    );
    Calls(server.commandstats())
}

/// Redis's calls per command name (`INFO commandstats`).
struct Calls(std::collections::HashMap<String, u64>);

impl Calls {
    fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A registration whose locker stopped refreshing it (killed, paused) is
/// skipped: the release grants the next live registration.
pub(crate) fn a_lapsed_registration_is_skipped<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-lapsed");
    let holder: F = connect(&server, slow_polls(&ns));
    let waiter: Arc<F> = Arc::new(connect(&server, slow_polls(&ns)));
    let held = granted(holder.acquire("k"), "holder");
    fake_registration(&server, &ns, "k", "00000000000000aa", "dead", None);
    let w = waiter.clone();
    let t = spawn("waiter", move || {
        let lease = granted(w.acquire("k"), "the live registration");
        F::release(lease).unwrap()
    });
    wait_until(BOUND, "the waiter registered", || {
        queued(&server, &ns, "k").len() == 2
    });
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    assert_eq!(t.join_within(BOUND), ReleaseOutcome::Released);
}

/// A grant made out to a registration that never claims it (a paused or
/// dead process) lapses after its claim window, and the next registration
/// gets the key (the claim window of the fake is 100 ms; safety polls are
/// 30 s, so the key can only come by the hand-over).
pub(crate) fn an_unclaimed_grant_goes_to_the_next_registration<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-unclaimed");
    let holder: F = connect(&server, slow_polls(&ns));
    let waiter: Arc<F> = Arc::new(connect(&server, slow_polls(&ns)));
    let held = granted(holder.acquire("k"), "holder");
    fake_registration(&server, &ns, "k", "00000000000000bb", "silent", Some(BOUND));
    let w = waiter.clone();
    let t = spawn("waiter", move || {
        let lease = granted(w.acquire("k"), "the next registration");
        let fence = F::fence(&lease);
        (F::release(lease).unwrap(), fence)
    });
    wait_until(BOUND, "the waiter registered", || {
        queued(&server, &ns, "k").len() == 2
    });
    let held_fence = F::fence(&held);
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let (outcome, fence) = t.join_within(BOUND);
    assert_eq!(outcome, ReleaseOutcome::Released);
    // The silent grant burnt a fence between the two.
    assert!(
        fence.get() > held_fence.get() + 1,
        "{held_fence:?} then {fence:?}"
    );
}

/// A lock found free with a live registration queued (its holder expired
/// without a release) goes to that registration, not to a newcomer's
/// try-once acquire, which hears busy.
pub(crate) fn a_free_lock_with_a_queue_goes_to_the_head_not_to_a_newcomer<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-free");
    let newcomer: F = connect(&server, config(&ns));
    fake_registration(&server, &ns, "k", "00000000000000cc", "queued", Some(BOUND));
    let e = refused(
        newcomer.acquire_with("k", no_wait()),
        "a newcomer behind a queue",
    );
    assert_eq!(e.code(), "LOCK_BUSY", "{e:?}");
    let value = get(&server, &lock_name(&ns, "k")).expect("the head was granted the lock");
    assert!(value.starts_with("queued:"), "granted to the head's token");
}

/// Nothing is written to the queue when nobody waits: uncontended cycles
/// and try-once acquires on a held key register nobody.
pub(crate) fn nobody_is_queued_when_nobody_waits<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-idle");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));
    for _ in 0..3 {
        let lease = granted(a.acquire("k"), "uncontended");
        refused(b.acquire_with("k", no_wait()), "a try-once on a held key");
        F::release(lease).unwrap();
    }
    assert!(server.keys(&format!("{ns}:lock-queue*")).is_empty());
    assert!(server.keys(&format!("{ns}:lock-reg*")).is_empty());
}

/// With the hand-over off, waiting lockers race as before and write
/// nothing to the queue; a locker with it on still gets the key.
pub(crate) fn with_the_handover_off_nothing_is_queued<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-off");
    let holder: F = connect(&server, config(&ns).handover(false));
    let waiter: Arc<F> = Arc::new(connect(&server, config(&ns).handover(false)));
    let held = granted(holder.acquire("k"), "holder");
    let w = waiter.clone();
    let t = spawn("waiter", move || {
        let lease = granted(
            w.acquire_with("k", waiting(BOUND)),
            "a waiter without hand-over",
        );
        F::release(lease).unwrap()
    });
    super::common::wait_for_stats(&*waiter, "the waiter waits", |s| s.waiters == 1);
    assert!(queued(&server, &ns, "k").is_empty(), "nothing registered");
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    assert_eq!(t.join_within(BOUND), ReleaseOutcome::Released);
    assert!(server.keys(&format!("{ns}:lock-*queue*")).is_empty());
}

/// A waiter on a locker of its own (a registration of its own, as another
/// process would have), with safety polls beyond the bound and a generous
/// claim window; it hands back the lease once held. Returns once the
/// locker is the `position`-th registration in the key's queue.
fn registered_waiter<F: Front>(
    server: &RedisServer,
    ns: &str,
    name: &str,
    position: usize,
) -> (Arc<F>, Bounded<F::Lease>) {
    let locker: Arc<F> = Arc::new(connect(
        server,
        slow_polls(ns).claim_window(Duration::from_secs(2)),
    ));
    let l = locker.clone();
    let what = format!("{name}: a registered waiter");
    let t = spawn(name, move || granted(l.acquire("k"), &what));
    wait_until(BOUND, &format!("{name} registered"), || {
        queued(server, ns, "k").len() == position
    });
    (locker, t)
}

/// The last script call `MONITOR` saw on `lock` with `keys` keys and
/// `token` as its first argument.
fn last_call_of(monitor: &Monitor, lock: &str, keys: usize, token: &str) -> Monitored {
    monitor
        .seen()
        .into_iter()
        .rev()
        .find(|c| {
            matches!(c.script_call(), Some((k, a))
                if k.len() == keys && k[0] == lock && a.first().map(String::as_str) == Some(token))
        })
        .unwrap_or_else(|| panic!("MONITOR saw no call with {keys} key(s) by the token"))
}

/// A release and an extension sent twice (a client library re-sending a
/// write whose reply it did not get) grant nothing twice. The test records
/// the library's own commands with `MONITOR` and, once the release handed
/// the lock to the first registration and that locker took the grant and
/// extended it, re-sends both exactly as they went out: the release finds
/// the grantee's hold and answers conflict (2) without touching the lock;
/// the extension (a renew of the hold's whole value) renews the same hold.
/// Neither moves the fence counter or grants the lock to the second
/// registration, which stays queued; the grantee's lease is still renewed,
/// and its release hands the key on with a higher fence.
pub(crate) fn a_replayed_release_or_extension_grants_nothing_twice<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-replay");
    let monitor = Monitor::start(&server);
    let holder: F = connect(&server, slow_polls(&ns));
    let held = granted(holder.acquire("k"), "holder");
    let held_fence = F::fence(&held).get();
    let holder_token = token_of(&server, &ns, "k");
    let (_first, first_t) = registered_waiter::<F>(&server, &ns, "first", 1);
    let (second, second_t) = registered_waiter::<F>(&server, &ns, "second", 2);
    let second_reg = queued(&server, &ns, "k")[1].clone();

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let lease = first_t.join_within(BOUND);
    let fence = F::fence(&lease).get();
    assert!(fence > held_fence, "{held_fence} then {fence}");
    // Held under the grant token until released.
    let hold = format!("{}:{fence}", token_of(&server, &ns, "k"));
    let lock = lock_name(&ns, "k");
    // Past the 2 s claim window: the extension ran (about 1 s in).
    wait_until(BOUND, "the grant extended", || pttl(&server, &lock) > 2_500);
    monitor.catch_up(&server);
    let release = last_call_of(&monitor, &lock, 4, &holder_token);
    let extension = last_call_of(&monitor, &lock, 1, &hold);
    let value = get(&server, &lock);
    let counter = get(&server, &fence_name(&ns, "k"));
    assert_eq!(counter, Some(fence.to_string()));

    for _ in 0..2 {
        assert_eq!(
            server.query(&release.to_cmd()),
            Value::Int(2),
            "a replayed release finds the grantee's token: conflict"
        );
        assert_eq!(
            server.query(&extension.to_cmd()),
            Value::Int(1),
            "a replayed extension renews the same hold"
        );
    }
    assert_eq!(get(&server, &lock), value, "the grantee's lock");
    assert_eq!(get(&server, &fence_name(&ns, "k")), counter, "no new fence");
    the_next_registration_was_not_granted(
        &server,
        &ns,
        &second_reg,
        &*second,
        lease,
        second_t,
        fence,
    );
}

/// A permit's release and the extension of the permit its grant went to,
/// taken without the claim, each sent twice: as for a lock, the release
/// finds the grantee's hold on the slot and answers conflict (2), the
/// extension renews the same hold, the slot's fence counter does not move,
/// and the next registration is not granted; it gets the slot, with a
/// larger fence, once the grantee releases.
pub(crate) fn a_replayed_slot_release_or_extension_grants_nothing_twice<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-sem-replay");
    let monitor = Monitor::start(&server);
    let holder: F = connect(&server, slow_polls(&ns));
    let held = holder.acquire_permit("s", 1, waiting(BOUND)).unwrap();
    let slot = format!("{ns}:sem:{{{}}}:0", key_sha("s"));
    let counter = format!("{ns}:sem-fence:{{{}}}:0", key_sha("s"));
    let holder_token = get(&server, &slot)
        .and_then(|v| v.split(':').next().map(str::to_owned))
        .expect("the holder's permit");
    let waiter = |name: &str, position: usize| {
        let locker: Arc<F> = Arc::new(connect(
            &server,
            slow_polls(&ns).claim_window(Duration::from_secs(2)),
        ));
        let l = locker.clone();
        let what = format!("{name}: a registered waiter");
        let t = spawn(name, move || {
            l.acquire_permit("s", 1, waiting(BOUND))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"))
        });
        wait_until(BOUND, &format!("{name} registered"), || {
            sem_queued(&server, &ns, "s").len() == position
        });
        (locker, t)
    };
    let (_first, first_t) = waiter("first", 1);
    let first_owner = sem_owners(&server, &ns, "s").remove(0);
    let (second, second_t) = waiter("second", 2);

    assert_eq!(F::release_permit(held).unwrap(), ReleaseOutcome::Released);
    let permit = first_t.join_within(BOUND);
    let fence = F::permit_fence(&permit).get();
    let hold = format!("{first_owner}:{fence}");
    assert_eq!(
        get(&server, &slot),
        Some(hold.clone()),
        "taken, not claimed"
    );
    // Past the 2 s claim window: the extension ran (about 250 ms in).
    wait_until(BOUND, "the grant extended", || pttl(&server, &slot) > 2_500);
    monitor.catch_up(&server);
    let release = last_call_of(&monitor, &slot, 4, &holder_token);
    let extension = last_call_of(&monitor, &slot, 1, &hold);
    let counted = get(&server, &counter);
    assert_eq!(counted, Some(fence.to_string()));
    for _ in 0..2 {
        assert_eq!(
            server.query(&release.to_cmd()),
            Value::Int(2),
            "a replayed release finds the grantee's hold: conflict"
        );
        assert_eq!(
            server.query(&extension.to_cmd()),
            Value::Int(1),
            "a replayed extension renews the same hold"
        );
    }
    assert_eq!(get(&server, &slot), Some(hold), "the grantee's slot");
    assert_eq!(get(&server, &counter), counted, "no new fence");
    assert_eq!(sem_queued(&server, &ns, "s").len(), 1, "no second grant");
    assert_eq!(second.stats().acquires, 0);
    assert_eq!(F::renew_permit(&permit).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    let next = second_t.join_within(BOUND);
    assert!(
        F::permit_fence(&next).get() > fence,
        "fences strictly increase"
    );
    assert_eq!(F::release_permit(next).unwrap(), ReleaseOutcome::Released);
}

/// After a replayed release or claim: the next registration is still
/// queued, not granted (its locker acquired nothing), the grantee's lease
/// still renews, and once released the next registration gets the key
/// with a higher fence.
pub(crate) fn the_next_registration_was_not_granted<F: Front>(
    server: &RedisServer,
    ns: &str,
    second_reg: &str,
    second: &F,
    lease: F::Lease,
    second_t: Bounded<F::Lease>,
    fence: u64,
) {
    // Behind it, the grantee's registration lingers while it holds the
    // lease (docs/PROTOCOL.md §4.4).
    assert_eq!(
        queued(server, ns, "k").first().map(String::as_str),
        Some(second_reg),
        "no second grant"
    );
    assert!(exists(server, &reg_name(ns, "k", second_reg)));
    assert_eq!(second.stats().acquires, 0);
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let next = second_t.join_within(BOUND);
    assert!(F::fence(&next).get() > fence, "fences strictly increase");
    assert_eq!(F::release(next).unwrap(), ReleaseOutcome::Released);
}

/// A locker with the hand-over off and one with it on contend for one key,
/// two waiters each, starting together, 25 acquisitions per waiter, each
/// holding the key for a modelled millisecond of work: never two holders
/// at once (a shared flag each holder sets and clears), fences strictly
/// increasing in the order the holders held the key, and every waiter gets
/// every one of its acquisitions within its wait (the locker without
/// hand-over may take a free lock ahead of the queue, never a held or
/// granted one). The locker with the hand-over did register (`RPUSH` ran).
pub(crate) fn lockers_with_and_without_the_handover_share_a_key_safely<F: Front>() {
    const ROUNDS: usize = 25;
    let server = RedisServer::start();
    let ns = namespace("handover-mixed");
    let mixed = |on: bool| config(&ns).handover(on).wait(Duration::from_secs(30));
    let lockers: [(&str, Arc<F>); 2] = [
        ("off", Arc::new(connect(&server, mixed(false)))),
        ("on", Arc::new(connect(&server, mixed(true)))),
    ];
    let inside = Arc::new(AtomicBool::new(false));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(4));
    let mut threads = Vec::new();
    for (name, locker) in &lockers {
        for i in 0..2 {
            let (locker, inside, fences) = (locker.clone(), inside.clone(), fences.clone());
            let start = start.clone();
            let who = format!("{name}-{i}");
            threads.push(spawn(&who.clone(), move || {
                start.wait();
                for round in 0..ROUNDS {
                    let lease = granted(locker.acquire("k"), &format!("{who} round {round}"));
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    fences
                        .lock()
                        .unwrap()
                        .push((who.clone(), F::fence(&lease).get()));
                    // Work while holding the key, so that the others wait.
                    let_pass(Duration::from_millis(1));
                    inside.store(false, Ordering::SeqCst);
                    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
                }
                ROUNDS
            }));
        }
    }
    for t in threads {
        assert_eq!(t.join_within(Duration::from_secs(60)), ROUNDS);
    }
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 4 * ROUNDS);
    assert!(
        fences.windows(2).all(|w| w[0].1 < w[1].1),
        "fences strictly increase in the order the key was held: {fences:?}"
    );
    for (name, locker) in &lockers {
        assert_eq!(locker.stats().acquires, 2 * ROUNDS as u64, "{name}");
        assert_eq!(locker.stats().waiters, 0, "{name}");
    }
    let ran = server.commandstats();
    assert!(
        ran.get("rpush").is_some_and(|&n| n > 0),
        "the locker with the hand-over registered while it waited: {ran:?}"
    );
}

/// A semaphore's freed slots go to waiting lockers in the order they
/// registered: two permits held, three lockers wait one after the other,
/// and each release of a slot hands it to the next of them (safety polls
/// are 30 s: only the hand-over can explain the order in time).
pub(crate) fn freed_permits_go_to_lockers_in_registration_order<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-sem-fifo");
    let holder: F = connect(&server, slow_polls(&ns));
    let first = holder.acquire_permit("s", 2, waiting(BOUND)).unwrap();
    let second = holder.acquire_permit("s", 2, waiting(BOUND)).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..3 {
        let locker: Arc<F> = Arc::new(connect(&server, slow_polls(&ns)));
        let order = order.clone();
        threads.push(spawn(&format!("locker-{i}"), move || {
            let permit = locker
                .acquire_permit("s", 2, waiting(BOUND))
                .unwrap_or_else(|e| panic!("a registered waiter: {e:?}"));
            order.lock().unwrap().push(i);
            permit
        }));
        wait_until(BOUND, &format!("locker {i} registered"), || {
            sem_queued(&server, &ns, "s").len() == i + 1
        });
    }
    let freed = F::slot(&first);
    assert_eq!(F::release_permit(first).unwrap(), ReleaseOutcome::Released);
    let mut threads = threads.into_iter();
    let p0 = threads.next().unwrap().join_within(BOUND);
    assert_eq!(F::slot(&p0), freed, "the freed slot went to the head");
    assert_eq!(F::release_permit(second).unwrap(), ReleaseOutcome::Released);
    let p1 = threads.next().unwrap().join_within(BOUND);
    assert_eq!(F::release_permit(p0).unwrap(), ReleaseOutcome::Released);
    let p2 = threads.next().unwrap().join_within(BOUND);
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2], "registration order");
    for p in [p1, p2] {
        assert_eq!(F::release_permit(p).unwrap(), ReleaseOutcome::Released);
    }
    assert!(sem_queued(&server, &ns, "s").is_empty(), "all consumed");
}

/// A permit's grant to a locker with a second waiter is taken from its
/// notice, without a claim (docs/PROTOCOL.md §4.3): the first waiter holds
/// the slot under the grant token, with the grant's fence. The grant took
/// the registration out of the queue (a semaphore serves each once), so
/// the second waiter registers again, under a grant token of its own (the
/// hold's is never named again), and the hold's release, by its whole
/// value, grants the slot to it.
pub(crate) fn a_permits_grant_is_taken_without_a_claim_and_the_next_waiter_registers_anew<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("handover-sem-take");
    let holder: F = connect(&server, slow_polls(&ns));
    let held = holder.acquire_permit("s", 1, waiting(BOUND)).unwrap();
    let locker: Arc<F> = Arc::new(connect(&server, slow_polls(&ns)));
    let take = |name: &str| {
        let l = locker.clone();
        let what = format!("{name}: a registered waiter");
        spawn(name, move || {
            l.acquire_permit("s", 1, waiting(BOUND))
                .unwrap_or_else(|e| panic!("{what}: {e:?}"))
        })
    };
    let first = take("first");
    wait_until(BOUND, "the locker registered", || {
        sem_queued(&server, &ns, "s").len() == 1
    });
    let second = take("second");
    wait_until(BOUND, "both waiters in the locker's line", || {
        locker.stats().waiters == 2
    });
    let first_owner = sem_owners(&server, &ns, "s").remove(0);
    assert_eq!(F::release_permit(held).unwrap(), ReleaseOutcome::Released);
    let p1 = first.join_within(BOUND);
    let slot = format!("{ns}:sem:{{{}}}:0", key_sha("s"));
    assert_eq!(
        get(&server, &slot),
        Some(format!("{first_owner}:{}", F::permit_fence(&p1).get())),
        "held under the grant token, with the grant's fence: no claim"
    );
    wait_until(BOUND, "the second waiter registered again", || {
        sem_queued(&server, &ns, "s").len() == 1
    });
    let second_owner = sem_owners(&server, &ns, "s").remove(0);
    assert_ne!(second_owner, first_owner, "a grant token of its own");
    assert_eq!(F::release_permit(p1).unwrap(), ReleaseOutcome::Released);
    let p2 = second.join_within(BOUND);
    assert!(F::permit_is_valid(&p2));
    assert_eq!(F::release_permit(p2).unwrap(), ReleaseOutcome::Released);
    assert!(sem_queued(&server, &ns, "s").is_empty(), "all consumed");
    assert!(!exists(&server, &slot), "the slot is free");
}

/// A semaphore with a free slot and a live registration queued hands the
/// slot to that registration: a newcomer's try-once hears busy.
pub(crate) fn a_free_permit_with_a_queue_goes_to_the_head_not_to_a_newcomer<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-sem-free");
    let newcomer: F = connect(&server, config(&ns));
    let sha = key_sha("s");
    let reg = "00000000000000dd";
    let entry = format!(
        "{reg}|{}|queued:100",
        server_ms(&server) + BOUND.as_millis() as u64
    );
    server.query(
        redis::cmd("RPUSH")
            .arg(format!("{ns}:sem-queue:{{{sha}}}"))
            .arg(&entry),
    );
    server.query(
        redis::cmd("SET")
            .arg(format!("{ns}:sem-queued:{{{sha}}}"))
            .arg("1"),
    );
    server.query(
        redis::cmd("SET")
            .arg(format!("{ns}:sem-reg:{{{sha}}}:{reg}"))
            .arg(&entry)
            .arg("PX")
            .arg(BOUND.as_millis() as u64),
    );
    let e = refused(
        newcomer.acquire_permit("s", 1, no_wait()),
        "a newcomer behind a queue",
    );
    assert_eq!(e.code(), "LOCK_BUSY", "{e:?}");
    let value = get(&server, &format!("{ns}:sem:{{{sha}}}:0")).expect("the head got slot 0");
    assert!(value.starts_with("queued:"), "granted to the head's token");
}

/// A locker whose last waiter gives up (its wait runs out) leaves the
/// key's queue at once, for a lock and for a semaphore: no grant goes to a
/// locker nobody waits on.
pub(crate) fn a_locker_whose_last_waiter_gave_up_leaves_the_queue<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-leave");
    let holder: F = connect(&server, config(&ns));
    let waiter: F = connect(&server, config(&ns));
    let held = granted(holder.acquire("k"), "holder");
    let permit = holder.acquire_permit("s", 1, waiting(BOUND)).unwrap();
    let short = waiting(Duration::from_millis(300));
    let e = refused(
        waiter.acquire_with("k", short.clone()),
        "a wait that runs out",
    );
    assert_eq!(e.code(), "WAIT_TIMEOUT", "{e:?}");
    let e = refused(waiter.acquire_permit("s", 1, short), "a wait that runs out");
    assert_eq!(e.code(), "WAIT_TIMEOUT", "{e:?}");
    assert!(
        queued(&server, &ns, "k").is_empty(),
        "left the lock's queue"
    );
    assert!(
        sem_queued(&server, &ns, "s").is_empty(),
        "left the semaphore's"
    );
    assert!(
        server.keys(&format!("{ns}:*-reg:*")).is_empty(),
        "no registration"
    );
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    assert!(
        !super::common::exists(&server, &lock_name(&ns, "k")),
        "nobody was granted"
    );
}

/// Shutdown ends every wait and removes the locker's registrations.
pub(crate) fn shutdown_removes_the_lockers_registrations<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-shutdown");
    let holder: F = connect(&server, config(&ns));
    let waiter: Arc<F> = Arc::new(connect(&server, config(&ns)));
    let held = granted(holder.acquire("k"), "holder");
    let w = waiter.clone();
    let t = spawn("waiter", move || {
        w.acquire_with("k", waiting(BOUND))
            .map(|_| ())
            .unwrap_err()
            .code()
    });
    wait_until(BOUND, "the waiter registered", || {
        queued(&server, &ns, "k").len() == 1
    });
    waiter.shutdown().unwrap();
    assert_eq!(t.join_within(BOUND), "SHUTTING_DOWN");
    assert!(queued(&server, &ns, "k").is_empty(), "left the queue");
    assert!(server.keys(&format!("{ns}:lock-reg:*")).is_empty());
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
}

/// A read-write lease's queue (entries `r<reg>`, `w<reg>`): a released
/// write goes to the readers at the head of the queue together, a writer
/// queued behind them waits for them and keeps later readers out (writer
/// preference), and each hand-over follows the order of registration
/// (safety polls are 30 s: only the hand-over explains the progress).
pub(crate) fn a_released_write_lets_queued_readers_in_together_and_writers_keep_their_turn<
    F: Front,
>() {
    use std::sync::mpsc;

    let server = RedisServer::start();
    let ns = namespace("handover-rw");
    let rw_queued = || list(&server, &format!("{ns}:rw-queue:{{{}}}", key_sha("doc")));
    let holder: F = connect(&server, slow_polls(&ns));
    let held = holder.write_with("doc", waiting(BOUND)).unwrap();
    let (events, seen) = mpsc::channel::<(&'static str, u64)>();
    let mut releases = Vec::new();
    let mut threads = Vec::new();
    for (i, who) in ["reader-1", "reader-2", "writer", "reader-3"]
        .into_iter()
        .enumerate()
    {
        let locker: Arc<F> = Arc::new(connect(&server, slow_polls(&ns)));
        let (events, (release, released)) = (events.clone(), mpsc::channel::<()>());
        releases.push(release);
        threads.push(spawn(who, move || {
            let wait = released_within(released);
            if who == "writer" {
                let w = locker.write_with("doc", waiting(BOUND)).unwrap();
                events.send((who, F::write_fence(&w).get())).unwrap();
                wait();
                F::release_write(w).unwrap()
            } else {
                let r = locker.read_with("doc", waiting(BOUND)).unwrap();
                events.send((who, F::epoch(&r).get())).unwrap();
                wait();
                F::release_read(r).unwrap()
            }
        }));
        wait_until(BOUND, &format!("{who} registered"), || {
            rw_queued().len() == i + 1
        });
    }
    let next = || {
        seen.recv_timeout(BOUND)
            .expect("a hand-over within the bound")
    };
    let fence = F::write_fence(&held).get();
    assert_eq!(F::release_write(held).unwrap(), ReleaseOutcome::Released);
    // Both readers hold at once, with the last writer's fence as epoch.
    let mut first = [next(), next()];
    first.sort();
    assert_eq!(first, [("reader-1", fence), ("reader-2", fence)]);
    releases[0].send(()).unwrap();
    releases[1].send(()).unwrap();
    let (who, writer_fence) = next();
    assert_eq!(who, "writer", "the queued writer before the later reader");
    assert!(writer_fence > fence);
    releases[2].send(()).unwrap();
    assert_eq!(next(), ("reader-3", writer_fence));
    releases[3].send(()).unwrap();
    for t in threads {
        assert_eq!(t.join_within(BOUND), ReleaseOutcome::Released);
    }
    assert!(rw_queued().is_empty(), "every registration consumed");
}

/// A closure that waits (bounded) for the test to say "release".
fn released_within(released: std::sync::mpsc::Receiver<()>) -> impl FnOnce() {
    move || {
        released
            .recv_timeout(BOUND)
            .expect("the test lets the holder release")
    }
}

/// A grant made out to a locker whose last waiter then gave up is passed
/// on when the waiter leaves, not at the end of its claim window: the
/// grant is made by hand here (the registration's token, as a release
/// would write it, with a 30 s claim window and no notification), and the
/// waiter's wait runs out before any safety poll could see it.
pub(crate) fn a_grant_to_a_locker_whose_last_waiter_gave_up_is_passed_on_at_once<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-left-grant");
    let holder: F = connect(&server, slow_polls(&ns));
    let waiter: F = connect(&server, slow_polls(&ns));
    let held = granted(holder.acquire("k"), "holder");
    let waiting_for = Duration::from_millis(500);
    let (registered, deadline) = std::thread::scope(|scope| {
        let wait = scope.spawn(|| waiter.acquire_with("k", waiting(waiting_for)));
        wait_until(BOUND, "the waiter registered", || {
            queued(&server, &ns, "k").len() == 1
        });
        let reg = queued(&server, &ns, "k").remove(0);
        let value = get(&server, &reg_name(&ns, "k", &reg)).expect("the registration");
        // `<reg>|<deadline ms>|<owner>:<claim ms>`
        let owner = value.rsplit('|').next().unwrap();
        let token = owner.split(':').next().unwrap().to_owned();
        // The grant, as the holder's release would make it.
        server.query(
            redis::cmd("SET")
                .arg(lock_name(&ns, "k"))
                .arg(format!("{token}:999999999999999999"))
                .arg("PX")
                .arg(30_000),
        );
        (token, wait.join().unwrap())
    });
    assert_eq!(
        refused(deadline, "a wait that runs out").code(),
        "WAIT_TIMEOUT"
    );
    assert!(
        !exists(&server, &lock_name(&ns, "k")),
        "the grant to {registered:?} was released when its waiter left: {:?}",
        get(&server, &lock_name(&ns, "k"))
    );
    assert!(
        queued(&server, &ns, "k").is_empty(),
        "and the locker left the queue"
    );
    // The hand-made grant had replaced the holder's lock.
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Expired);
}

/// A locker with one waiter per key (a worker loop: acquire, work,
/// release, again) keeps its registration across its acquisitions
/// (docs/PROTOCOL.md §4.4): its next waiter waits for its grant without a
/// busy attempt, so the lockers register about once each, not once per
/// acquisition (`RPUSH` and `PTTL`, which every busy attempt runs, stay
/// near the two first registrations; 100 each without the lingering), and
/// the turns alternate.
pub(crate) fn lone_waiters_keep_their_registrations_and_wait_without_busy_attempts<F: Front>() {
    const GRANTS: usize = 100;
    let server = RedisServer::start();
    let ns = namespace("handover-linger");
    let lockers: Vec<F> = (0..2).map(|_| connect(&server, slow_polls(&ns))).collect();
    let calls = served_in_turns(&server, &lockers, 1, GRANTS);
    // A window missed on a loaded machine costs a registration again.
    assert!(
        calls.get("rpush") <= GRANTS as u64 / 10,
        "registered about once per locker: {calls:?}"
    );
    assert!(
        calls.get("pttl") <= GRANTS as u64 / 10,
        "next waiters wait for their grants, no busy attempts: {calls:?}"
    );
    wait_until(BOUND, "both lockers left the queue", || {
        queued(&server, &ns, "k").is_empty()
    });
}

/// A lease lost in Redis (deleted, as eviction or a restart without
/// persistence would) while its locker's registration lingers (the locker
/// holds it, no waiter behind): the next attempt grants the key to that
/// registration, whose claim window is 30 s. Nobody will claim it: the
/// locker passes it on at once (docs/PROTOCOL.md §4.4), so the waiter
/// behind gets the key within its 10 s wait instead of after the window.
pub(crate) fn a_grant_to_a_lingering_registration_nobody_came_back_for_is_passed_on<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-pass-on");
    let holder: F = connect(&server, slow_polls(&ns));
    let lingering: Arc<F> = Arc::new(connect(
        &server,
        slow_polls(&ns).claim_window(Duration::from_secs(30)),
    ));
    let held = granted(holder.acquire("k"), "holder");
    let l = lingering.clone();
    let first = spawn("registered waiter", move || {
        granted(l.acquire("k"), "a registered waiter")
    });
    wait_until(BOUND, "the waiter registered", || {
        queued(&server, &ns, "k").len() == 1
    });
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let _lost = first.join_within(BOUND);
    let reg = queued(&server, &ns, "k");
    assert_eq!(reg.len(), 1, "its registration stayed queued");
    server.query(redis::cmd("DEL").arg(lock_name(&ns, "k")));

    // Safety polls every 100 ms: it attempts soon, finds the key free
    // with a queue, and grants it to the lingering registration.
    let next: F = connect(
        &server,
        config(&ns)
            .notify_poll_interval(Duration::from_millis(100))
            .wait(Duration::from_secs(10)),
    );
    let lease = granted(
        next.acquire("k"),
        "the waiter behind the lingering registration",
    );
    assert!(
        !exists(&server, &reg_name(&ns, "k", &reg[0])),
        "the lingering registration was taken out"
    );
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// A locker whose first waiter got the key by an attempt sent while it
/// waited alone took no registration; a second waiter that joined during
/// that attempt heads the line without one, backing off while its own
/// locker holds the key. Other lockers then hand the key over among
/// themselves faster than the claim window, every grant a notice to it:
/// having no grant to wait for, it attempts at the first one and so joins
/// the queue, instead of moving its retry past each grant's window until
/// its safety poll (30 s here, beyond the 10 s bound).
pub(crate) fn a_head_without_a_registration_registers_at_the_first_grant_elsewhere<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-unregistered");
    let locker: Arc<F> = Arc::new(connect(
        &server,
        slow_polls(&ns).lease(Duration::from_secs(60)),
    ));
    // A waiter for another key keeps the locker subscribed, as under load.
    let holder: F = connect(&server, slow_polls(&ns));
    let other = granted(holder.acquire("other"), "the other key's holder");
    let waiting_other = {
        let locker = locker.clone();
        spawn("other", move || {
            F::release(granted(locker.acquire("other"), "the other key")).unwrap()
        })
    };
    wait_until(BOUND, "subscribed", || locker.stats().subscribed);
    let (release_first, first_may_release) = std::sync::mpsc::channel::<()>();
    let sent = locker.stats().scripts_sent;
    let first = {
        let paused = server.pause_guard();
        let first = {
            let locker = locker.clone();
            spawn("first", move || {
                let lease = granted(locker.acquire("k"), "the first waiter");
                first_may_release.recv().unwrap();
                F::release(lease).unwrap()
            })
        };
        wait_until(BOUND, "the first attempt sent", || {
            locker.stats().scripts_sent > sent
        });
        let second = {
            let locker = locker.clone();
            spawn("second", move || {
                F::release(granted(locker.acquire("k"), "the second waiter")).unwrap()
            })
        };
        wait_until(BOUND, "the second waiter in line", || {
            locker.stats().waiters == 3
        });
        drop(paused);
        (first, second)
    };
    wait_until(BOUND, "the first waiter holds", || {
        get(&server, &lock_name(&ns, "k")).is_some()
    });
    let q = queued(&server, &ns, "k");
    assert!(
        q.is_empty(),
        "no registration kept: {q:?} {:?}",
        locker.stats()
    );
    // Two lockers of two waiters each: their registrations stay queued
    // and every release grants the key to the other one.
    let stop = Arc::new(AtomicBool::new(false));
    let others: Vec<Arc<F>> = (0..2)
        .map(|_| Arc::new(connect(&server, slow_polls(&ns))))
        .collect();
    let churn: Vec<_> = others
        .iter()
        .flat_map(|other| [other.clone(), other.clone()])
        .enumerate()
        .map(|(i, other)| {
            let stop = stop.clone();
            spawn(&format!("churn-{i}"), move || {
                let mut served = 0;
                while !stop.load(Ordering::SeqCst) {
                    let lease = granted(other.acquire("k"), "a churning waiter");
                    served += 1;
                    let_pass(Duration::from_millis(1));
                    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
                }
                served
            })
        })
        .collect();
    wait_until(BOUND, "the other lockers registered", || {
        queued(&server, &ns, "k").len() >= 2
    });
    release_first.send(()).unwrap();
    assert_eq!(first.0.join_within(BOUND), ReleaseOutcome::Released);
    let second = first.1.join_within(BOUND);
    stop.store(true, Ordering::SeqCst);
    let served: usize = churn.into_iter().map(|t| t.join_within(BOUND)).sum();
    assert_eq!(second, ReleaseOutcome::Released);
    assert!(served > 0, "the others were served meanwhile");
    assert_eq!(F::release(other).unwrap(), ReleaseOutcome::Released);
    assert_eq!(waiting_other.join_within(BOUND), ReleaseOutcome::Released);
}

/// A lock's take leaves its hold under the grant token, which stays
/// registered for the locker's next waiter (docs/PROTOCOL.md §4.3). The
/// hold is gone from Redis while its waiter still holds it (evicted, or
/// lost: `DEL` here), and another locker's attempt grants the key to that
/// registration; the locker's subscriber, killed just before, misses the
/// grant's notice, so the next waiter meets the grant at its attempt after
/// the resubscription. Its attempt names the grant token above the floor
/// of the hold's fence and claims the grant: with a 30 s claim window and
/// 30 s polls, it is served within the bound, not when the grant lapses.
pub(crate) fn a_grant_beside_a_hold_gone_from_redis_goes_to_the_next_waiter<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("handover-floor");
    let config = slow_polls(&ns)
        .lease(Duration::from_secs(60))
        .claim_window(Duration::from_secs(30))
        .poll_interval(Duration::from_secs(30));
    let locker: Arc<F> = Arc::new(connect(&server, config));
    let other: Arc<F> = Arc::new(connect(&server, slow_polls(&ns)));
    let held = granted(other.acquire("k"), "the holder");
    let (leases, taken) = std::sync::mpsc::channel();
    let mut waiters = Vec::new();
    for i in 0..2 {
        let (l, leases) = (locker.clone(), leases.clone());
        waiters.push(spawn(&format!("waiter-{i}"), move || {
            let lease = granted(l.acquire("k"), &format!("waiter {i}"));
            leases.send(lease).expect("the test takes the lease");
        }));
        wait_until(BOUND, &format!("waiter {i} queued"), || {
            locker.stats().waiters == i + 1
        });
    }
    wait_until(BOUND, "the locker registered", || {
        queued(&server, &ns, "k").len() == 1
    });
    let grant_token = first_grant_token(&server, &ns, "k");
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let first = taken
        .recv_timeout(BOUND)
        .expect("the first waiter took the grant");
    let lock = lock_name(&ns, "k");
    assert_eq!(
        get(&server, &lock),
        Some(format!("{grant_token}:{}", F::fence(&first).get())),
        "held under the grant token"
    );
    // Gone from Redis, still held by the first waiter.
    let _ = server.query(redis::cmd("DEL").arg(&lock));
    // With the server stopped: the subscriber is killed, then the other
    // locker's try grants the free key to the registration at the head
    // (its notice goes out to no subscriber of the locker).
    let mut raw = server.conn();
    let paused = server.pause_guard();
    let kill = spawn("kill", move || {
        let killed: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut raw)
            .expect("CLIENT KILL");
        killed
    });
    let_pass(Duration::from_millis(50));
    let attempt = {
        let other = other.clone();
        spawn("try", move || other.acquire_with("k", no_wait()).is_err())
    };
    let_pass(Duration::from_millis(50));
    drop(paused);
    assert_eq!(kill.join_within(BOUND), 1, "the locker's subscriber");
    assert!(attempt.join_within(BOUND), "busy: it granted the key");
    let second = taken
        .recv_timeout(BOUND)
        .expect("the next waiter claimed the grant within the bound");
    assert!(F::fence(&second) > F::fence(&first));
    assert_eq!(F::release(second).unwrap(), ReleaseOutcome::Released);
    let _ = F::release(first);
    for w in waiters {
        w.join_within(BOUND);
    }
}
