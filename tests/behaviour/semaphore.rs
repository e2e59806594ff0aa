//! The fenced semaphore (docs/PROTOCOL.md §5.2): up to N holders, each in a slot of its
//! own with its own fence counter; waiting, outcomes, count changes and
//! replays as for leases.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Value;
use redlease::{Error, ReleaseOutcome, RenewOutcome};

use super::common::{
    config, connect, get, granted, key_sha, leased, let_pass, namespace, no_wait, pttl, refused,
    spawn, waiting, BOUND,
};
use super::fences::script_lua;
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// `<ns>:sem:{<sha>}:<slot>`
pub(crate) fn slot_name(ns: &str, key: &str, slot: u32) -> String {
    format!("{ns}:sem:{{{}}}:{slot}", key_sha(key))
}

/// `<ns>:sem-fence:{<sha>}:<slot>`
pub(crate) fn slot_fence_name(ns: &str, key: &str, slot: u32) -> String {
    format!("{ns}:sem-fence:{{{}}}:{slot}", key_sha(key))
}

/// `<ns>:sem-permits:{<sha>}`
pub(crate) fn permits_name(ns: &str, key: &str) -> String {
    format!("{ns}:sem-permits:{{{}}}", key_sha(key))
}

/// `EVAL` of the acquire script on semaphore `key` without the hand-over,
/// declaring its count record and `slots` slots and their counters (the
/// script's KEYS); its ARGV follow: token, lease_ms, counter_ttl_ms,
/// permits.
fn sem_acquire_cmd(ns: &str, key: &str, slots: u32) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script_lua("SEM_ACQUIRE_LUA"))
        .arg(1 + 2 * slots)
        .arg(permits_name(ns, key));
    for slot in 0..slots {
        cmd.arg(slot_name(ns, key, slot));
    }
    for slot in 0..slots {
        cmd.arg(slot_fence_name(ns, key, slot));
    }
    cmd
}

/// N permits go to N holders on two lockers, each in a distinct slot with
/// its own fence counter; the next try is `Busy` with the soonest expiry.
pub(crate) fn permits_are_granted_up_to_the_count_each_in_a_slot_of_its_own<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-count");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));

    let mut permits = Vec::new();
    for i in 0..3 {
        let locker = if i % 2 == 0 { &a } else { &b };
        permits.push(granted(
            locker.acquire_permit("pool", 3, no_wait()),
            "a free permit",
        ));
    }
    let slots: BTreeSet<u32> = permits.iter().map(F::slot).collect();
    assert_eq!(slots, BTreeSet::from([0, 1, 2]), "the lowest free slots");
    for permit in &permits {
        let slot = F::slot(permit);
        let fence = F::permit_fence(permit).get();
        let value = get(&server, &slot_name(&ns, "pool", slot)).expect("the slot key is set");
        assert!(
            value.ends_with(&format!(":{fence}")),
            "the slot holds <token>:<fence>"
        );
        assert_eq!(
            get(&server, &slot_fence_name(&ns, "pool", slot)),
            Some(fence.to_string()),
            "each slot has its own counter"
        );
        let ttl = pttl(&server, &slot_name(&ns, "pool", slot));
        assert!(ttl > 0 && ttl <= 5000, "the slot expires by its TTL: {ttl}");
    }
    assert_eq!(get(&server, &permits_name(&ns, "pool")), Some("3".into()));

    for locker in [&a, &b] {
        match refused(locker.acquire_permit("pool", 3, no_wait()), "a fourth") {
            Error::Busy { remaining } => assert!(
                remaining.is_some_and(|r| r <= Duration::from_secs(5)),
                "busy with the soonest expiry: {remaining:?}"
            ),
            other => panic!("every permit held: expected LOCK_BUSY, got {other:?}"),
        }
    }
    // A lock of the same key is another thing.
    let lease = granted(a.acquire_with("pool", no_wait()), "the lock of the key");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);

    let freed = permits.remove(1);
    let freed_slot = F::slot(&freed);
    assert_eq!(F::release_permit(freed).unwrap(), ReleaseOutcome::Released);
    let again = granted(b.acquire_permit("pool", 3, no_wait()), "the freed permit");
    assert_eq!(
        F::slot(&again),
        freed_slot,
        "the freed slot is the free one"
    );
    permits.push(again);
    for permit in permits {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
}

/// One slot's fences strictly increase across grants, also after Redis
/// lost its data (the §3 floor at the server clock).
pub(crate) fn each_slots_fences_strictly_increase_also_after_data_loss<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-fences");
    let locker: F = connect(&server, config(&ns));

    let mut fences = Vec::new();
    for round in 0..6 {
        if round == 3 {
            // Data lost in the ms of the last grant would floor the next
            // fence at that same ms (docs/PROTOCOL.md §3's limit): let the clock pass it.
            let last = *fences.last().unwrap();
            wait_until(BOUND, "the server clock passes the last fence's ms", || {
                super::common::server_time_ms(&server) > last / 1000
            });
            server.flushall();
        }
        let permit = granted(locker.acquire_permit("one", 2, no_wait()), "a free permit");
        assert_eq!(F::slot(&permit), 0, "the lowest free slot");
        fences.push(F::permit_fence(&permit).get());
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "slot 0's fences strictly increase: {fences:?}"
    );
}

/// A waiter on another locker gets the permit a release frees, through
/// the notification (safety polls are 30 s, the bound 10 s).
pub(crate) fn a_release_wakes_a_waiter_through_the_notification<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-wake");
    let slow = || {
        config(&ns)
            .wait(Duration::from_secs(20))
            .lease(Duration::from_secs(30))
            .notify_poll_interval(Duration::from_secs(30))
    };
    let holder: F = connect(&server, slow());
    let waiter = std::sync::Arc::new(connect::<F>(&server, slow()));

    let held: Vec<_> = (0..2)
        .map(|_| granted(holder.acquire_permit("pool", 2, no_wait()), "a free permit"))
        .collect();
    let w = waiter.clone();
    let waiting_thread = spawn("semaphore waiter", move || {
        w.acquire_permit("pool", 2, waiting(Duration::from_secs(20)))
    });
    wait_until(BOUND, "the waiter is subscribed", || {
        let stats = waiter.stats();
        stats.waiters == 1 && stats.subscribed
    });
    let mut held = held;
    let freed = held.remove(0);
    let freed_slot = F::slot(&freed);
    assert_eq!(F::release_permit(freed).unwrap(), ReleaseOutcome::Released);
    let permit = granted(waiting_thread.join_within(BOUND), "the freed permit");
    assert_eq!(F::slot(&permit), freed_slot);
    assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    for permit in held {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
}

/// Waiters of one locker: after a grant the next one tries at once, so
/// all free permits go out without waiting for a notification or poll.
pub(crate) fn waiters_of_one_locker_take_every_free_permit_at_once<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-burst");
    let cfg = config(&ns)
        .wait(Duration::from_secs(20))
        .notify_poll_interval(Duration::from_secs(30))
        .poll_interval(Duration::from_secs(30));
    let locker = std::sync::Arc::new(connect::<F>(&server, cfg));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let l = locker.clone();
            spawn(&format!("waiter {i}"), move || {
                l.acquire_permit("burst", 4, waiting(Duration::from_secs(20)))
            })
        })
        .collect();
    let permits: Vec<_> = threads
        .into_iter()
        .map(|t| granted(t.join_within(BOUND), "a free permit"))
        .collect();
    let slots: BTreeSet<u32> = permits.iter().map(F::slot).collect();
    assert_eq!(slots.len(), 4, "four distinct slots");
    for permit in permits {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
}

/// Another permit count is refused while any permit of the recorded count
/// is held, and takes over once none is (resize by draining), larger or
/// smaller.
pub(crate) fn another_permit_count_is_refused_while_held_and_applies_once_drained<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-resize");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));

    let held = granted(a.acquire_permit("pool", 2, no_wait()), "a free permit");
    for count in [1, 5] {
        match refused(b.acquire_permit("pool", count, no_wait()), "other count") {
            Error::InvalidConfig { .. } => {}
            other => {
                panic!("count {count} while 2 are in use: expected INVALID_CONFIG, got {other:?}")
            }
        }
        // Also when waiting: the refusal is final, not retried.
        match refused(
            b.acquire_permit("pool", count, waiting(Duration::from_secs(5))),
            "other count, waiting",
        ) {
            Error::InvalidConfig { .. } => {}
            other => panic!("expected INVALID_CONFIG, got {other:?}"),
        }
    }
    assert_eq!(get(&server, &permits_name(&ns, "pool")), Some("2".into()));
    assert_eq!(F::release_permit(held).unwrap(), ReleaseOutcome::Released);

    let bigger: Vec<_> = (0..5)
        .map(|_| granted(b.acquire_permit("pool", 5, no_wait()), "the resized pool"))
        .collect();
    assert_eq!(get(&server, &permits_name(&ns, "pool")), Some("5".into()));
    assert!(matches!(
        a.acquire_permit("pool", 2, no_wait()),
        Err(Error::InvalidConfig { .. })
    ));
    for permit in bigger {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
    // Drained, the pool shrinks: the attempt that declared 2 slots learns
    // of the record's 5 and goes again declaring them all.
    let smaller = granted(a.acquire_permit("pool", 2, no_wait()), "the shrunk pool");
    assert_eq!(get(&server, &permits_name(&ns, "pool")), Some("2".into()));
    assert_eq!(
        F::release_permit(smaller).unwrap(),
        ReleaseOutcome::Released
    );
}

/// Renew and release report `Renewed`/`Released`, `Expired` after the TTL
/// ran out, `Conflict` when another holder took the slot.
pub(crate) fn permit_renew_and_release_report_their_outcomes<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-outcomes");
    let locker: F = connect(&server, config(&ns));
    let other: F = connect(&server, config(&ns));

    let permit = granted(locker.acquire_permit("p", 1, no_wait()), "a free permit");
    assert_eq!(F::renew_permit(&permit).unwrap(), RenewOutcome::Renewed);
    let ttl = pttl(&server, &slot_name(&ns, "p", 0));
    assert!(ttl > 4000, "renewed to a full lease: {ttl}");
    assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);

    let short = granted(
        locker.acquire_permit("p", 1, leased(Duration::from_millis(200))),
        "a short permit",
    );
    wait_until(BOUND, "the slot expired", || {
        get(&server, &slot_name(&ns, "p", 0)).is_none()
    });
    let taken = granted(other.acquire_permit("p", 1, no_wait()), "the expired slot");
    assert_eq!(F::slot(&taken), 0);
    assert_eq!(F::renew_permit(&short).unwrap(), RenewOutcome::Conflict);
    assert!(!F::permit_is_valid(&short));
    assert_eq!(F::release_permit(short).unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(F::release_permit(taken).unwrap(), ReleaseOutcome::Released);

    let gone = granted(
        locker.acquire_permit("p", 1, leased(Duration::from_millis(200))),
        "a short permit",
    );
    wait_until(BOUND, "the slot expired", || {
        get(&server, &slot_name(&ns, "p", 0)).is_none()
    });
    assert_eq!(F::release_permit(gone).unwrap(), ReleaseOutcome::Expired);
}

/// A holder that dies without releasing (its permit forgotten) frees its
/// slot at its TTL: a waiter elsewhere gets it then.
pub(crate) fn a_dead_holders_slot_frees_at_its_ttl<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-dead");
    let dead: F = connect(&server, config(&ns));
    let waiter: F = connect(&server, config(&ns));

    let permit = granted(
        dead.acquire_permit("p", 1, leased(Duration::from_millis(300))),
        "a free permit",
    );
    let fence = F::permit_fence(&permit);
    // Never released, never dropped: as if its process died.
    std::mem::forget(permit);
    let next = granted(
        waiter.acquire_permit("p", 1, waiting(Duration::from_secs(5))),
        "the slot after the dead holder's TTL",
    );
    assert_eq!(F::slot(&next), 0);
    assert!(F::permit_fence(&next) > fence);
    assert_eq!(F::release_permit(next).unwrap(), ReleaseOutcome::Released);
}

/// The acquire script run again with a token already in a slot returns
/// that slot and fence, without a second grant or `INCR`.
pub(crate) fn a_replayed_permit_acquire_returns_the_same_slot_and_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-replay");
    let locker: F = connect(&server, config(&ns));
    let first = granted(locker.acquire_permit("p", 3, no_wait()), "slot 0");
    let _ = first;

    let eval = |token: &str| {
        server.query(
            sem_acquire_cmd(&ns, "p", 3)
                .arg(token)
                .arg(5000)
                .arg(0)
                .arg(3),
        )
    };
    let mine = "0123456789abcdef0123456789abcdef";
    let granted_once = eval(mine);
    let Value::Array(items) = &granted_once else {
        panic!("a grant is [slot, fence], got {granted_once:?}");
    };
    assert_eq!(items[0], Value::Int(1), "the next free slot");
    let counter = get(&server, &slot_fence_name(&ns, "p", 1));
    assert_eq!(
        eval(mine),
        granted_once,
        "a replay returns the same slot and fence"
    );
    assert_eq!(
        get(&server, &slot_fence_name(&ns, "p", 1)),
        counter,
        "no second INCR"
    );
    assert!(
        get(&server, &slot_name(&ns, "p", 2)).is_none(),
        "no second grant"
    );
}

/// Bad permit counts are `InvalidConfig`, bad keys `InvalidKey`, without
/// asking Redis; a permit's `Debug` shows its slot and fence only.
pub(crate) fn bad_permit_counts_and_keys_are_refused<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-input");
    let locker: F = connect(&server, config(&ns));
    for count in [0, 1025, u32::MAX] {
        match refused(locker.acquire_permit("p", count, no_wait()), "bad count") {
            Error::InvalidConfig { .. } => {}
            other => panic!("{count} permits: expected INVALID_CONFIG, got {other:?}"),
        }
    }
    let long = "k".repeat(1025);
    for key in ["", long.as_str()] {
        match refused(locker.acquire_permit(key, 2, no_wait()), "bad key") {
            Error::InvalidKey { .. } => {}
            other => panic!("expected INVALID_KEY, got {other:?}"),
        }
    }
    let permit = granted(locker.acquire_permit("secret-key", 1024, no_wait()), "1024");
    let debug = F::permit_debug(&permit);
    assert!(
        debug.contains("slot: 0") && debug.contains("fence"),
        "{debug}"
    );
    assert!(!debug.contains("secret") && !debug.contains(&ns), "{debug}");
    assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
}

/// Four lockers with eight waiter threads each contend for a semaphore of
/// three permits, each holder holding about 2 ms, for a bounded number of
/// rounds. Markers on a second Redis (`INCR` on grant, `DECR` before the
/// release) show that never more than three hold a permit and never two
/// hold one slot; each slot's fences, logged there in grant order (while
/// the slot is held, so the log order is the grant order), strictly
/// increase; and every thread finishes its rounds within the bound (no
/// waiter starved).
pub(crate) fn never_more_than_n_hold_permits_under_contention_and_each_slots_fences_increase<
    F: Front,
>() {
    const LOCKERS: usize = 4;
    const THREADS_PER_LOCKER: usize = 8;
    const PERMITS: u32 = 3;
    const ROUNDS: usize = 10;
    const HOLD: Duration = Duration::from_millis(2);
    let server = RedisServer::start();
    let markers = std::sync::Arc::new(RedisServer::start());
    let ns = namespace("sem-contend");
    let lockers: Vec<std::sync::Arc<F>> = (0..LOCKERS)
        .map(|_| std::sync::Arc::new(connect(&server, config(&ns).wait(Duration::from_secs(30)))))
        .collect();

    let threads: Vec<_> = (0..LOCKERS * THREADS_PER_LOCKER)
        .map(|i| {
            let (locker, markers) = (lockers[i % LOCKERS].clone(), markers.clone());
            spawn(&format!("contender-{i}"), move || {
                let mut conn = markers.conn();
                let mut step = |cmd: &mut redis::Cmd| -> i64 {
                    cmd.query(&mut conn)
                        .unwrap_or_else(|e| panic!("{cmd:?} on the marker redis: {e}"))
                };
                for round in 0..ROUNDS {
                    let permit = granted(
                        locker.acquire_permit("pool", PERMITS, waiting(Duration::from_secs(30))),
                        &format!("contender-{i}, round {round}"),
                    );
                    let slot = F::slot(&permit);
                    assert!(slot < PERMITS, "slot {slot} of {PERMITS}");
                    let holders = step(redis::cmd("INCR").arg("holders"));
                    let in_slot = step(redis::cmd("INCR").arg(format!("slot:{slot}")));
                    assert!(holders <= i64::from(PERMITS), "{holders} holders at once");
                    assert_eq!(in_slot, 1, "two holders of slot {slot} at once");
                    step(
                        redis::cmd("RPUSH")
                            .arg(format!("fences:{slot}"))
                            .arg(F::permit_fence(&permit).get()),
                    );
                    assert!(F::permit_is_valid(&permit));
                    let_pass(HOLD);
                    assert_eq!(step(redis::cmd("DECR").arg(format!("slot:{slot}"))), 0);
                    assert!(step(redis::cmd("DECR").arg("holders")) >= 0);
                    assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
                }
            })
        })
        .collect();
    for t in threads {
        t.join_within(Duration::from_secs(40));
    }

    let mut grants = 0;
    for slot in 0..PERMITS {
        let fences: Vec<u64> = redis::cmd("LRANGE")
            .arg(format!("fences:{slot}"))
            .arg(0)
            .arg(-1)
            .query(&mut markers.conn())
            .unwrap();
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "slot {slot}'s fences in grant order: {fences:?}"
        );
        grants += fences.len();
    }
    assert_eq!(
        grants,
        LOCKERS * THREADS_PER_LOCKER * ROUNDS,
        "every grant logged"
    );
    assert!(
        markers.keys("fences:*").len() <= PERMITS as usize,
        "no slot beyond the count"
    );
    for locker in &lockers {
        assert_eq!(locker.stats().waiters, 0);
    }
    assert!(
        server.keys(&format!("{ns}:sem:*")).is_empty(),
        "all released"
    );
}

/// A permit dropped without `release` while a waiter of the same locker
/// waits for the semaphore (lease 30 s, safety polls 30 s, wait 10 s)
/// frees that waiter within its wait: the blocking permit releases itself
/// in `drop`, the async one is handed back to the locker, which releases
/// it at once because a waiter of that semaphore waits.
pub(crate) fn a_dropped_permit_frees_a_waiter_of_the_same_locker_before_its_ttl<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-drop-frees");
    let slow = Duration::from_secs(30);
    let locker = std::sync::Arc::new(connect::<F>(
        &server,
        config(&ns)
            .wait(Duration::from_secs(10))
            .poll_interval(slow)
            .notify_poll_interval(slow),
    ));
    let permit = granted(
        locker.acquire_permit("p", 1, leased(Duration::from_secs(30))),
        "the only permit",
    );
    let dropped_fence = F::permit_fence(&permit);
    let l = locker.clone();
    let waiter = spawn("waiter", move || {
        let permit = l
            .acquire_permit("p", 1, waiting(Duration::from_secs(10)))
            .map_err(|e| format!("{} ({e})", e.code()))?;
        let fence = F::permit_fence(&permit);
        F::release_permit(permit)
            .map(|outcome| (fence, outcome))
            .map_err(|e| format!("release: {}", e.code()))
    });
    wait_until(BOUND, "the second acquire waits, subscribed", || {
        let s = locker.stats();
        s.waiters == 1 && s.subscribed && s.busy_replies >= 2
    });

    drop(permit);
    // The waiter ends by its 10 s wait at the latest.
    let (fence, outcome) = waiter
        .join_within(Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("the waiter got the dropped permit's slot: {e}"));
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert!(fence > dropped_fence);
    assert!(server.keys(&format!("{ns}:sem:*")).is_empty());
}

/// What a semaphore costs Redis, counted in `commandstats`: a
/// permit acquire + release of a pool in use is 10 commands (the acquire
/// script's `MGET` of the count record and every slot, the free slot's
/// counter `GET`, `TIME` and two `SET`s; the release's `GET`, `DEL` and
/// `PUBLISH`; two `EVALSHA`s), a first use records the count with one more
/// `SET`, a busy attempt is `MGET` and one `PTTL` per slot (the smallest
/// remaining time, docs/PROTOCOL.md §5.2), and the release of a token whose slot is
/// unknown one `MGET`, the `DEL` and the `PUBLISH`.
pub(crate) fn a_permit_cycle_runs_ten_commands_and_a_busy_attempt_one_mget_and_a_pttl_per_slot<
    F: Front,
>() {
    use super::fences::Counts;
    let server = RedisServer::start();
    let ns = namespace("sem-cost");
    let locker: F = connect(&server, config(&ns));
    let other: F = connect(&server, config(&ns));
    // Warm: the scripts are cached and the connections open.
    let warm = granted(other.acquire_permit("warm", 2, no_wait()), "warm-up");
    assert_eq!(F::release_permit(warm).unwrap(), ReleaseOutcome::Released);
    let mut counts = Counts::new(&server);

    let first = counts.step(
        "the first grant of a pool, which records its count",
        &[
            ("evalsha", 1),
            ("mget", 1),
            ("get", 1),
            ("time", 1),
            ("set", 3),
        ],
        || granted(locker.acquire_permit("pool", 2, no_wait()), "a first use"),
    );
    assert_eq!(F::release_permit(first).unwrap(), ReleaseOutcome::Released);
    counts.step(
        "one uncontended permit cycle",
        &[
            ("evalsha", 2),
            ("mget", 2),
            ("get", 1),
            ("time", 1),
            ("set", 2),
            ("del", 1),
            ("publish", 1),
        ],
        || {
            let permit = granted(locker.acquire_permit("pool", 2, no_wait()), "a free permit");
            assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
        },
    );

    let held: Vec<_> = (0..2)
        .map(|_| granted(other.acquire_permit("pool", 2, no_wait()), "a permit"))
        .collect();
    counts.step(
        "one busy attempt on two slots",
        &[("evalsha", 1), ("mget", 1), ("pttl", 2)],
        || match refused(locker.acquire_permit("pool", 2, no_wait()), "a full pool") {
            Error::Busy { remaining } => assert!(remaining.is_some(), "the soonest expiry"),
            other => panic!("expected LOCK_BUSY, got {other:?}"),
        },
    );
    for permit in held {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }

    // The release of a token in whichever slot holds it (after an acquire
    // whose outcome was unknown), run as the script it is.
    let token = "0123456789abcdef0123456789abcdef";
    let prefix = format!("{ns}:sem:{{{}}}:", key_sha("pool"));
    server.query(
        redis::cmd("SET")
            .arg(format!("{prefix}1"))
            .arg(format!("{token}:7"))
            .arg("PX")
            .arg(5000),
    );
    let released = counts.step(
        "a release of a token in an unknown slot",
        &[("eval", 1), ("mget", 1), ("del", 1), ("publish", 1)],
        || {
            server.query(
                redis::cmd("EVAL")
                    .arg(script_lua("SEM_RELEASE_ANY_LUA"))
                    .arg(2)
                    .arg(slot_name(&ns, "pool", 0))
                    .arg(slot_name(&ns, "pool", 1))
                    .arg(token)
                    .arg("PUBLISH")
                    .arg(format!("{ns}:lock-released"))
                    .arg("sem:x"),
            )
        },
    );
    assert_eq!(released, Value::Int(1));
    assert!(get(&server, &format!("{prefix}1")).is_none());
    counts.finish();
}

/// Counts above the recorded one are scanned too (docs/PROTOCOL.md §5.2: a token in a
/// slot of a larger count is found, and a smaller count is refused while
/// such a slot is held): when the record is larger than the slots an
/// attempt declared, the script names it (`['slots', n]`) and the attempt
/// is sent again declaring the slots past the count asked for.
pub(crate) fn slots_past_the_count_asked_for_are_still_seen<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-shrink");
    let _locker: F = connect(&server, config(&ns));
    let token = "0123456789abcdef0123456789abcdef";
    let other = "fedcba9876543210fedcba9876543210";
    let prefix = format!("{ns}:sem:{{{}}}:", key_sha("p"));
    let declaring = |token: &str, permits: u32, slots: u32| {
        server.query(
            sem_acquire_cmd(&ns, "p", slots)
                .arg(token)
                .arg(5000)
                .arg(0)
                .arg(permits),
        )
    };
    // As the locker does: the slots of the count asked for, then as many
    // as a larger recorded count the script names.
    let acquire = |token: &str, permits: u32| match declaring(token, permits, permits) {
        Value::Array(items) if items.first() == Some(&Value::BulkString(b"slots".to_vec())) => {
            let Some(&Value::Int(n)) = items.get(1) else {
                panic!("['slots', n], got {items:?}");
            };
            declaring(token, permits, u32::try_from(n).unwrap())
        }
        reply => reply,
    };
    server.query(redis::cmd("SET").arg(permits_name(&ns, "p")).arg(4));
    server.query(
        redis::cmd("SET")
            .arg(format!("{prefix}3"))
            .arg(format!("{token}:42"))
            .arg("PX")
            .arg(5000),
    );
    assert_eq!(
        declaring(token, 2, 2),
        Value::Array(vec![Value::BulkString(b"slots".to_vec()), Value::Int(4)]),
        "the recorded count's slots past those declared are asked for"
    );
    assert_eq!(
        acquire(token, 2),
        Value::Array(vec![Value::Int(3), Value::BulkString(b"42".to_vec())]),
        "a replay finds its slot past the count asked for"
    );
    assert_eq!(
        acquire(other, 2),
        Value::Array(vec![Value::BulkString(b"permits".to_vec()), Value::Int(4)]),
        "a smaller count is refused while a slot of the recorded one is held"
    );
    server.query(redis::cmd("DEL").arg(format!("{prefix}3")));
    let Value::Array(granted_now) = acquire(other, 2) else {
        panic!("a drained pool takes the new count");
    };
    assert_eq!(granted_now[0], Value::Int(0));
    assert_eq!(get(&server, &permits_name(&ns, "p")), Some("2".into()));
}

/// A slot's next fence is computed as the lock's (docs/PROTOCOL.md §3): a counter past
/// 2^53 moves by exactly one (through `INCR`), one that is not an integer
/// is refused without a grant, and the counter keeps its expiry where the
/// locker sets none and takes the locker's `fence_counter_ttl` where it
/// does.
pub(crate) fn a_slots_counter_moves_exactly_and_keeps_or_takes_its_expiry<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("sem-counter");
    let _locker: F = connect(&server, config(&ns));
    let (slot, counter) = (slot_name(&ns, "p", 0), slot_fence_name(&ns, "p", 0));
    let eval = |counter_ttl: u64| -> redis::RedisResult<Value> {
        sem_acquire_cmd(&ns, "p", 1)
            .arg("0123456789abcdef0123456789abcdef")
            .arg(5000)
            .arg(counter_ttl)
            .arg(1)
            .query(&mut server.conn())
    };
    let fence_of = |reply: Value| match reply {
        Value::Array(items) => items[1].clone(),
        other => panic!("a grant is [slot, fence], got {other:?}"),
    };
    server.query(redis::cmd("SET").arg(&counter).arg("9007199254740993"));
    assert_eq!(
        fence_of(eval(0).unwrap()),
        Value::BulkString(b"9007199254740994".to_vec())
    );
    server.query(redis::cmd("DEL").arg(&slot));

    server.query(redis::cmd("SET").arg(&counter).arg("not-a-number"));
    assert!(eval(0).is_err(), "a counter that is not an integer");
    assert!(get(&server, &slot).is_none(), "and nothing was granted");

    server.query(
        redis::cmd("SET")
            .arg(&counter)
            .arg("7")
            .arg("PX")
            .arg(600_000),
    );
    fence_of(eval(0).unwrap());
    let kept = pttl(&server, &counter);
    assert!(kept > 0 && kept <= 600_000, "the expiry is kept: {kept}");
    server.query(redis::cmd("DEL").arg(&slot));
    fence_of(eval(90_000).unwrap());
    let set = pttl(&server, &counter);
    assert!(set > 0 && set <= 90_000, "the locker's expiry: {set}");
}
