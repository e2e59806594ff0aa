//! Multi-key leases (docs/PROTOCOL.md §6): all keys at once or none, a fence
//! per key from the key's own counter, exclusion against single-key
//! holders, waiting that never deadlocks nor starves, and input checked
//! before anything is sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redlease::{Error, ReleaseOutcome, RenewOutcome};

use super::common::{
    config, connect, exists, fence_name, get, granted, key_sha, leased, lock_name, namespace,
    no_wait, polls_off, refused, release_channel, spawn, token_of, waiting, BOUND,
};
use super::fences::{calls, lock_commands};
use super::front::Front;
use super::handover::{queue_name, queued, reg_name};
use crate::support::{wait_until, RedisServer};

/// Three keys are held at once, each as `<token>:<fence>` under its own
/// lock name with one token, each fence from that key's counter; single-key
/// acquires of them are busy; the release frees all three, and the next
/// single-key fence of each key is above the multi-key lease's.
pub(crate) fn all_keys_are_taken_at_once_each_with_its_own_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-all");
    let locker: F = connect(&server, config(&ns));
    let other: F = connect(&server, config(&ns));
    let before = granted(other.acquire_with("b", no_wait()), "b alone first");
    let b_first = F::fence(&before);
    F::release(before).expect("release b");

    let keys = ["a", "b", "c"];
    let lease = granted(locker.acquire_all_with(&keys, no_wait()), "all three");
    let fences = F::fences(&lease);
    assert_eq!(fences.len(), 3);
    assert!(fences[1] > b_first, "b's fence comes from b's own counter");
    let mut tokens = Vec::new();
    for (key, fence) in keys.iter().zip(&fences) {
        assert_eq!(F::fence_of(&lease, key), Some(*fence));
        let value = get(&server, &lock_name(&ns, key)).expect("every key is held");
        let (token, stored) = value.split_once(':').expect("<token>:<fence>");
        assert_eq!(stored, fence.get().to_string());
        assert_eq!(
            get(&server, &fence_name(&ns, key)),
            Some(fence.get().to_string())
        );
        tokens.push(token.to_owned());
    }
    assert!(tokens.windows(2).all(|w| w[0] == w[1]), "one token");
    assert_eq!(F::fence_of(&lease, "d"), None);
    for key in keys {
        let e = refused(other.acquire_with(key, no_wait()), "a key of the set");
        assert_eq!(e.code(), "LOCK_BUSY");
    }
    let debug = F::multi_debug(&lease);
    assert!(
        debug.contains("MultiLease") && !debug.contains(&tokens[0]),
        "{debug}"
    );

    assert_eq!(F::renew_multi(&lease).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
    for (key, fence) in keys.iter().zip(&fences) {
        assert!(!exists(&server, &lock_name(&ns, key)), "released together");
        let next = granted(other.acquire_with(key, no_wait()), "free again");
        assert!(F::fence(&next) > *fence, "fences keep increasing per key");
        F::release(next).unwrap();
    }
}

/// A multi-key acquire finding one key held takes nothing: a try-once
/// leaves every key as it was; a waiter reserves the free keys (others
/// see them held) and is granted all of them once the held key is
/// released, by its notification (safety polls are 30 s).
pub(crate) fn a_held_key_makes_it_wait_reserving_the_free_ones<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-wait");
    let slow = polls_off(&ns);
    let holder: F = connect(&server, slow.clone());
    let other: F = connect(&server, slow.clone());
    let locker = Arc::new(connect::<F>(&server, slow));
    let held = granted(holder.acquire("b"), "b held alone");

    let e = refused(locker.acquire_all_with(&["a", "b"], no_wait()), "try once");
    assert_eq!(e.code(), "LOCK_BUSY");
    assert!(
        !exists(&server, &lock_name(&ns, "a")),
        "a try-once reserves nothing"
    );

    let waiter = {
        let locker = locker.clone();
        spawn("multi-waiter", move || {
            let lease = granted(
                locker.acquire_all_with(&["a", "b"], waiting(BOUND)),
                "a and b",
            );
            let fences = F::fences(&lease);
            F::release_multi(lease).unwrap();
            fences
        })
    };
    wait_until(BOUND, "a reserved by the waiting lease", || {
        get(&server, &lock_name(&ns, "a")).is_some_and(|v| v.contains(":r"))
    });
    let e = refused(other.acquire_with("a", no_wait()), "a reserved key");
    assert_eq!(e.code(), "LOCK_BUSY", "a reservation counts as held");
    let b_fence = F::fence(&held);
    F::release(held).unwrap();
    let fences = waiter.join_within(BOUND);
    assert!(fences[1] > b_fence);
}

/// Two lockers, each with two threads, take overlapping sets in opposite
/// orders (`{a,b}`, `{b,a}`, `{b,c}`, `{c,a}`) in a loop: every acquire is
/// granted within its wait (no deadlock), and no key ever has two holders.
pub(crate) fn overlapping_sets_in_opposite_orders_never_deadlock<F: Front>() {
    const ROUNDS: usize = 12;
    let server = RedisServer::start();
    let ns = namespace("multi-deadlock");
    let lockers: Vec<Arc<F>> = (0..2)
        .map(|_| Arc::new(connect::<F>(&server, config(&ns).wait(BOUND))))
        .collect();
    let in_use: Arc<HashMap<&'static str, AtomicBool>> = Arc::new(
        ["a", "b", "c"]
            .into_iter()
            .map(|k| (k, AtomicBool::new(false)))
            .collect(),
    );
    let sets: [[&'static str; 2]; 4] = [["a", "b"], ["b", "a"], ["b", "c"], ["c", "a"]];
    let threads: Vec<_> = sets
        .into_iter()
        .enumerate()
        .map(|(i, set)| {
            let locker = lockers[i % 2].clone();
            let in_use = in_use.clone();
            spawn(&format!("set-{i}"), move || {
                for _ in 0..ROUNDS {
                    let lease = granted(locker.acquire_all_with(&set, waiting(BOUND)), "a set");
                    for key in set {
                        assert!(!in_use[key].swap(true, Ordering::SeqCst), "two holders");
                    }
                    for key in set {
                        in_use[key].store(false, Ordering::SeqCst);
                    }
                    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
                }
            })
        })
        .collect();
    for t in threads {
        t.join_within(BOUND * 3);
    }
}

/// A multi-key waiter for `{a, b}` against four single-key contenders
/// that keep `a` and `b` held in turn is granted within its wait, and
/// never overlaps them.
pub(crate) fn a_multi_key_waiter_is_not_starved_by_single_key_contenders<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-starve");
    let in_use: Arc<HashMap<&'static str, AtomicBool>> = Arc::new(
        ["a", "b"]
            .into_iter()
            .map(|k| (k, AtomicBool::new(false)))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = (0..4)
        .map(|i| {
            let locker: F = connect(&server, config(&ns).wait(BOUND));
            let key = if i % 2 == 0 { "a" } else { "b" };
            let (in_use, stop) = (in_use.clone(), stop.clone());
            spawn(&format!("single-{i}"), move || {
                let mut grants = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let lease = granted(locker.acquire(key), "a single key");
                    assert!(!in_use[key].swap(true, Ordering::SeqCst), "two holders");
                    super::common::let_pass(Duration::from_millis(2));
                    in_use[key].store(false, Ordering::SeqCst);
                    F::release(lease).unwrap();
                    grants += 1;
                }
                grants
            })
        })
        .collect();
    let multi: F = connect(&server, config(&ns).wait(BOUND));
    for _ in 0..3 {
        let lease = granted(multi.acquire_all_with(&["a", "b"], waiting(BOUND)), "both");
        for key in ["a", "b"] {
            assert!(!in_use[key].swap(true, Ordering::SeqCst), "two holders");
        }
        for key in ["a", "b"] {
            in_use[key].store(false, Ordering::SeqCst);
        }
        F::release_multi(lease).unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let grants: u32 = contenders.into_iter().map(|c| c.join_within(BOUND)).sum();
    assert!(grants > 0, "the single-key contenders ran meanwhile");
}

/// Bad key sets are refused with `InvalidKey` naming positions, never a
/// key, and nothing reaches Redis.
pub(crate) fn multi_key_input_is_checked_before_anything_is_sent<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-input");
    let locker: F = connect(&server, config(&ns));
    server.reset_stats();
    let many: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let long = "x".repeat(2000);
    let cases: [(&[&str], &str); 4] = [
        (&[], "1 to 64 keys, got 0"),
        (&many, "1 to 64 keys, got 65"),
        (&["secret-a", "b", "secret-a"], "keys 1 and 3 are the same"),
        (&["a", ""], "key 2 must not be empty"),
    ];
    for (keys, reason) in cases {
        let e = refused(locker.acquire_all_with(keys, no_wait()), reason);
        assert!(matches!(e, Error::InvalidKey { .. }), "{e:?}");
        assert!(e.to_string().contains(reason), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }
    let e = refused(
        locker.acquire_all_with(&["a", &long], no_wait()),
        "too long",
    );
    assert!(e.to_string().contains("key 2 is 2000 bytes long"), "{e}");
    let stats = server.commandstats();
    let scripts: u64 = ["evalsha", "eval", "script|load"]
        .iter()
        .filter_map(|c| stats.get(*c))
        .sum();
    assert_eq!(scripts, 0, "nothing was sent: {stats:?}");
}

/// A renew that finds one key gone (evicted, deleted) gives up the others
/// too: the lease never lives on with part of its keys.
pub(crate) fn a_renew_that_finds_a_key_gone_gives_up_every_key<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-renew");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire_all_with(&["a", "b"], no_wait()), "both");
    let _: i64 = redis::cmd("DEL")
        .arg(lock_name(&ns, "b"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(F::renew_multi(&lease).unwrap(), RenewOutcome::Expired);
    assert!(!F::multi_is_valid(&lease));
    assert!(!exists(&server, &lock_name(&ns, "a")), "a was given up");
}

/// A multi-key waiter whose wait runs out leaves no reservation behind:
/// the key it reserved is free for others at once, not after the
/// reservation's expiry.
pub(crate) fn a_waiter_that_gives_up_leaves_no_reservation<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-leave");
    let holder: F = connect(&server, config(&ns));
    let locker: F = connect(&server, config(&ns));
    let held = granted(holder.acquire("b"), "b held");
    let e = refused(
        locker.acquire_all_with(&["a", "b"], waiting(Duration::from_millis(300))),
        "b stays held",
    );
    assert_eq!(e.code(), "WAIT_TIMEOUT");
    assert!(
        !exists(&server, &lock_name(&ns, "a")),
        "the reservation went with the waiter"
    );
    let a = granted(holder.acquire_with("a", no_wait()), "a is free");
    F::release(a).unwrap();
    F::release(held).unwrap();
}

/// A multi-key lease granted on keys that came free by expiry, not by a
/// hand-over, takes its registrations out of their queues as it is
/// granted: its release then frees every key rather than reserving each
/// for the lease that just ended (for `res_ms`, 90 s here).
pub(crate) fn a_released_multi_key_lease_leaves_no_reservation_for_itself<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-self");
    let holder: F = connect(&server, config(&ns));
    let short = leased(Duration::from_millis(300));
    let a = granted(holder.acquire_with("a", short.clone()), "a held");
    let b = granted(holder.acquire_with("b", short), "b held");
    let locker: F = connect(&server, polls_off(&ns));
    // Both keys are busy at its first attempt, so it registers in both
    // queues; both leases then end by their TTL, which hands nothing over.
    let lease = granted(
        locker.acquire_all_with(&["a", "b"], waiting(BOUND)),
        "a and b once the holder's leases lapsed",
    );
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
    for key in ["a", "b"] {
        assert_eq!(
            get(&server, &lock_name(&ns, key)).map(|v| v.contains(":r")),
            None,
            "{key} is free after the release, not reserved"
        );
    }
    let other: F = connect(&server, config(&ns));
    let both = granted(other.acquire_all_with(&["a", "b"], no_wait()), "free");
    F::release_multi(both).unwrap();
    let _ = (F::release(a), F::release(b));

    // The script alone: an attempt registers (b busy) and its reply is
    // lost, so the next one still sends no age; its grant takes the
    // registration out all the same.
    let keys = ["a", "b"];
    let mut names: Vec<String> = keys.iter().map(|k| lock_name(&ns, k)).collect();
    names.extend(keys.iter().map(|k| fence_name(&ns, k)));
    names.extend(keys.iter().map(|k| queue_name(&ns, k)));
    names.extend(
        keys.iter()
            .map(|k| format!("{ns}:lock-queued:{{{}}}", key_sha(k))),
    );
    names.extend(keys.iter().map(|k| reg_name(&ns, k, "r1")));
    let args = [
        "0123456789abcdef0123456789abcdef",
        "5000",
        "0",
        "0",
        "750",
        "r1",
        "750",
    ]
    .map(String::from)
    .to_vec();
    server.query(redis::cmd("SET").arg(lock_name(&ns, "b")).arg("other:1"));
    assert_busy(&eval_multi(&server, "MULTI_ACQUIRE_LUA", &names, &args));
    assert_eq!(queued(&server, &ns, "b").len(), 1, "registered behind b");
    server.query(redis::cmd("DEL").arg(lock_name(&ns, "b")));
    let fences = granted_fences(&eval_multi(&server, "MULTI_ACQUIRE_LUA", &names, &args));
    assert_eq!(fences.len(), 2);
    assert!(queued(&server, &ns, "b").is_empty(), "out of b's queue");
    assert!(!exists(&server, &reg_name(&ns, "b", "r1")));
}

/// A locker shut down while its multi-key waiter waits leaves no
/// reservation behind either: shutdown's cleanup releases it with the
/// tracked leases, even when the waiter's thread (or task) ends after the
/// cleanup was taken. Three rounds, as the race is the waiter's.
pub(crate) fn shutdown_releases_a_waiting_multi_key_leases_reservations<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-shutdown");
    let holder: F = connect(&server, polls_off(&ns));
    let held = granted(holder.acquire("b"), "b held");
    for round in 0..3 {
        let locker = Arc::new(connect::<F>(&server, polls_off(&ns)));
        let waiter = {
            let locker = locker.clone();
            spawn("multi-waiter", move || {
                locker
                    .acquire_all_with(&["a", "b"], waiting(BOUND))
                    .map(|_| ())
                    .map_err(|e| e.code())
            })
        };
        wait_until(BOUND, "a reserved by the waiting lease", || {
            get(&server, &lock_name(&ns, "a")).is_some_and(|v| v.contains(":r"))
        });
        locker.shutdown().expect("shutdown");
        assert!(
            !exists(&server, &lock_name(&ns, "a")),
            "round {round}: the reservation went with the shut-down locker"
        );
        assert_eq!(waiter.join_within(BOUND), Err("SHUTTING_DOWN"));
    }
    F::release(held).unwrap();
}

/// `EVAL` of a multi-key script's source (`super::fences::script_lua`).
fn eval_multi(server: &RedisServer, script: &str, keys: &[String], args: &[String]) -> Value {
    server.query(
        redis::cmd("EVAL")
            .arg(super::fences::script_lua(script))
            .arg(keys.len())
            .arg(keys)
            .arg(args),
    )
}

/// The acquire script's arguments (no hand-over): the locks, then the
/// counters; a token, lease 5 s, no counter TTL, no age, trying once.
fn acquire_keys_and_args(ns: &str, keys: &[&str], token: &str) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = keys.iter().map(|k| lock_name(ns, k)).collect();
    names.extend(keys.iter().map(|k| fence_name(ns, k)));
    let args = [token, "5000", "0", "0", "0"].map(String::from).to_vec();
    (names, args)
}

/// Asserts an acquire reply is `['busy', …]`.
fn assert_busy(reply: &Value) {
    assert!(
        matches!(reply, Value::Array(items)
            if items.first() == Some(&Value::BulkString(b"busy".to_vec()))),
        "the keys are busy: {reply:?}"
    );
}

/// `['ok', f_1..f_n]` as fences.
fn granted_fences(reply: &Value) -> Vec<u64> {
    let Value::Array(items) = reply else {
        panic!("an acquire reply is an array, got {reply:?}");
    };
    assert_eq!(
        items.first(),
        Some(&Value::BulkString(b"ok".to_vec())),
        "a grant: {reply:?}"
    );
    items[1..]
        .iter()
        .map(|f| match f {
            Value::BulkString(digits) => String::from_utf8_lossy(digits).parse().unwrap(),
            other => panic!("a fence is a decimal bulk string, got {other:?}"),
        })
        .collect()
}

/// A client library re-sending a multi-key script after a timeout: the
/// acquire run again with the lease's token (taken by a locker, or run
/// twice by hand) answers the same fences and moves no counter; another
/// token is told the keys are busy and takes nothing. A renew run twice
/// renews twice; a release run twice answers released, then expired, and
/// run again after another holder took a key answers conflict and leaves
/// that holder's lock alone.
pub(crate) fn multi_key_scripts_run_again_with_one_token_answer_as_the_first_run<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-replay");
    let locker: F = connect(&server, config(&ns));
    let keys = ["a", "b", "c"];
    let counters = || -> Vec<Option<String>> {
        keys.iter()
            .map(|k| get(&server, &fence_name(&ns, k)))
            .collect()
    };

    // Replaying the locker's own acquire.
    let lease = granted(locker.acquire_all_with(&keys, no_wait()), "all three");
    let fences: Vec<u64> = F::fences(&lease).iter().map(|f| f.get()).collect();
    let token = token_of(&server, &ns, "a");
    let (names, args) = acquire_keys_and_args(&ns, &keys, &token);
    let replay = eval_multi(&server, "MULTI_ACQUIRE_LUA", &names, &args);
    assert_eq!(granted_fences(&replay), fences, "the same fences");
    let moved: Vec<Option<String>> = fences.iter().map(|f| Some(f.to_string())).collect();
    assert_eq!(counters(), moved, "no counter moved");
    assert_eq!(F::renew_multi(&lease).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);

    // The scripts alone, twice with one token, then with another.
    let mine = "0123456789abcdef0123456789abcdef";
    let theirs = "fedcba9876543210fedcba9876543210";
    let (_, mine_args) = acquire_keys_and_args(&ns, &keys, mine);
    let first_mine = granted_fences(&eval_multi(
        &server,
        "MULTI_ACQUIRE_LUA",
        &names,
        &mine_args,
    ));
    assert!(
        first_mine
            .iter()
            .zip(&fences)
            .all(|(now, before)| now > before),
        "each key's own counter: {fences:?} then {first_mine:?}"
    );
    let again = granted_fences(&eval_multi(
        &server,
        "MULTI_ACQUIRE_LUA",
        &names,
        &mine_args,
    ));
    assert_eq!(again, first_mine, "a replay answers the same fences");
    let moved: Vec<Option<String>> = first_mine.iter().map(|f| Some(f.to_string())).collect();
    assert_eq!(counters(), moved, "each counter moved once");
    for (key, fence) in keys.iter().zip(&first_mine) {
        assert_eq!(
            get(&server, &lock_name(&ns, key)),
            Some(format!("{mine}:{fence}"))
        );
    }
    let (_, their_args) = acquire_keys_and_args(&ns, &keys, theirs);
    assert_busy(&eval_multi(
        &server,
        "MULTI_ACQUIRE_LUA",
        &names,
        &their_args,
    ));
    assert_eq!(counters(), moved, "a busy attempt moves no counter");

    let locks: Vec<String> = keys.iter().map(|k| lock_name(&ns, k)).collect();
    let renew_args = [mine, "5000"].map(String::from).to_vec();
    for _ in 0..2 {
        let renewed = eval_multi(&server, "MULTI_RENEW_LUA", &locks, &renew_args);
        assert_eq!(renewed, Value::Int(1), "renewed, also when run again");
    }
    // No hand-over; the one channel every key shares.
    let release_args = [mine, "PUBLISH", "", &format!("{ns}:lock-released")]
        .map(String::from)
        .to_vec();
    let release = || eval_multi(&server, "MULTI_RELEASE_LUA", &locks, &release_args);
    assert_eq!(release(), Value::Int(1), "released");
    assert_eq!(release(), Value::Int(0), "run again: expired, nothing held");
    let other = granted(locker.acquire_with("b", no_wait()), "b, freed");
    let b_value = get(&server, &lock_name(&ns, "b"));
    assert_eq!(
        release(),
        Value::Int(2),
        "run again: conflict with b's holder"
    );
    assert_eq!(get(&server, &lock_name(&ns, "b")), b_value, "b left alone");
    assert!(F::fence(&other).get() > first_mine[1]);
    assert_eq!(F::renew(&other).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release(other).unwrap(), ReleaseOutcome::Released);
}

/// A partial hold can only come from eviction or a manual `DEL`, and the
/// acquire script leaves none behind it: run with the token that holds
/// two of three keys, it takes all three again with fresh fences; when
/// another token took the missing key, a try-once run deletes the keys the
/// token still holds, and a waiting run turns them into reservations
/// (`<token>:r<age>`, within `res_ms`), never holds. The lease's release
/// then frees its reservations and reports the conflict.
pub(crate) fn the_acquire_script_never_leaves_a_partial_hold_it_finds<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-partial");
    let locker: F = connect(&server, config(&ns));
    let keys = ["a", "b", "c"];
    let lease = granted(locker.acquire_all_with(&keys, no_wait()), "all three");
    let first: Vec<u64> = F::fences(&lease).iter().map(|f| f.get()).collect();
    let mine = token_of(&server, &ns, "a");
    let mine = mine.as_str();
    let (names, args) = acquire_keys_and_args(&ns, &keys, mine);
    let acquire = |args: &[String]| eval_multi(&server, "MULTI_ACQUIRE_LUA", &names, args);
    let set = |key: &str, value: &str| {
        server.query(
            redis::cmd("SET")
                .arg(lock_name(&ns, key))
                .arg(value)
                .arg("PX")
                .arg(5000),
        )
    };
    let del = |key: &str| server.query(redis::cmd("DEL").arg(lock_name(&ns, key)));

    del("b");
    let again = granted_fences(&acquire(&args));
    assert!(
        again.iter().zip(&first).all(|(a, f)| a > f),
        "fresh fences for every key: {first:?} then {again:?}"
    );
    for (key, fence) in keys.iter().zip(&again) {
        assert_eq!(
            get(&server, &lock_name(&ns, key)),
            Some(format!("{mine}:{fence}"))
        );
    }

    set("b", "fedcba9876543210fedcba9876543210:1");
    assert_busy(&acquire(&args));
    assert!(!exists(&server, &lock_name(&ns, "a")), "try once: deleted");
    assert!(!exists(&server, &lock_name(&ns, "c")), "try once: deleted");

    set("a", &format!("{mine}:{}", again[0]));
    set("c", &format!("{mine}:{}", again[2]));
    let waiting_args = [mine, "5000", "0", "0", "750"].map(String::from);
    assert_busy(&acquire(&waiting_args));
    for key in ["a", "c"] {
        let value = get(&server, &lock_name(&ns, key)).expect("reserved");
        assert!(value.starts_with(&format!("{mine}:r")), "{value}");
        assert!(super::common::pttl(&server, &lock_name(&ns, key)) <= 750);
    }
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Conflict);
    assert!(!exists(&server, &lock_name(&ns, "a")), "reservation freed");
    assert!(!exists(&server, &lock_name(&ns, "c")), "reservation freed");
}

/// With the hand-over, a multi-key waiter takes its turn in a held key's
/// queue: registered between two single-key waiters of other lockers, it
/// gets the key (reserved for it by the release, no fence spent) after the
/// first and before the second. Safety polls are 30 s: only the hand-over
/// and its notifications move the key.
pub(crate) fn a_multi_key_waiter_takes_its_turn_in_a_held_keys_queue<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-turn");
    let slow = polls_off(&ns);
    let queue = format!("{ns}:lock-queue:{{{}}}", key_sha("b"));
    let queued = |n: usize| {
        let len: usize = redis::cmd("LLEN")
            .arg(&queue)
            .query(&mut server.conn())
            .unwrap();
        len == n
    };
    let holder: F = connect(&server, slow.clone());
    let held = granted(holder.acquire("b"), "b held");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let single = |name: &'static str| {
        let locker: F = connect(&server, slow.clone());
        let order = order.clone();
        spawn(name, move || {
            let lease = granted(locker.acquire("b"), name);
            order.lock().unwrap().push(name);
            F::release(lease).unwrap();
        })
    };
    let first = single("first single");
    wait_until(BOUND, "the first single-key waiter queued", || queued(1));
    let multi = {
        let locker: F = connect(&server, slow.clone());
        let order = order.clone();
        spawn("multi", move || {
            let lease = granted(locker.acquire_all_with(&["a", "b"], waiting(BOUND)), "a, b");
            order.lock().unwrap().push("multi");
            F::release_multi(lease).unwrap();
        })
    };
    wait_until(BOUND, "the multi-key waiter queued", || queued(2));
    let second = single("second single");
    wait_until(BOUND, "the second single-key waiter queued", || queued(3));
    F::release(held).unwrap();
    first.join_within(BOUND);
    multi.join_within(BOUND);
    second.join_within(BOUND);
    assert_eq!(
        *order.lock().unwrap(),
        ["first single", "multi", "second single"]
    );
}

/// An uncontended multi-key cycle of three keys costs Redis one `MSET` of
/// the counters (once they exist), a `SET` per lock, one `DEL` and, with
/// nobody subscribed to the release channel, one `PUBLISH` (the first
/// reached nobody, so the others would not either). With a subscriber,
/// every key's release message goes out, in the keys' order.
pub(crate) fn an_uncontended_multi_key_cycle_sets_counters_at_once_and_publishes_what_is_heard<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("multi-cost");
    let locker: F = connect(&server, config(&ns));
    let keys = ["a", "b", "c"];
    // Warm: the scripts are cached and the counters exist.
    let lease = granted(locker.acquire_all_with(&keys, no_wait()), "warm-up");
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);

    server.reset_stats();
    let lease = granted(locker.acquire_all_with(&keys, no_wait()), "all three");
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
    let cycle = |publish: u64| {
        calls(&[
            ("evalsha", 2),
            ("mget", 2),
            ("time", 1),
            ("mset", 1),
            ("set", 3),
            ("del", 1),
            ("publish", publish),
        ])
    };
    assert_eq!(
        lock_commands(&server.commandstats()),
        cycle(1),
        "one uncontended cycle, nobody listening"
    );

    let mut conn = server.conn();
    let mut subscriber = conn.as_pubsub();
    subscriber
        .subscribe(release_channel(&ns))
        .expect("SUBSCRIBE on the test redis");
    subscriber
        .set_read_timeout(Some(BOUND))
        .expect("a bounded read");
    server.reset_stats();
    let lease = granted(locker.acquire_all_with(&keys, no_wait()), "all three");
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        lock_commands(&server.commandstats()),
        cycle(3),
        "one uncontended cycle, someone listening"
    );
    let heard: Vec<String> = (0..keys.len())
        .map(|_| {
            let message = subscriber.get_message().expect("a release message");
            message.get_payload().expect("a text payload")
        })
        .collect();
    let expected: Vec<String> = keys.iter().map(|k| key_sha(k)).collect();
    assert_eq!(heard, expected, "each key's release message");
}

/// The release publishes each freed key's message, the key's own digest
/// (also under a hash tag, where the lock's name ends with it), on the
/// channel sent for that key: one for every key (one server; one tag on a
/// Cluster), or each key's own (keys of one Cluster slot without one tag).
pub(crate) fn the_multi_key_release_publishes_each_keys_digest_on_its_channel<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-channels");
    let token = "0123456789abcdef0123456789abcdef";
    let tagged = format!("{ns}:lock:{{{}}}:{}", key_sha("t"), key_sha("x{t}1"));
    let locks = vec![lock_name(&ns, "a"), tagged, lock_name(&ns, "b")];
    let messages = [key_sha("a"), key_sha("x{t}1"), key_sha("b")];
    let channels: Vec<String> = (1..=3).map(|i| format!("{ns}:channel-{i}")).collect();
    let hold = || {
        for lock in &locks {
            server.query(
                redis::cmd("SET")
                    .arg(lock)
                    .arg(format!("{token}:7"))
                    .arg("PX")
                    .arg(5000),
            );
        }
    };
    let release = |channels: &[String]| {
        let mut args = [token, "PUBLISH", ""].map(String::from).to_vec();
        args.extend(channels.iter().cloned());
        eval_multi(&server, "MULTI_RELEASE_LUA", &locks, &args)
    };
    let mut conn = server.conn();
    let mut subscriber = conn.as_pubsub();
    for channel in &channels {
        subscriber
            .subscribe(channel)
            .expect("SUBSCRIBE on the test redis");
    }
    subscriber
        .set_read_timeout(Some(BOUND))
        .expect("a bounded read");
    let mut heard = |n: usize| -> Vec<(String, String)> {
        (0..n)
            .map(|_| {
                let message = subscriber.get_message().expect("a release message");
                let payload: String = message.get_payload().expect("a text payload");
                (message.get_channel_name().to_owned(), payload)
            })
            .collect()
    };

    hold();
    assert_eq!(release(&channels), Value::Int(1), "released");
    let each: Vec<(String, String)> = channels.iter().cloned().zip(messages.clone()).collect();
    assert_eq!(heard(3), each, "each key's digest on its own channel");
    hold();
    assert_eq!(release(&channels[1..2]), Value::Int(1), "released");
    let shared: Vec<(String, String)> = messages
        .iter()
        .map(|m| (channels[1].clone(), m.clone()))
        .collect();
    assert_eq!(heard(3), shared, "every key's digest on the one channel");
}

/// The grant computes every counter's next fence by docs/PROTOCOL.md §3's rule
/// (`max(counter + 1, TIME in ms × 1000)`) and writes the counters read
/// as plain integers in one `MSET`: a counter below the floor gets the
/// floor, one above it moves by one, a missing one is created at the floor
/// (`SET NX`), one past 2^53 goes through `INCR`; counters of one value
/// move alike. A counter that is not an integer is refused with nothing
/// held. With a `fence_counter_ttl` every counter is set on its own with
/// that expiry; without one, a counter written by the `MSET` keeps no
/// expiry another locker gave it.
pub(crate) fn the_multi_key_grant_moves_each_counter_by_the_fence_rule<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("multi-counters");
    let keys = ["below", "above", "missing", "huge", "expiring", "above-too"];
    let locks: Vec<String> = keys.iter().map(|k| lock_name(&ns, k)).collect();
    let counters: Vec<String> = keys.iter().map(|k| fence_name(&ns, k)).collect();
    let mut names = locks.clone();
    names.extend(counters.iter().cloned());
    let token = "0123456789abcdef0123456789abcdef";
    let acquire = |ttl: &str| {
        let args = [token, "5000", ttl, "0", "0"].map(String::from).to_vec();
        eval_multi(&server, "MULTI_ACQUIRE_LUA", &names, &args)
    };
    let set = |name: &str, value: &str| server.query(redis::cmd("SET").arg(name).arg(value));
    let free = || server.query(redis::cmd("DEL").arg(&locks));
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    let floor = secs * 1_000_000 + micros / 1000 * 1000;
    let above = floor + 5_000_000_000;
    set(&counters[0], "5");
    set(&counters[1], &above.to_string());
    set(&counters[5], &above.to_string());
    set(&counters[3], "9007199254740993");
    server.query(
        redis::cmd("SET")
            .arg(&counters[4])
            .arg("7")
            .arg("PX")
            .arg(600_000),
    );

    server.reset_stats();
    let fences = granted_fences(&acquire("0"));
    let floored = |fence: u64| fence >= floor && fence.is_multiple_of(1000);
    assert!(floored(fences[0]), "below the floor: the floor, {fences:?}");
    assert_eq!(fences[1], above + 1, "above the floor: by one");
    assert!(floored(fences[2]), "missing: the floor, {fences:?}");
    assert_eq!(fences[3], 9_007_199_254_740_994, "past 2^53: INCR");
    assert!(floored(fences[4]), "{fences:?}");
    assert_eq!(fences[5], above + 1, "one counter value: one fence");
    for ((counter, lock), fence) in counters.iter().zip(&locks).zip(&fences) {
        assert_eq!(get(&server, counter), Some(fence.to_string()));
        assert_eq!(get(&server, lock), Some(format!("{token}:{fence}")));
    }
    let stats = server.commandstats();
    assert_eq!(stats.get("mset"), Some(&1), "one MSET: {stats:?}");
    assert_eq!(stats.get("incr"), Some(&1), "{stats:?}");
    assert_eq!(
        super::common::pttl(&server, &counters[4]),
        -1,
        "written by the MSET: no expiry"
    );

    free();
    let fences_ttl = granted_fences(&acquire("90000"));
    assert!(fences_ttl.iter().zip(&fences).all(|(a, b)| a > b));
    for counter in &counters {
        let ttl = super::common::pttl(&server, counter);
        assert!(ttl > 0 && ttl <= 90_000, "the configured expiry: {ttl}");
    }

    free();
    set(&counters[2], "not-a-number");
    let refused: redis::RedisResult<Value> = redis::cmd("EVAL")
        .arg(super::fences::script_lua("MULTI_ACQUIRE_LUA"))
        .arg(names.len())
        .arg(&names)
        .arg(&[token, "5000", "0", "0", "0"])
        .query(&mut server.conn());
    assert!(refused.is_err(), "not an integer: refused, {refused:?}");
    for lock in &locks {
        assert!(!exists(&server, lock), "nothing held");
    }
}
