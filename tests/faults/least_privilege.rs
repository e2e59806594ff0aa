//! Least privilege: the ACL a locker needs (README, "Least privilege"),
//! and the behaviour suite's core cases run as a user with exactly those
//! rights, through a front end wrapper that connects every locker as that
//! user and, when the locker is dropped, fails the test if Redis refused it
//! anything (`ACL LOG`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use redlease::{
    AcquireOptions, Config, Error, Fence, Leader, ReleaseOutcome, RenewOutcome, Stats, Version,
};

use crate::behaviour::common::{
    config, connect, exists, granted, leased, lock_name, namespace, no_wait, refused, spawn,
    wait_for_stats, BOUND,
};
use crate::behaviour::front::Front;
use crate::behaviour::{
    election, faults, fences, multi, outcomes, rw_lock, semaphore, shutdown, waiting,
};
use crate::support::{wait_until, RedisServer};

/// The password of every test user.
const PASSWORD: &str = "locker-pw";

/// The commands a locker sends, by why (README, "Least privilege"). The
/// suite fails when any of them is refused (`ACL LOG`), and when the
/// locker sends anything else.
const COMMANDS: [&str; 42] = [
    // the blocking front end checks a reused pooled connection with PING
    // (HELLO and AUTH need no permission)
    "+ping",
    // the scripts: EVALSHA; EVAL when the server does not have the script
    // cached (NOSCRIPT: first use, restart, SCRIPT FLUSH); SCRIPT LOAD
    // before shutdown's pipelined releases
    "+evalsha",
    "+eval",
    "+script|load",
    // inside the scripts (MGET: the semaphore's scripts read every slot;
    // MSET: a multi-key grant writes its keys' counters at once)
    "+get",
    "+mget",
    "+set",
    "+mset",
    "+del",
    "+incr",
    "+pexpire",
    "+pttl",
    "+time",
    "+publish",
    // the hand-over queues (docs/PROTOCOL.md §4): registering, granting the
    // head, leaving, and telling an expired lock from a key of another type
    "+rpush",
    "+lmove",
    "+rpop",
    "+lpop",
    "+lpush",
    "+lpos",
    "+lset",
    "+getdel",
    "+exists",
    "+lrem",
    "+lindex",
    // inside the read-write lease's scripts: the readers' sorted set
    "+zadd",
    "+zrem",
    "+zscore",
    "+zcard",
    "+zrange",
    "+zremrangebyscore",
    "+pexpireat",
    // an election's scripts (docs/PROTOCOL.md §12): the change log, and the
    // read-only read script of `leader()`
    "+xadd",
    "+xrange",
    "+xrevrange",
    "+evalsha_ro",
    "+eval_ro",
    // release notifications; the redis crate sends UNSUBSCRIBE and
    // PUNSUBSCRIBE when the blocking subscriber closes (refusing them only
    // fills the ACL LOG)
    "+subscribe",
    "+unsubscribe",
    "+punsubscribe",
    // the eviction-policy check at connect: CONFIG GET, or INFO memory when
    // CONFIG GET is refused (without either the check is skipped)
    "+config|get",
    "+info",
];

/// The kinds of key a locker writes: each name is `<ns>:<kind>:{...`. A
/// kind has no `:` and a namespace no `{`, so `~<ns>:<kind>:{*` matches
/// the names of namespace `<ns>` alone (README, "Least privilege").
const KEY_KINDS: [&str; 21] = [
    "lock",
    "lock-fence",
    "lock-queue",
    "lock-queued",
    "lock-reg",
    "sem",
    "sem-fence",
    "sem-permits",
    "sem-queue",
    "sem-queued",
    "sem-reg",
    "rw-write",
    "rw-read",
    "rw-intent",
    "rw-fence",
    "rw-queue",
    "rw-queued",
    "rw-reg",
    "elect",
    "elect-term",
    "elect-log",
];

/// The ACL rules for a locker of namespace `ns`: nothing but [`COMMANDS`],
/// the keys of every kind a locker writes ([`KEY_KINDS`]: locks, fence
/// counters, hand-over queues, semaphores, read-write leases, elections),
/// the namespace's key-names marker, and its release channel.
pub(crate) fn rules(ns: &str) -> Vec<String> {
    let mut rules: Vec<String> = ["resetkeys", "resetchannels", "-@all"]
        .iter()
        .chain(COMMANDS.iter())
        .map(|s| (*s).to_owned())
        .collect();
    rules.extend(KEY_KINDS.iter().map(|kind| format!("~{ns}:{kind}:{{*")));
    rules.push(format!("~{ns}:key-names"));
    rules.push(format!("&{ns}:lock-released"));
    rules
}

/// The rules README adds on Redis Cluster (sharded notifications and the
/// topology checks) for namespace `ns`.
pub(crate) fn cluster_rules(ns: &str) -> Vec<String> {
    let mut rules: Vec<String> = [
        "+spublish",
        "+ssubscribe",
        "+sunsubscribe",
        "+command|info",
        "+cluster|slots",
    ]
    .map(String::from)
    .to_vec();
    rules.push(format!("&{ns}:lock-released:{{*"));
    rules
}

/// The rules README adds for the `redlease` CLI's holder records.
pub(crate) fn cli_rules(ns: &str) -> Vec<String> {
    vec![
        format!("~{ns}:lock-holder:{{*"),
        format!("~{ns}:sem-holder:{{*"),
    ]
}

/// Every key name the library and the CLI write for namespace `ns`
/// (src/core/names.rs, src/core/election.rs, src/bin/redlease/main.rs), with
/// and without a key's hash tag (`key_hash_tags`): `<ns>:<kind>:{...`.
fn written_keys(ns: &str) -> Vec<String> {
    let sha = "ab".repeat(32);
    let mut names = vec![format!("{ns}:key-names")];
    for tail in [format!("{{{sha}}}"), format!("{{{sha}}}:{sha}")] {
        for kind in [
            "lock",
            "lock-fence",
            "lock-queue",
            "lock-queued",
            "sem-permits",
            "sem-queue",
            "sem-queued",
            "rw-write",
            "rw-read",
            "rw-intent",
            "rw-fence",
            "rw-queue",
            "rw-queued",
            "elect",
            "elect-term",
            "elect-log",
            "lock-holder",
        ] {
            names.push(format!("{ns}:{kind}:{tail}"));
        }
        // A registration id, a semaphore's slot number.
        for kind in ["lock-reg", "sem-reg", "rw-reg"] {
            names.push(format!("{ns}:{kind}:{tail}:00000000000000ff"));
        }
        for kind in ["sem", "sem-fence", "sem-holder"] {
            names.push(format!("{ns}:{kind}:{tail}:3"));
        }
    }
    names
}

/// The release channels of namespace `ns`: one server's, and a sharded one
/// of Redis Cluster.
fn written_channels(ns: &str) -> Vec<(&'static str, String)> {
    let sha = "ab".repeat(32);
    vec![
        ("PUBLISH", format!("{ns}:lock-released")),
        ("SPUBLISH", format!("{ns}:lock-released:{{{sha}}}")),
    ]
}

/// README's rules are exact per namespace: a user with every rule README
/// lists for namespace `svc` (single server, Cluster and the CLI's) may
/// touch all of `svc`'s names and none of the names of a namespace that
/// starts with `svc:` and a kind (`svc:lock:v2`, `svc:rw-cache`, ...),
/// asked with `ACL DRYRUN` (Redis 7).
pub(crate) fn a_namespaces_rules_match_no_other_namespaces_names() {
    let server = RedisServer::start();
    let ns = "svc";
    let user = "locker-svc";
    let all: Vec<String> = rules(ns)
        .into_iter()
        .chain(cluster_rules(ns))
        .chain(cli_rules(ns))
        .collect();
    set_user(server.port(), user, &all);
    let mut conn = admin(server.port()).unwrap_or_else(|e| panic!("connect: {e}"));
    let mut allowed = |args: &[&str]| -> bool {
        let reply: redis::Value = redis::cmd("ACL")
            .arg("DRYRUN")
            .arg(user)
            .arg(args)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("ACL DRYRUN {args:?}: {e}"));
        reply == redis::Value::Okay
    };
    for key in written_keys(ns) {
        assert!(allowed(&["SET", &key, "v"]), "svc's own {key} is refused");
    }
    for (publish, channel) in written_channels(ns) {
        assert!(
            allowed(&[publish, &channel, "m"]),
            "svc's own {channel} is refused"
        );
    }
    let mut matched = Vec::new();
    for other in [
        "svc:lock:v2",
        "svc:rw-cache",
        "svc:sem:a",
        "svc:elect:a",
        "svc:lock-queue-a",
        "svc:lock-released:a",
        "svc:key-names",
    ] {
        for key in written_keys(other) {
            if allowed(&["GET", &key]) || allowed(&["SET", &key, "v"]) {
                matched.push(key);
            }
        }
        for (publish, channel) in written_channels(other) {
            if allowed(&[publish, &channel, "m"]) {
                matched.push(channel);
            }
        }
    }
    assert!(
        matched.is_empty(),
        "svc's rules match {} names of other namespaces: {matched:#?}",
        matched.len()
    );
}

fn admin(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))?;
    let timeout = Duration::from_secs(2);
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    Ok(conn)
}

fn set_user(port: u16, user: &str, rules: &[String]) -> String {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(format!(">{PASSWORD}"))
        .arg(rules);
    let mut conn = admin(port).unwrap_or_else(|e| panic!("connect as the default user: {e}"));
    let () = cmd
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("ACL SETUSER {user} {rules:?}: {e}"));
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{port}/0")
}

/// Creates (or resets) `user` with `rules` and returns a URL that logs in
/// as that user.
pub(crate) fn add_user(server: &RedisServer, user: &str, rules: &[String]) -> String {
    set_user(server.port(), user, rules)
}

fn denials_at(port: u16) -> redis::RedisResult<Vec<(String, String)>> {
    let mut conn = admin(port)?;
    let entries: Vec<HashMap<String, redis::Value>> =
        redis::cmd("ACL").arg("LOG").query(&mut conn)?;
    let text = |entry: &HashMap<String, redis::Value>, field: &str| match entry.get(field) {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(redis::Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    };
    Ok(entries
        .iter()
        .map(|e| (text(e, "username"), text(e, "object")))
        .collect())
}

/// What the ACL refused `user` (the `object` of each `ACL LOG` entry).
pub(crate) fn denials(server: &RedisServer, user: &str) -> Vec<String> {
    denials_at(server.port())
        .unwrap_or_else(|e| panic!("ACL LOG: {e}"))
        .into_iter()
        .filter(|(u, _)| u == user)
        .map(|(_, object)| object)
        .collect()
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("a redis://host:port/db URL: {url}"))
}

/// A front end whose lockers log in as `locker-<namespace>`, a user with
/// exactly [`rules`]. Dropping a locker fails the test when the ACL
/// refused that user anything.
pub(crate) struct AsLockerUser<F> {
    inner: F,
    port: u16,
    user: String,
}

impl<F> Drop for AsLockerUser<F> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // A server already gone (or paused) cannot be asked; that is the
        // body's business, not this check's.
        let Ok(entries) = denials_at(self.port) else {
            return;
        };
        let denied: Vec<&String> = entries
            .iter()
            .filter(|(u, _)| *u == self.user)
            .map(|(_, object)| object)
            .collect();
        assert!(
            denied.is_empty(),
            "the least-privilege ACL refused the locker: {denied:?}"
        );
    }
}

impl<F: Front> Front for AsLockerUser<F> {
    type Lease = F::Lease;

    type Multi = F::Multi;

    fn acquire_all_with(
        &self,
        keys: &[&str],
        options: AcquireOptions,
    ) -> Result<Self::Multi, Error> {
        self.inner.acquire_all_with(keys, options)
    }

    fn fences(lease: &Self::Multi) -> Vec<Fence> {
        F::fences(lease)
    }

    fn fence_of(lease: &Self::Multi, key: &str) -> Option<Fence> {
        F::fence_of(lease, key)
    }

    fn multi_is_valid(lease: &Self::Multi) -> bool {
        F::multi_is_valid(lease)
    }

    fn renew_multi(lease: &Self::Multi) -> Result<RenewOutcome, Error> {
        F::renew_multi(lease)
    }

    fn release_multi(lease: Self::Multi) -> Result<ReleaseOutcome, Error> {
        F::release_multi(lease)
    }

    fn multi_debug(lease: &Self::Multi) -> String {
        F::multi_debug(lease)
    }

    type Leadership = F::Leadership;

    fn campaign(
        &self,
        name: &str,
        value: &[u8],
        options: AcquireOptions,
    ) -> Result<Self::Leadership, Error> {
        self.inner.campaign(name, value, options)
    }

    fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        self.inner.leader(name)
    }

    fn election_debug(&self, name: &str) -> Result<String, Error> {
        self.inner.election_debug(name)
    }

    fn observe(&self, name: &str) -> Result<crate::behaviour::front::Observations, Error> {
        self.inner.observe(name)
    }

    fn term(leadership: &Self::Leadership) -> Fence {
        F::term(leadership)
    }

    fn leadership_is_valid(leadership: &Self::Leadership) -> bool {
        F::leadership_is_valid(leadership)
    }

    fn leadership_is_lost(leadership: &Self::Leadership) -> bool {
        F::leadership_is_lost(leadership)
    }

    fn proclaim(leadership: &Self::Leadership, value: &[u8]) -> Result<Version, Error> {
        F::proclaim(leadership, value)
    }

    fn resign(leadership: Self::Leadership) -> Result<ReleaseOutcome, Error> {
        F::resign(leadership)
    }

    fn leadership_debug(leadership: &Self::Leadership) -> String {
        F::leadership_debug(leadership)
    }

    const NOTICES_IDLE_CLOSE: bool = F::NOTICES_IDLE_CLOSE;

    fn connect(url: &str, config: Config) -> Result<Self, Error> {
        let port = port_of(url);
        let user = format!("locker-{}", config.namespace());
        let url = set_user(port, &user, &rules(config.namespace()));
        let inner = F::connect(&url, config)?;
        Ok(AsLockerUser { inner, port, user })
    }

    fn acquire(&self, key: &str) -> Result<Self::Lease, Error> {
        self.inner.acquire(key)
    }

    fn acquire_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Lease, Error> {
        self.inner.acquire_with(key, options)
    }

    fn shutdown(&self) -> Result<(), Error> {
        self.inner.shutdown()
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }

    fn fence(lease: &Self::Lease) -> Fence {
        F::fence(lease)
    }

    fn is_valid(lease: &Self::Lease) -> bool {
        F::is_valid(lease)
    }

    fn remaining(lease: &Self::Lease) -> Duration {
        F::remaining(lease)
    }

    fn renew(lease: &Self::Lease) -> Result<RenewOutcome, Error> {
        F::renew(lease)
    }

    fn release(lease: Self::Lease) -> Result<ReleaseOutcome, Error> {
        F::release(lease)
    }

    fn debug(lease: &Self::Lease) -> String {
        F::debug(lease)
    }

    fn replicas(lease: &Self::Lease) -> Option<u32> {
        F::replicas(lease)
    }

    type Permit = F::Permit;

    fn acquire_permit(
        &self,
        key: &str,
        permits: u32,
        options: AcquireOptions,
    ) -> Result<Self::Permit, Error> {
        self.inner.acquire_permit(key, permits, options)
    }

    fn slot(permit: &Self::Permit) -> u32 {
        F::slot(permit)
    }

    fn permit_fence(permit: &Self::Permit) -> Fence {
        F::permit_fence(permit)
    }

    fn permit_is_valid(permit: &Self::Permit) -> bool {
        F::permit_is_valid(permit)
    }

    fn renew_permit(permit: &Self::Permit) -> Result<RenewOutcome, Error> {
        F::renew_permit(permit)
    }

    fn release_permit(permit: Self::Permit) -> Result<ReleaseOutcome, Error> {
        F::release_permit(permit)
    }

    fn permit_debug(permit: &Self::Permit) -> String {
        F::permit_debug(permit)
    }

    type Read = F::Read;
    type Write = F::Write;

    fn read_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Read, Error> {
        self.inner.read_with(key, options)
    }

    fn write_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Write, Error> {
        self.inner.write_with(key, options)
    }

    fn epoch(read: &Self::Read) -> Fence {
        F::epoch(read)
    }

    fn read_remaining(read: &Self::Read) -> Duration {
        F::read_remaining(read)
    }

    fn write_fence(write: &Self::Write) -> Fence {
        F::write_fence(write)
    }

    fn renew_read(read: &Self::Read) -> Result<RenewOutcome, Error> {
        F::renew_read(read)
    }

    fn release_read(read: Self::Read) -> Result<ReleaseOutcome, Error> {
        F::release_read(read)
    }

    fn renew_write(write: &Self::Write) -> Result<RenewOutcome, Error> {
        F::renew_write(write)
    }

    fn release_write(write: Self::Write) -> Result<ReleaseOutcome, Error> {
        F::release_write(write)
    }
}

// ----- the behaviour suite's core cases, as the locker user -----------------------

/// Fences go up by one per grant, from the server clock.
pub(crate) fn fences_strictly_increase<F: Front>() {
    fences::fences_strictly_increase_across_acquires_on_one_key::<AsLockerUser<F>>();
}

/// Fences survive `FLUSHALL`.
pub(crate) fn fences_keep_increasing_after_redis_lost_its_data<F: Front>() {
    fences::fences_keep_increasing_after_redis_lost_its_data::<AsLockerUser<F>>();
}

/// A replayed acquire returns its fence again.
pub(crate) fn a_replayed_acquire_returns_the_same_fence<F: Front>() {
    fences::an_acquire_replayed_with_its_token_returns_the_same_fence::<AsLockerUser<F>>();
}

/// `LOCK_BUSY` with the holder's remaining time.
pub(crate) fn a_zero_wait_on_a_held_key_is_busy<F: Front>() {
    waiting::a_zero_wait_on_a_held_key_gives_lock_busy_with_the_holders_remaining_time::<
        AsLockerUser<F>,
    >();
}

/// Hand-over by release notification (the SUBSCRIBE and the in-script
/// PUBLISH are allowed).
pub(crate) fn a_waiter_is_woken_by_the_release_notification<F: Front>() {
    waiting::a_waiter_is_woken_by_the_release_notification_not_its_safety_poll::<AsLockerUser<F>>();
}

/// A release by the waiters' own locker wakes them by notification.
pub(crate) fn a_release_by_the_same_locker_wakes_its_waiters<F: Front>() {
    waiting::a_release_by_the_same_locker_wakes_its_waiters_through_the_notification::<
        AsLockerUser<F>,
    >();
}

/// FIFO inside a locker.
pub(crate) fn waiters_are_served_in_arrival_order<F: Front>() {
    waiting::waiters_of_one_locker_are_served_in_arrival_order::<AsLockerUser<F>>();
}

/// `WAIT_TIMEOUT` with the holder's remaining time.
pub(crate) fn a_wait_that_runs_out_is_wait_timeout<F: Front>() {
    waiting::a_wait_that_runs_out_gives_wait_timeout_with_the_holders_remaining_time::<
        AsLockerUser<F>,
    >();
}

/// Release outcomes: `Released`, `Expired`, `Conflict`.
pub(crate) fn release_outcomes_released_expired_conflict<F: Front>() {
    outcomes::release_of_a_held_lease_reports_released_and_keeps_the_fence_counter::<AsLockerUser<F>>(
    );
    outcomes::release_after_the_lease_expired_reports_expired::<AsLockerUser<F>>();
    outcomes::release_after_another_owner_took_the_key_reports_conflict::<AsLockerUser<F>>();
}

/// Renew outcomes: `Renewed`, `Expired`, `Conflict`.
pub(crate) fn renew_outcomes_renewed_expired_conflict<F: Front>() {
    outcomes::renew_of_a_held_lease_extends_it_to_a_full_lease::<AsLockerUser<F>>();
    outcomes::renew_after_the_lease_expired_reports_expired_and_the_lease_stays_invalid::<
        AsLockerUser<F>,
    >();
    outcomes::renew_after_another_owner_took_the_key_reports_conflict_and_stays_invalid::<
        AsLockerUser<F>,
    >();
}

/// `SCRIPT LOAD` (blocking) and `EVAL` (async) after `NOSCRIPT`.
pub(crate) fn flushed_scripts_are_loaded_again<F: Front>() {
    faults::flushed_scripts_are_loaded_again::<AsLockerUser<F>>();
}

/// Shutdown releases tracked leases.
pub(crate) fn shutdown_releases_tracked_leases<F: Front>() {
    shutdown::shutdown_releases_tracked_leases_and_keeps_fence_counters::<AsLockerUser<F>>();
    shutdown::releasing_a_lease_after_shutdown_reports_shutting_down::<AsLockerUser<F>>();
}

/// Shutdown ends waits.
pub(crate) fn shutdown_ends_waits<F: Front>() {
    shutdown::shutdown_ends_waits_and_refuses_new_acquires_with_shutting_down::<AsLockerUser<F>>();
}

/// Permits up to the count, each slot with its own fence counter, `Busy`
/// beyond it (the acquire script's `MGET` and the slot keys are allowed).
pub(crate) fn permits_are_granted_up_to_the_count<F: Front>() {
    semaphore::permits_are_granted_up_to_the_count_each_in_a_slot_of_its_own::<AsLockerUser<F>>();
}

/// A slot's fences increase, also after `FLUSHALL`.
pub(crate) fn each_slots_fences_strictly_increase<F: Front>() {
    semaphore::each_slots_fences_strictly_increase_also_after_data_loss::<AsLockerUser<F>>();
}

/// A permit release wakes a waiter by notification.
pub(crate) fn a_permit_release_wakes_a_waiter<F: Front>() {
    semaphore::a_release_wakes_a_waiter_through_the_notification::<AsLockerUser<F>>();
}

/// Readers share, a writer holds alone, epochs follow fences.
pub(crate) fn readers_share_and_a_writer_holds_alone<F: Front>() {
    rw_lock::readers_share_a_writer_holds_alone_and_epochs_follow_fences::<AsLockerUser<F>>();
}

/// Candidates campaign, read the leader and resign under contention (the
/// log's commands, the read-only read, the vacancy notification).
pub(crate) fn one_leader_at_a_time_with_increasing_terms<F: Front>() {
    election::one_leader_at_a_time_under_contention_and_terms_strictly_increase::<AsLockerUser<F>>(
    );
}

/// Multi-key leases: all at once, waiting with reservations (and the
/// hand-over's registrations), renew and release, under the same rules as
/// the lock's.
pub(crate) fn multi_key_leases_wait_hold_and_release<F: Front>() {
    multi::all_keys_are_taken_at_once_each_with_its_own_fence::<AsLockerUser<F>>();
    multi::a_held_key_makes_it_wait_reserving_the_free_ones::<AsLockerUser<F>>();
    multi::a_multi_key_waiter_is_not_starved_by_single_key_contenders::<AsLockerUser<F>>();
}

/// A resign wakes a waiting candidate by notification; proclaim logs.
pub(crate) fn a_resign_hands_over_and_proclaim_logs<F: Front>() {
    election::a_resign_hands_over_to_a_waiting_candidate::<AsLockerUser<F>>();
    election::proclaim_changes_the_value_and_keeps_the_term::<AsLockerUser<F>>();
}

/// A waiting writer's intent keeps readers out; the release hands over.
pub(crate) fn a_waiting_writer_keeps_readers_out<F: Front>() {
    rw_lock::a_waiting_writer_keeps_new_readers_out_and_gets_in_on_release::<AsLockerUser<F>>();
}

/// Reader renew and release outcomes.
pub(crate) fn reader_renew_and_release_outcomes<F: Front>() {
    rw_lock::a_reader_renew_never_resurrects_an_expired_reader::<AsLockerUser<F>>();
}

/// Permit renew and release outcomes; the permit-count record.
pub(crate) fn permit_outcomes_and_count_changes<F: Front>() {
    semaphore::permit_renew_and_release_report_their_outcomes::<AsLockerUser<F>>();
    semaphore::another_permit_count_is_refused_while_held_and_applies_once_drained::<AsLockerUser<F>>(
    );
}

/// Every command the locker user sent in a busy scenario (contention with
/// notifications, a zero-wait try, renew, release, a flushed script
/// cache, shutdown with a tracked lease) is one the rules name, and
/// nothing was refused.
pub(crate) fn no_command_outside_the_rules_is_sent<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("acl-all");
    server.reset_stats();
    {
        let holder: AsLockerUser<F> = connect(&server, config(&ns));
        let waiters = Arc::new(connect::<AsLockerUser<F>>(
            &server,
            config(&ns).wait(Duration::from_secs(20)),
        ));
        let held = granted(
            holder.acquire_with("k", leased(Duration::from_secs(30))),
            "holder",
        );
        assert_eq!(
            refused(waiters.acquire_with("k", no_wait()), "busy").code(),
            "LOCK_BUSY"
        );
        let w = waiters.clone();
        let waiter = spawn("waiter", move || {
            let lease = granted(w.acquire("k"), "waiter");
            AsLockerUser::<F>::release(lease)
        });
        wait_for_stats(&*waiters, "subscribed and waiting", |s| {
            s.subscribed && s.busy_replies >= 2
        });
        server.script_flush();
        assert_eq!(
            AsLockerUser::<F>::renew(&held).unwrap(),
            RenewOutcome::Renewed
        );
        assert_eq!(
            AsLockerUser::<F>::release(held).unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(waiter.join_within(BOUND).unwrap(), ReleaseOutcome::Released);
        // The semaphore: a busy try, a waiter, an orphan-free release.
        let permit = granted(
            holder.acquire_permit("pool", 1, leased(Duration::from_secs(30))),
            "a permit",
        );
        assert_eq!(
            refused(waiters.acquire_permit("pool", 1, no_wait()), "busy").code(),
            "LOCK_BUSY"
        );
        let w = waiters.clone();
        let busy = waiters.stats().busy_replies;
        let permit_waiter = spawn("permit waiter", move || {
            let permit = granted(
                w.acquire_permit("pool", 1, crate::behaviour::common::waiting(BOUND)),
                "permit waiter",
            );
            AsLockerUser::<F>::release_permit(permit)
        });
        wait_for_stats(&*waiters, "the permit waiter waits", |s| {
            s.subscribed && s.busy_replies >= busy + 2
        });
        assert_eq!(
            AsLockerUser::<F>::renew_permit(&permit).unwrap(),
            RenewOutcome::Renewed
        );
        assert_eq!(
            AsLockerUser::<F>::release_permit(permit).unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(
            permit_waiter.join_within(BOUND).unwrap(),
            ReleaseOutcome::Released
        );
        // The read-write lease: readers, a busy writer, a writer, renews.
        let read = granted(holder.read_with("doc", no_wait()), "a reader");
        assert_eq!(
            refused(waiters.write_with("doc", no_wait()), "busy writer").code(),
            "LOCK_BUSY"
        );
        assert_eq!(
            AsLockerUser::<F>::renew_read(&read).unwrap(),
            RenewOutcome::Renewed
        );
        assert_eq!(
            AsLockerUser::<F>::release_read(read).unwrap(),
            ReleaseOutcome::Released
        );
        let write = granted(waiters.write_with("doc", no_wait()), "a writer");
        assert_eq!(
            AsLockerUser::<F>::renew_write(&write).unwrap(),
            RenewOutcome::Renewed
        );
        assert_eq!(
            AsLockerUser::<F>::release_write(write).unwrap(),
            ReleaseOutcome::Released
        );
        let kept_read = granted(
            holder.read_with("doc", no_wait()),
            "a reader left to shutdown",
        );
        let kept_permit = granted(
            holder.acquire_permit("pool", 1, no_wait()),
            "a permit left to shutdown",
        );
        let kept = granted(waiters.acquire("kept"), "a lease left to shutdown");
        server.script_flush();
        waiters.shutdown().unwrap();
        holder.shutdown().unwrap();
        assert!(!exists(&server, &lock_name(&ns, "kept")));
        assert_eq!(server.keys(&format!("{ns}:sem:*")), Vec::<String>::new());
        assert_eq!(
            server.keys(&format!("{ns}:rw-read:*")),
            Vec::<String>::new()
        );
        drop((kept, kept_permit, kept_read));
    }
    let allowed: BTreeSet<String> = COMMANDS
        .iter()
        .map(|c| c.trim_start_matches('+').to_owned())
        // sent by this test as the default user, or allowed to everyone
        .chain(
            [
                "config|resetstat",
                "script|flush",
                "acl|setuser",
                "acl|log",
                "info",
                "keys",
                "hello",
                "auth",
                "client|setinfo",
            ]
            .map(String::from),
        )
        .collect();
    let sent: BTreeSet<String> = server.commandstats().into_keys().collect();
    let outside: Vec<&String> = sent.difference(&allowed).collect();
    assert!(
        outside.is_empty(),
        "commands outside the rules: {outside:?}"
    );
    assert_eq!(
        denials(&server, &format!("locker-{ns}")),
        Vec::<String>::new()
    );
}

/// docs/PROTOCOL.md §12: a locker that never campaigns reads the leader and
/// observes its changes as a user with read-only key rights (`%R~`) on the
/// election's lease and log, write rights on the namespace's key-names
/// marker alone (`SET`, recorded at connect when missing), and the release
/// channel (an observer reads when notified); Redis refuses nothing.
pub(crate) fn an_observer_reads_the_leader_as_a_read_only_user<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("acl-observer");
    let candidate: F = connect(&server, config(&ns));
    let leadership = granted(
        candidate.campaign("scheduler", b"host-a", no_wait()),
        "a leads",
    );

    let user = format!("observer-{ns}");
    let rules: Vec<String> = [
        "resetkeys",
        "resetchannels",
        "-@all",
        "+evalsha_ro",
        "+eval_ro",
        "+get",
        "+pttl",
        "+xrange",
        "+xrevrange",
        "+subscribe",
        "+ping",
        "+config|get",
        "+info",
        "+set",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([
        format!("%R~{ns}:elect:{{*"),
        format!("%R~{ns}:elect-log:{{*"),
        format!("~{ns}:key-names"),
        format!("&{ns}:lock-released"),
    ])
    .collect();
    let url = set_user(server.port(), &user, &rules);
    let observer = F::connect(&url, config(&ns)).unwrap();
    let leader = observer.leader("scheduler").unwrap().expect("a leads");
    assert_eq!(
        (leader.term, leader.value),
        (F::term(&leadership), b"host-a".to_vec())
    );
    let mut changes = observer.observe("scheduler").unwrap();
    let first = changes.next().expect("the current state");
    assert!(first.resync && first.leader.is_some());
    F::proclaim(&leadership, b"host-b").unwrap();
    let next = changes.next().expect("the proclaim");
    assert_eq!(next.leader.map(|l| l.value), Some(b"host-b".to_vec()));
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
    assert_eq!(observer.leader("scheduler").unwrap(), None);
    wait_until(BOUND, "the observer's subscription", || {
        observer.stats().subscribed
    });

    let denied: Vec<(String, String)> = denials_at(server.port())
        .unwrap()
        .into_iter()
        .filter(|(u, _)| *u == user)
        .collect();
    assert!(
        denied.is_empty(),
        "the read-only user was refused: {denied:?}"
    );
}

/// An ACL without the namespace's key-names marker (`~<ns>:key-names`):
/// a locker with the default names logs `KEY_NAMES_UNCHECKED` and works
/// as before; one with `key_hash_tags(true)` is refused at connect with
/// `InvalidConfig` saying which rule to grant.
pub(crate) fn without_the_key_names_rule_only_a_default_locker_connects<F: Front>() {
    let logs = crate::behaviour::logs::capture();
    let server = RedisServer::start();
    let ns = namespace("acl-key-names");
    let marker = format!("~{ns}:key-names");
    let user = format!("locker-{ns}");
    let without: Vec<String> = rules(&ns).into_iter().filter(|r| *r != marker).collect();
    let url = add_user(&server, &user, &without);

    let plain = F::connect(&url, config(&ns)).unwrap_or_else(|e| panic!("plain: {e:?}"));
    assert!(
        logs.contains(log::Level::Warn, "KEY_NAMES_UNCHECKED"),
        "{:?}",
        logs.records()
    );
    let lease = granted(plain.acquire_with("k", no_wait()), "a default locker");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);

    match F::connect(&url, config(&ns).key_hash_tags(true)) {
        Ok(_) => panic!("a tagged locker connected without the marker rule"),
        Err(e @ Error::InvalidConfig { option, .. }) => {
            assert_eq!(option, "key_hash_tags");
            assert!(e.to_string().contains("~<namespace>:key-names"), "{e}");
        }
        Err(other) => panic!("expected INVALID_CONFIG, got {other:?}"),
    }
    assert!(
        denials(&server, &user)
            .iter()
            .all(|o| *o == format!("{ns}:key-names")),
        "only the marker is refused"
    );
}
