//! The hand-over's failure cases (docs/PROTOCOL.md §11), each written once
//! for any front end: a release of unknown outcome re-sent after it handed
//! the lock over, and waiting lockers in other processes that are stopped
//! or killed while registered. Each row starts its own `redis-server`;
//! holders' leases (60 s) and the parent's safety polls (30 s) are far
//! beyond the test's bound, so a key that changes hands within [`BOUND`]
//! did so by the hand-over. No row asserts how long something took.

use std::sync::Arc;
use std::time::Duration;

use redlease::{Operation, ReleaseOutcome, RenewOutcome};

use crate::behaviour::common::{
    config, connect, exists, fence_name, get, granted, leased, lock_name, namespace, pttl, refused,
    spawn, token_of, Bounded, BOUND,
};
use crate::behaviour::front::Front;
use crate::behaviour::handover::{queued, reg_name, the_next_registration_was_not_granted};
use crate::child::{self, Hold};
use crate::matrix::{
    assert_outcome_unknown, slow_polling, warm_locker, LONG_LEASE, SHORT_TIMEOUT, SLOW_POLL,
};
use crate::support::monitor::{Monitor, Monitored};
use crate::support::{wait_until, RedisServer};

/// The claim window of the waiting lockers of these rows: generous, so
/// that a loaded machine never lets a live grantee's grant lapse.
const CLAIM: Duration = Duration::from_secs(2);

/// A locker of its own (its own registration, as another process would
/// have) with safety polls beyond the bound, and its one waiter for `key`,
/// which hands back the lease once held. Returns once the locker is the
/// `position`-th registration in the key's queue.
fn registered_waiter<F: Front>(
    server: &RedisServer,
    ns: &str,
    name: &str,
    position: usize,
) -> (Arc<F>, Bounded<F::Lease>) {
    let locker: Arc<F> = Arc::new(connect(server, slow_polling(ns).claim_window(CLAIM)));
    let l = locker.clone();
    let what = format!("{name}: a registered waiter");
    let t = spawn(name, move || granted(l.acquire("k"), &what));
    wait_until(BOUND, &format!("{name} registered"), || {
        queued(server, ns, "k").len() == position
    });
    (locker, t)
}

/// Whether `c` is a lock's release (with the hand-over: four keys, the
/// lock, its counter, queue and flag; five arguments) of `lock` by
/// `token`.
fn is_release_by(c: &Monitored, lock: &str, token: &str) -> bool {
    matches!(c.script_call(), Some((keys, args))
        if keys.len() == 4 && keys[0] == lock && args.len() == 5 && args[0] == token)
}

/// A release whose outcome is unknown (Redis SIGSTOPped while it was in
/// flight) ran once Redis resumed and handed the lock to the head
/// registration; the locker then sends the same release again (the lease
/// stays tracked, and shutdown's cleanup releases it by its token). The
/// re-sent release finds the grantee's token: it neither deletes the
/// grantee's lock nor grants the lock a second time (the second
/// registration stays queued and its locker acquires nothing), the fence
/// counter does not move, and the grantee's lease is still renewed.
/// `MONITOR` shows the release ran exactly twice with the holder's token.
pub(crate) fn a_release_replayed_after_it_handed_the_lock_over_grants_nothing_twice<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-ho-replay");
    let monitor = Monitor::start(&server);
    let holder = warm_locker::<F>(&server, &ns);
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let held_fence = F::fence(&held).get();
    let holder_token = token_of(&server, &ns, "k");
    let (_first, first_t) = registered_waiter::<F>(&server, &ns, "first", 1);
    let (second, second_t) = registered_waiter::<F>(&server, &ns, "second", 2);
    let second_reg = queued(&server, &ns, "k")[1].clone();

    let e = {
        let _paused = server.pause_guard();
        refused(
            spawn("release", move || F::release(held).map(|_| ())).join_within(BOUND),
            "release on a paused server",
        )
    };
    assert_outcome_unknown(&e, Operation::Release);
    assert_eq!(
        holder.stats().tracked_leases,
        1,
        "a release of unknown outcome leaves the lease for the cleanup"
    );

    // Resumed, Redis ran the release: the first registration was granted
    // the lock (the holder's 60 s lease is far beyond the bound).
    let lease = first_t.join_within(BOUND);
    let fence = F::fence(&lease).get();
    assert!(fence > held_fence, "{held_fence} then {fence}");
    let (lock, counter) = (lock_name(&ns, "k"), fence_name(&ns, "k"));
    let granted_value = get(&server, &lock);
    assert_eq!(get(&server, &counter), Some(fence.to_string()));
    // Behind it, the grantee's registration lingers while it holds the
    // lease (docs/PROTOCOL.md §4.4).
    assert_eq!(queued(&server, &ns, "k").first(), Some(&second_reg));

    // The replay: shutdown sends the release again, with the holder's token.
    holder
        .shutdown()
        .expect("the re-sent release is answered with an outcome");
    assert_eq!(holder.stats().tracked_leases, 0);
    monitor.catch_up(&server);
    let releases = monitor
        .seen()
        .iter()
        .filter(|c| is_release_by(c, &lock, &holder_token))
        .count();
    assert_eq!(releases, 2, "the release ran once late and once re-sent");

    assert_eq!(get(&server, &lock), granted_value, "the grantee's lock");
    assert_eq!(get(&server, &counter), Some(fence.to_string()), "no fence");
    assert_eq!(
        queued(&server, &ns, "k").first(),
        Some(&second_reg),
        "no second grant"
    );
    assert!(exists(&server, &reg_name(&ns, "k", &second_reg)));
    assert_eq!(second.stats().acquires, 0);
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let next = second_t.join_within(BOUND);
    assert!(F::fence(&next).get() > fence, "fences strictly increase");
    assert_eq!(F::release(next).unwrap(), ReleaseOutcome::Released);
}

/// Whether `c` is a lock's acquire (with the hand-over: five keys) on
/// `lock` that registers, or refreshes, the registration `reg`.
fn is_acquire_of(c: &Monitored, lock: &str, reg: &str) -> bool {
    matches!(c.script_call(), Some((keys, args))
        if keys.len() == 5 && keys[0] == lock && args.get(3).map(String::as_str) == Some(reg))
}

/// A claim whose outcome is unknown (Redis SIGSTOPped while it was in
/// flight) is sent again with the same token, and the claims that ran
/// (the late ones and the re-sent one) answer the grant's fence: the
/// grantee holds the lock with the fence of its one grant, the counter
/// moved once, and the second registration is neither granted nor
/// dropped.
///
/// To stop Redis between the grant and the claim, the grantee hears of
/// its grant by polling (its ACL user has no pub/sub rights, so it polls
/// every 500 ms, and a claim window of 5 s covers that; so does the
/// second registration, since a release by that user publishes no
/// grant notice either): the test waits
/// for one of its polls (`MONITOR`), releases at once and SIGSTOPs Redis,
/// so the next poll, the claim, goes to a stopped server; Redis resumes
/// once the claim and a re-send of it went out (the locker's
/// `scripts_sent`). `MONITOR` shows the claim ran at least twice.
pub(crate) fn a_claim_of_unknown_outcome_is_sent_again_and_answers_the_same_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-ho-claim");
    let monitor = Monitor::start(&server);
    let holder: F = connect(&server, config(&ns));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let held_fence = F::fence(&held).get();
    let holder_token = token_of(&server, &ns, "k");
    let url = crate::least_privilege::add_user(
        &server,
        "nopubsub",
        &["+@all", "-@pubsub", "~*", "&*"].map(String::from),
    );
    // Lockers that hear grants by polling every 500 ms; a claim window of
    // 5 s covers that.
    let polling = |position: usize, name: &str| {
        let locker: Arc<F> = Arc::new(
            F::connect(
                &url,
                config(&ns)
                    .lease(Duration::from_secs(20))
                    .claim_window(Duration::from_secs(5))
                    .poll_interval(Duration::from_millis(500))
                    .notify_poll_interval(Duration::from_millis(500))
                    .command_timeout(SHORT_TIMEOUT)
                    .wait(Duration::from_secs(25)),
            )
            .unwrap_or_else(|e| panic!("connect as the user without pub/sub: {e:?}")),
        );
        let l = locker.clone();
        let what = format!("{name}: a registered waiter that polls");
        let t = spawn(name, move || granted(l.acquire("k"), &what));
        wait_until(BOUND, &format!("{name} registered"), || {
            queued(&server, &ns, "k").len() == position
        });
        (locker, t)
    };
    let (grantee, grantee_t) = polling(1, "grantee");
    let grantee_reg = queued(&server, &ns, "k")[0].clone();
    let (second, second_t) = polling(2, "second");
    let second_reg = queued(&server, &ns, "k")[1].clone();
    let lock = lock_name(&ns, "k");
    let polls = || {
        monitor
            .seen()
            .iter()
            .filter(|c| is_acquire_of(c, &lock, &grantee_reg))
            .count()
    };

    // Just after a poll, the next one is 500 ms away: time to release (the
    // grant), read the grant and stop Redis before it.
    let before = polls();
    wait_until(BOUND, "a poll of the grantee", || polls() > before);
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let grant = get(&server, &lock).expect("the lock was granted");
    let grant_fence = get(&server, &fence_name(&ns, "k")).expect("a fence counter");
    let paused = server.pause_guard();
    assert_eq!(
        grantee.stats().acquires,
        0,
        "the grantee's next poll came before Redis was stopped (a stall of a poll interval)"
    );
    let sent = grantee.stats().scripts_sent;
    wait_until(
        BOUND,
        "the claim and a re-send went to the stopped server",
        || grantee.stats().scripts_sent >= sent + 2,
    );
    drop(paused);

    let lease = grantee_t.join_within(BOUND);
    let fence = F::fence(&lease).get();
    assert!(fence > held_fence, "{held_fence} then {fence}");
    monitor.catch_up(&server);
    let seen = monitor.seen();
    let released = seen
        .iter()
        .position(|c| is_release_by(c, &lock, &holder_token))
        .expect("MONITOR saw the release");
    let claims = seen[released..]
        .iter()
        .filter(|c| is_acquire_of(c, &lock, &grantee_reg))
        .count();
    assert!(claims >= 2, "the claim ran {claims} time(s)");
    assert_eq!(fence.to_string(), grant_fence, "the grant's fence");
    // The grant names the registration's grant token; the claim put the
    // waiter's own token in its place, with the same fence.
    let claimed = get(&server, &lock).expect("the claimed lock");
    let fence_of = |value: &str| value.rsplit(':').next().map(str::to_owned);
    assert_eq!(fence_of(&claimed), fence_of(&grant), "the granted fence");
    assert_ne!(claimed, grant, "claimed under the waiter's own token");
    assert_eq!(
        get(&server, &fence_name(&ns, "k")),
        Some(grant_fence),
        "the counter moved once"
    );
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

/// A waiting process SIGSTOPped after it registered is granted the lock
/// by the release but cannot claim it: the next registration (another
/// locker) gets the lock once the grant's claim window (1 s) lapsed, long
/// before the holder's 60 s lease or its own 30 s safety poll would have
/// let it in; the lapsed grant took a fence of its own, so fences strictly
/// increase. Resumed, the stopped process's late claim finds the key held:
/// it takes nothing (the holder's renew still succeeds), registers again,
/// and gets the key after the holder with a higher fence.
pub(crate) fn a_head_stopped_after_it_registered_costs_the_claim_window_not_the_lease<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-ho-stopped");
    let holder: F = connect(&server, config(&ns));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let held_fence = F::fence(&held).get();
    let mut stopped = child::spawn_waiter::<F>(
        &server,
        &ns,
        "k",
        Duration::from_secs(5),
        Hold::WaitForLock {
            claim: Duration::from_secs(1),
            notify_poll: SLOW_POLL,
        },
    );
    wait_until(BOUND, "the child process registered", || {
        queued(&server, &ns, "k").len() == 1
    });
    let stopped_reg = queued(&server, &ns, "k")[0].clone();
    stopped.stop();

    let survivor: Arc<F> = Arc::new(connect(&server, slow_polling(&ns).claim_window(CLAIM)));
    let s = survivor.clone();
    let t = spawn("survivor", move || {
        granted(s.acquire("k"), "the registration behind a stopped one")
    });
    wait_until(BOUND, "the survivor registered behind the child", || {
        let queue = queued(&server, &ns, "k");
        queue.len() == 2 && queue[0] == stopped_reg
    });
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let lease = t.join_within(BOUND);
    let fence = F::fence(&lease).get();
    assert!(
        fence > held_fence + 1,
        "the stopped process's lapsed grant took a fence between: {held_fence} then {fence}"
    );

    stopped.resume();
    // The survivor's registration lingers while it holds the lease
    // (docs/PROTOCOL.md §4.4): the child's is the other one.
    wait_until(BOUND, "the resumed child registered again", || {
        queued(&server, &ns, "k").contains(&stopped_reg)
    });
    assert_eq!(
        F::renew(&lease).unwrap(),
        RenewOutcome::Renewed,
        "the late claim took nothing"
    );
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let child_fence = stopped.fence_within(BOUND);
    assert!(child_fence > fence, "{fence} then {child_fence}");
    stopped.kill();
}

/// A waiting process SIGKILLed while registered stops blocking the others
/// within its registration's bound, `3 × notify_poll_interval` (here
/// 1.5 s), measured by Redis (`PX`): its registration lapses, the release
/// skips it and grants the lock to the next registration, which acquires
/// within the bound. The dead process's claim window is 20 s, beyond the
/// bound: had its registration still been granted, the survivor could not
/// have got the key in time.
pub(crate) fn a_killed_waiters_registration_stops_blocking_others_within_its_bound<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-ho-killed");
    let holder: F = connect(&server, config(&ns));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let held_fence = F::fence(&held).get();
    let notify_poll = Duration::from_millis(500);
    let dead = child::spawn_waiter::<F>(
        &server,
        &ns,
        "k",
        LONG_LEASE,
        Hold::WaitForLock {
            claim: Duration::from_secs(20),
            notify_poll,
        },
    );
    wait_until(BOUND, "the child process registered", || {
        queued(&server, &ns, "k").len() == 1
    });
    let dead_id = queued(&server, &ns, "k")[0].clone();
    let dead_reg = reg_name(&ns, "k", &dead_id);
    let bound = 3 * notify_poll.as_millis() as i64;
    let alive = pttl(&server, &dead_reg);
    assert!(
        alive > 0 && alive <= bound,
        "a registration lives at most 3 × notify_poll_interval: {alive} ms"
    );
    dead.kill();

    let survivor: Arc<F> = Arc::new(connect(&server, slow_polling(&ns).claim_window(CLAIM)));
    let s = survivor.clone();
    let t = spawn("survivor", move || {
        granted(s.acquire("k"), "the registration behind a dead one")
    });
    wait_until(BOUND, "the survivor registered behind the dead one", || {
        queued(&server, &ns, "k").len() == 2
    });
    wait_until(BOUND, "the dead process's registration lapsed", || {
        !exists(&server, &dead_reg)
    });
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let lease = t.join_within(BOUND);
    assert!(F::fence(&lease).get() > held_fence);
    // The survivor's own registration may linger while it holds the lease
    // (docs/PROTOCOL.md §4.4).
    assert!(
        !queued(&server, &ns, "k").contains(&dead_id),
        "the dead entry is gone"
    );
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// The ids of the clients in `SUBSCRIBE` mode (`CLIENT LIST`'s `flags=P`).
fn subscriber_ids(server: &RedisServer) -> Vec<String> {
    server
        .client_list()
        .iter()
        .filter(|line| line.split(' ').any(|field| field == "flags=P"))
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

/// A locker whose registration lingers (it holds the lease its only
/// waiter took, docs/PROTOCOL.md §4.4) loses its subscriber connection
/// (`CLIENT KILL TYPE pubsub`): a grant to that registration could go
/// unheard, so the lingering ends and the locker's next call, here the
/// release (its sweep goes first), takes the registration out; the
/// release then hands the key to the next waiter. The lingering locker's
/// claim window is 30 s: a grant made out to it and not claimed would
/// hold the next waiter past the bound.
pub(crate) fn a_lingering_locker_whose_subscriber_was_killed_hands_the_key_on_at_its_release<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-ho-linger-kill");
    let holder: F = connect(&server, slow_polling(&ns));
    let lingering: Arc<F> = Arc::new(connect(
        &server,
        slow_polling(&ns).claim_window(Duration::from_secs(30)),
    ));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let l = lingering.clone();
    let first = spawn("lingering", move || {
        granted(
            l.acquire_with("k", leased(LONG_LEASE)),
            "a registered waiter",
        )
    });
    wait_until(BOUND, "the waiter registered", || {
        queued(&server, &ns, "k").len() == 1
    });
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let lease = first.join_within(BOUND);
    let (_next, next_t) = registered_waiter::<F>(&server, &ns, "next", 2);

    let before = subscriber_ids(&server);
    assert!(server.client_kill_type("pubsub") >= 2, "{before:?}");
    // Both subscribers noticed: they are back on new connections.
    wait_until(BOUND, "the subscribers connected again", || {
        let now = subscriber_ids(&server);
        now.len() == before.len() && now.iter().all(|id| !before.contains(id))
    });
    wait_until(BOUND, "the lingering locker subscribed again", || {
        lingering.stats().subscribed
    });
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let next = next_t.join_within(BOUND);
    assert_eq!(F::release(next).unwrap(), ReleaseOutcome::Released);
}
