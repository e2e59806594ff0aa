//! Multi-key leases under faults (docs/PROTOCOL.md §11), each written
//! once for any front end: a process taking `{a, b, c}` in a loop and
//! SIGKILLed at random points never leaves part of the keys held, nor
//! does Redis restarted without its data mid-loop, after which every key's
//! fences still increase; an acquire, renew or release whose outcome is
//! unknown (Redis SIGSTOPped) and is sent again grants, burns and frees
//! nothing twice.
//!
//! Lock values are read with one `MGET` (a consistent view): a hold is
//! `<token>:<fence>`, a waiting lease's reservation `<token>:r<age>` is
//! not a hold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redlease::{Operation, ReleaseOutcome, RenewOutcome};

use crate::behaviour::common::{
    config, connect, fence_name, get, granted, let_pass, lock_name, namespace, no_wait, pttl,
    refused, spawn, token_of, waiting, Bounded, BOUND,
};
use crate::behaviour::front::Front;
use crate::child;
use crate::matrix::{assert_outcome_unknown, warm_locker};
use crate::support::monitor::{Monitor, Monitored};
use crate::support::{wait_until, RedisServer};

/// The keys every row takes as one lease.
const KEYS: [&str; 3] = ["a", "b", "c"];

/// The lease of the killed process: a hold it leaves lapses within this.
const CHILD_LEASE: Duration = Duration::from_secs(2);

/// How long a contender waits for its keys: short, so that every
/// contender is soon between two cycles.
const CONTENDER_WAIT: Duration = Duration::from_millis(50);

/// A waiting lease's reservation lapses within `3 × notify_poll_interval`
/// (the default 250 ms).
const RESERVATION: Duration = Duration::from_millis(750);

/// The lock values of [`KEYS`], read with one `MGET`.
fn lock_values(server: &RedisServer, ns: &str) -> Vec<Option<String>> {
    let names: Vec<String> = KEYS.iter().map(|k| lock_name(ns, k)).collect();
    redis::cmd("MGET")
        .arg(&names)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("MGET on the test redis: {e}"))
}

/// The token of a hold (`<token>:<fence>`); `None` for a reservation.
fn holder(value: &str) -> Option<&str> {
    let (token, fence) = value.split_once(':')?;
    fence.parse::<u64>().is_ok().then_some(token)
}

/// Every token holding any of [`KEYS`] holds all of them (reservations
/// aside): no lease ever holds part of its keys.
fn assert_no_partial_hold(values: &[Option<String>]) {
    let mut holds: HashMap<&str, usize> = HashMap::new();
    for token in values.iter().flatten().filter_map(|v| holder(v)) {
        *holds.entry(token).or_default() += 1;
    }
    assert!(
        holds.values().all(|n| *n == KEYS.len()),
        "a partial hold: {} of {} keys held by one token ({} holders)",
        holds.values().min().copied().unwrap_or_default(),
        KEYS.len(),
        holds.len()
    );
}

/// A small xorshift generator for the kill points, seeded from the clock
/// (or `REDLEASE_FAULTS_SEED`) and printed, so a failing run can be
/// repeated.
struct KillPoints(u64);

impl KillPoints {
    fn seeded() -> Self {
        let seed = std::env::var("REDLEASE_FAULTS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("kill points: REDLEASE_FAULTS_SEED={seed}");
        KillPoints(seed | 1)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Contenders for the keys of the killed process, each a locker of its own
/// (without the hand-over, so none is ever granted a key by another's
/// release): one takes `a` alone, one `c` alone, one `{b, c}`, each waiting
/// at most [`CONTENDER_WAIT`] and holding briefly, until `stop`; then each
/// shuts its locker down. Each cycle runs under a read guard of `gate`, so
/// a holder of its write guard sees none of theirs held. Each returns the
/// fences it got, per key.
fn contenders<F: Front>(
    server: &RedisServer,
    ns: &str,
    stop: &Arc<AtomicBool>,
    gate: &Arc<RwLock<()>>,
) -> Vec<Bounded<Vec<(&'static str, u64)>>> {
    let sets: [&'static [&'static str]; 3] = [&["a"], &["c"], &["b", "c"]];
    sets.into_iter()
        .enumerate()
        .map(|(i, set)| {
            let locker: F = connect(server, config(ns).handover(false));
            let (stop, gate) = (stop.clone(), gate.clone());
            spawn(&format!("contender-{i}"), move || {
                let mut fences = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let _cycle = gate.read().unwrap_or_else(|e| e.into_inner());
                    // A wait that runs out just starts over.
                    if let [key] = set {
                        if let Ok(lease) = locker.acquire_with(key, waiting(CONTENDER_WAIT)) {
                            fences.push((*key, F::fence(&lease).get()));
                            let_pass(Duration::from_millis(1));
                            assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
                        }
                    } else if let Ok(lease) = locker.acquire_all_with(set, waiting(CONTENDER_WAIT))
                    {
                        fences.extend(
                            set.iter()
                                .zip(F::fences(&lease))
                                .map(|(k, f)| (*k, f.get())),
                        );
                        let_pass(Duration::from_millis(1));
                        assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
                    }
                }
                locker.shutdown().expect("a contender shuts down");
                fences
            })
        })
        .collect()
}

/// A child process takes `{a, b, c}` and releases it in a loop (holding it
/// 2 ms) against three contending lockers (`a`, `c`, `{b, c}`), and is
/// SIGKILLed after a random number of grants and a random delay: mid-wait,
/// mid-script, holding, or mid-release. At once, with the contenders
/// between cycles (none holds a key), one `MGET` shows the dead process
/// holding all three keys with one token or none (its reservations are not
/// holds), and each key it left lapses by Redis's clock within its bound
/// (the child's lease for a hold, `res_ms` for a reservation: `PTTL`).
/// Once the contenders stopped, the keys are taken at once with fences
/// above every fence granted before. Eight kills per run; what each left is
/// printed.
pub(crate) fn a_multi_key_loop_killed_at_random_points_never_leaves_a_partial_hold<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-multi-kill");
    let checker: F = connect(&server, config(&ns).handover(false).wait(BOUND));
    let mut points = KillPoints::seeded();
    let mut highest: HashMap<&str, u64> = HashMap::new();
    for round in 0..8 {
        let (stop, gate) = (Arc::new(AtomicBool::new(false)), Arc::new(RwLock::new(())));
        let running = contenders::<F>(&server, &ns, &stop, &gate);
        let mut looping = child::spawn_multi_loop::<F>(&server, &ns, &KEYS, CHILD_LEASE);
        for _ in 0..=points.below(3) {
            let fence = looping.fence_within(BOUND);
            let a = highest.entry("a").or_default();
            *a = (*a).max(fence);
        }
        let_pass(Duration::from_micros(points.below(5_000)));
        looping.kill();

        let between_cycles = gate.write().unwrap_or_else(|e| e.into_inner());
        let left = lock_values(&server, &ns);
        let held = left
            .iter()
            .flatten()
            .filter(|v| holder(v).is_some())
            .count();
        let reserved = left.iter().flatten().count() - held;
        eprintln!("round {round}: the killed process left {held} holds, {reserved} reservations");
        assert_no_partial_hold(&left);
        for (key, value) in KEYS.iter().zip(&left) {
            let Some(value) = value else { continue };
            let bound = if holder(value).is_some() {
                CHILD_LEASE
            } else {
                RESERVATION
            };
            let ms = pttl(&server, &lock_name(&ns, key));
            assert!(
                ms <= bound.as_millis() as i64,
                "round {round}: a key left by the killed process lives {ms} ms, beyond {bound:?}"
            );
        }
        stop.store(true, Ordering::SeqCst);
        drop(between_cycles);
        for t in running {
            for (key, fence) in t.join_within(BOUND) {
                let h = highest.entry(key).or_default();
                *h = (*h).max(fence);
            }
        }
        wait_until(BOUND, "the keys the killed process left lapse", || {
            lock_values(&server, &ns).iter().all(Option::is_none)
        });
        let lease = granted(
            checker.acquire_all_with(&KEYS, no_wait()),
            "all three, after the kill",
        );
        for (key, fence) in KEYS.iter().zip(F::fences(&lease)) {
            let h = highest.entry(key).or_default();
            assert!(fence.get() > *h, "round {round}: fences of a key increase");
            *h = fence.get();
        }
        assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
    }
}

/// What a looping thread saw: each grant's fences, with the restart's
/// progress (0 before, 1 during, 2 after) when its acquire began and
/// when it returned.
type Grants = Vec<Grant>;

/// One grant of [`Grants`].
type Grant = (u64, u64, Vec<u64>);

/// Two lockers take `{a, b, c}` in a loop while Redis is restarted
/// without its data (SIGKILL, nothing saved). Every `MGET` taken before
/// and after shows whole holds only; each locker's fences per key strictly
/// increase, and every fence granted by an acquire begun after the restart
/// is above every fence granted before it began (the counters were lost
/// and are seeded again from the server's clock).
pub(crate) fn restart_with_data_loss_mid_loop_keeps_fences_increasing_and_holds_whole<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-multi-restart");
    let phase = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let loops: Vec<Bounded<Grants>> = (0..2)
        .map(|i| {
            let locker: F = connect(&server, config(&ns).wait(BOUND));
            let (phase, stop, counts) = (phase.clone(), stop.clone(), counts.clone());
            spawn(&format!("loop-{i}"), move || {
                let mut grants = Grants::new();
                while !stop.load(Ordering::SeqCst) {
                    let began = phase.load(Ordering::SeqCst);
                    // Around the restart an attempt may fail; the loop goes on.
                    let Ok(lease) = locker.acquire_all_with(&KEYS, waiting(BOUND)) else {
                        continue;
                    };
                    let fences = F::fences(&lease).iter().map(|f| f.get()).collect();
                    grants.push((began, phase.load(Ordering::SeqCst), fences));
                    counts[i].fetch_add(1, Ordering::SeqCst);
                    let_pass(Duration::from_millis(1));
                    let _ = F::release_multi(lease);
                }
                grants
            })
        })
        .collect();
    let each_granted = |n: u64| counts.iter().all(|c| c.load(Ordering::SeqCst) >= n);
    wait_until(BOUND, "three grants each before the restart", || {
        assert_no_partial_hold(&lock_values(&server, &ns));
        each_granted(3)
    });
    phase.store(1, Ordering::SeqCst);
    let before: Vec<u64> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    server.restart();
    phase.store(2, Ordering::SeqCst);
    wait_until(BOUND * 2, "three grants each after the restart", || {
        assert_no_partial_hold(&lock_values(&server, &ns));
        counts
            .iter()
            .zip(&before)
            .all(|(c, b)| c.load(Ordering::SeqCst) >= b + 3)
    });
    stop.store(true, Ordering::SeqCst);
    let all: Vec<Grants> = loops
        .into_iter()
        .map(|t| t.join_within(BOUND * 2))
        .collect();

    for (i, key) in KEYS.iter().enumerate() {
        for grants in &all {
            let mine: Vec<u64> = grants.iter().map(|g| g.2[i]).collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "one locker's fences of {key} strictly increase: {mine:?}"
            );
        }
        let of = |keep: fn(&Grant) -> bool| -> Vec<u64> {
            all.iter()
                .flatten()
                .filter(|g| keep(g))
                .map(|g| g.2[i])
                .collect()
        };
        let old = of(|g| g.1 == 0);
        let new = of(|g| g.0 == 2);
        let (Some(old_max), Some(new_min)) = (old.iter().max(), new.iter().min()) else {
            panic!("grants before and after the restart: {old:?}, {new:?}");
        };
        assert!(
            new_min > old_max,
            "{key}: fences after the restart {new:?} above those before {old:?}"
        );
        let mut every = of(|_| true);
        let n = every.len();
        every.sort_unstable();
        every.dedup();
        assert_eq!(every.len(), n, "no fence of {key} was granted twice");
    }
    assert!(lock_values(&server, &ns).iter().all(Option::is_none));
}

/// Whether `c` is a multi-key acquire (two names a key: lock and counter;
/// five when it registers in the hand-over queues: also the queue, its
/// flag and the registration) of [`KEYS`] in `ns` by `token`.
fn is_multi_acquire_by(c: &Monitored, ns: &str, token: &str) -> bool {
    matches!(c.script_call(), Some((keys, args))
        if (keys.len() == 2 * KEYS.len() || keys.len() == 5 * KEYS.len())
            && keys[0] == lock_name(ns, KEYS[0]) && args[0] == token)
}

/// Whether `c` is a multi-key release of [`KEYS`] in `ns` by `token` (with
/// the hand-over it also names their queues' flags, their counters and
/// their queues; its second argument is the publish command, where an
/// acquire's is the lease and a renew has no more).
fn is_multi_release_by(c: &Monitored, ns: &str, token: &str) -> bool {
    matches!(c.script_call(), Some((keys, args))
        if (keys.len() == KEYS.len() || keys.len() == 4 * KEYS.len())
            && keys[0] == lock_name(ns, KEYS[0])
            && args[0] == token && args.len() > 2 && args[1].ends_with("PUBLISH"))
}

/// The fences of [`KEYS`] a lease holds in Redis: every lock is
/// `<token>:<fence>` with one token, and each counter is at its fence.
fn assert_held_with(server: &RedisServer, ns: &str, token: &str, fences: &[u64]) {
    for (key, fence) in KEYS.iter().zip(fences) {
        assert_eq!(
            get(server, &lock_name(ns, key)),
            Some(format!("{token}:{fence}"))
        );
        assert_eq!(
            get(server, &fence_name(ns, key)),
            Some(fence.to_string()),
            "the counter of {key} moved once"
        );
    }
}

/// A multi-key acquire sent to a SIGSTOPped Redis times out (outcome
/// unknown) and, while its wait lasts, is sent again with the same token;
/// Redis, resumed, runs the buffered attempts: the first takes all three
/// keys, the others find them the token's own and answer the same fences.
/// The lease holds the fences its counters hold (none burnt twice),
/// `MONITOR` shows the acquire ran at least twice with the one token, the
/// locker counts one acquire, and the keys are busy for others until the
/// release.
pub(crate) fn a_multi_key_acquire_of_unknown_outcome_is_sent_again_and_answers_the_same_fences<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-multi-unknown");
    let monitor = Monitor::start(&server);
    let locker = warm_locker::<F>(&server, &ns);
    let warm = granted(locker.acquire_all_with(&KEYS, no_wait()), "warm-up");
    let warm_fences = F::fences(&warm);
    F::release_multi(warm).unwrap();
    let (acquires, sent) = (locker.stats().acquires, locker.stats().scripts_sent);

    let lease = {
        let _paused = server.pause_guard();
        let l = locker.clone();
        let t = spawn("acquire_all", move || {
            l.acquire_all_with(&KEYS, waiting(BOUND))
        });
        wait_until(
            BOUND,
            "the acquire and a re-send went to the stopped server",
            || locker.stats().scripts_sent >= sent + 2,
        );
        t
    };
    let lease = granted(lease.join_within(BOUND), "all three, after SIGCONT");
    let fences: Vec<u64> = F::fences(&lease).iter().map(|f| f.get()).collect();
    assert!(fences.iter().zip(&warm_fences).all(|(f, w)| *f > w.get()));
    let token = token_of(&server, &ns, "a");
    assert_held_with(&server, &ns, &token, &fences);
    let runs = monitor.count(&server, |c| is_multi_acquire_by(c, &ns, &token));
    assert!(runs >= 2, "the acquire ran {runs} time(s)");
    assert_eq!(locker.stats().acquires, acquires + 1, "one grant");

    let other: F = connect(&server, config(&ns));
    for key in KEYS {
        let e = refused(other.acquire_with(key, no_wait()), "a key of the lease");
        assert_eq!(e.code(), "LOCK_BUSY");
    }
    assert_eq!(F::renew_multi(&lease).unwrap(), RenewOutcome::Renewed);
    assert_held_with(&server, &ns, &token, &fences);
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
    let next = granted(other.acquire_all_with(&KEYS, no_wait()), "free again");
    assert!(F::fences(&next)
        .iter()
        .zip(&fences)
        .all(|(n, f)| n.get() > *f));
    F::release_multi(next).unwrap();
}

/// A multi-key renew and a release whose outcomes are unknown (Redis
/// SIGSTOPped) are harmless when they run late and when they are sent
/// again. The renew ends the lease (never valid again; a later renew is
/// `Expired` without asking Redis), its keys stay whole until the release
/// frees them, and the renew re-sent (from `MONITOR`) after another lease
/// took the keys answers conflict and changes nothing. The release, run
/// on resume, frees all three; after another locker took `b`, shutdown
/// sends it again with the same token (`MONITOR`: twice): `b`'s holder
/// keeps its lock, no counter moves, and the holder still renews.
pub(crate) fn multi_key_renews_and_releases_of_unknown_outcome_are_harmless_sent_again<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-multi-unknown-rr");
    let monitor = Monitor::start(&server);
    let locker = warm_locker::<F>(&server, &ns);
    let other: F = connect(&server, config(&ns));
    let counters = || -> Vec<Option<String>> {
        KEYS.iter()
            .map(|k| get(&server, &fence_name(&ns, k)))
            .collect()
    };

    // Scripts Redis has cached, so a late `EVALSHA` runs.
    let warm = granted(locker.acquire_all_with(&KEYS, no_wait()), "warm-up");
    assert_eq!(F::renew_multi(&warm).unwrap(), RenewOutcome::Renewed);
    F::release_multi(warm).unwrap();

    let lease = granted(locker.acquire_all_with(&KEYS, no_wait()), "to renew");
    let token = token_of(&server, &ns, "a");
    let (lease, result) = {
        let _paused = server.pause_guard();
        spawn("renew", move || {
            let result = F::renew_multi(&lease);
            (lease, result)
        })
        .join_within(BOUND)
    };
    assert_outcome_unknown(
        &refused(result, "renew on a paused server"),
        Operation::Renew,
    );
    assert!(
        !F::multi_is_valid(&lease),
        "an unknown renew ends the lease"
    );
    assert_eq!(F::renew_multi(&lease).unwrap(), RenewOutcome::Expired);
    assert_no_partial_hold(&lock_values(&server, &ns));
    let _ = F::release_multi(lease);
    let taken = granted(other.acquire_all_with(&KEYS, waiting(BOUND)), "after it");
    let taken_values = lock_values(&server, &ns);
    monitor.catch_up(&server);
    let renew = monitor
        .seen()
        .into_iter()
        .find(|c| {
            matches!(c.script_call(), Some((keys, args))
                if keys.len() == KEYS.len() && args.len() == 2 && args[0] == token)
        })
        .expect("MONITOR saw the renew");
    assert_eq!(server.query(&renew.to_cmd()), redis::Value::Int(2));
    assert_eq!(lock_values(&server, &ns), taken_values, "nothing changed");
    assert_eq!(F::release_multi(taken).unwrap(), ReleaseOutcome::Released);

    let lease = granted(locker.acquire_all_with(&KEYS, no_wait()), "to release");
    let token = token_of(&server, &ns, "a");
    let e = {
        let _paused = server.pause_guard();
        refused(
            spawn("release", move || F::release_multi(lease).map(|_| ())).join_within(BOUND),
            "release on a paused server",
        )
    };
    assert_outcome_unknown(&e, Operation::Release);
    let b = granted(other.acquire_with("b", waiting(BOUND)), "b, once released");
    let (b_value, moved) = (get(&server, &lock_name(&ns, "b")), counters());
    locker
        .shutdown()
        .expect("the re-sent release is answered with an outcome");
    assert_eq!(locker.stats().tracked_leases, 0);
    let releases = monitor.count(&server, |c| is_multi_release_by(c, &ns, &token));
    assert_eq!(releases, 2, "the release ran once late and once re-sent");
    assert_eq!(get(&server, &lock_name(&ns, "b")), b_value, "b's holder");
    assert_eq!(counters(), moved, "no counter moved");
    assert_eq!(F::renew(&b).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release(b).unwrap(), ReleaseOutcome::Released);
}

/// A try-once multi-key acquire sent to a SIGSTOPped Redis is
/// `OUTCOME_UNKNOWN`; Redis, resumed, runs it and all three keys are held
/// by its token (whole). The locker's next operation releases that
/// orphaned token from every key at once, so another locker takes all
/// three at once with higher fences.
pub(crate) fn a_try_once_multi_key_acquire_of_unknown_outcome_is_released_whole_later<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-multi-orphan");
    let locker = warm_locker::<F>(&server, &ns);
    F::release_multi(granted(
        locker.acquire_all_with(&KEYS, no_wait()),
        "warm-up",
    ))
    .unwrap();

    let e = {
        let _paused = server.pause_guard();
        let l = locker.clone();
        refused(
            spawn("acquire_all", move || l.acquire_all_with(&KEYS, no_wait())).join_within(BOUND),
            "try once on a paused server",
        )
    };
    assert_outcome_unknown(&e, Operation::Acquire);
    let left = lock_values(&server, &ns);
    assert_no_partial_hold(&left);
    assert!(
        left.iter().all(|v| v.as_deref().and_then(holder).is_some()),
        "the timed-out acquire was applied: all three held"
    );
    let fences: Vec<u64> = left
        .iter()
        .flatten()
        .filter_map(|v| v.split_once(':')?.1.parse().ok())
        .collect();

    F::release(granted(locker.acquire("other"), "next operation")).unwrap();
    assert!(
        lock_values(&server, &ns).iter().all(Option::is_none),
        "the orphan was released from every key"
    );
    let other: F = connect(&server, config(&ns));
    let next = granted(other.acquire_all_with(&KEYS, no_wait()), "all three free");
    assert!(F::fences(&next)
        .iter()
        .zip(&fences)
        .all(|(n, f)| n.get() > *f));
    F::release_multi(next).unwrap();
}
