//! The scripts driven one call at a time against a real `redis-server`, in
//! the orders that once broke the protocol's invariants (docs/PROTOCOL.md):
//! a writer beside a live reader, a live registration jumped, a queue
//! without its flag, a reader left out of its round, a permit granted twice
//! to one registration, a re-sent read that kept its first expiry, keys
//! left behind for ever.
//!
//! Each test names the invariant it checks. Dead registrants are written
//! as queue entries whose bound has passed, which is what a killed locker
//! leaves behind.

mod support;

use std::time::Duration;

use redis::Value;
use sha2::{Digest, Sha256};

use support::script_source::{script_names, script_source};
use support::{wait_until, RedisServer};

const BOUND: Duration = Duration::from_secs(10);

/// One key's names in one namespace, as the crate writes them.
struct Names {
    ns: String,
    sha: String,
    /// `{<sha>}`, or `{<sha(tag)>}:<sha>` for a key with a hash tag.
    braced: String,
}

impl Names {
    fn new(ns: &str, key: &str) -> Self {
        let sha = sha_of(key);
        Names {
            ns: ns.to_owned(),
            braced: format!("{{{sha}}}"),
            sha,
        }
    }

    /// The names of a key with the hash tag `tag` (`key_hash_tags(true)`).
    fn tagged(ns: &str, key: &str, tag: &str) -> Self {
        let sha = sha_of(key);
        Names {
            ns: ns.to_owned(),
            braced: format!("{{{}}}:{sha}", sha_of(tag)),
            sha,
        }
    }

    /// `<ns>:<kind>:{<sha>}`
    fn of(&self, kind: &str) -> String {
        format!("{}:{kind}:{}", self.ns, self.braced)
    }

    fn queue(&self, kind: &str) -> String {
        self.of(&format!("{kind}-queue"))
    }

    fn flag(&self, kind: &str) -> String {
        self.of(&format!("{kind}-queued"))
    }

    /// `<ns>:<kind>-reg:{<sha>}:<reg>`
    fn reg(&self, kind: &str, reg: &str) -> String {
        format!("{}:{reg}", self.of(&format!("{kind}-reg")))
    }

    fn channel(&self) -> String {
        format!("{}:lock-released", self.ns)
    }
}

/// What an attempt adds for the hand-over (the script's `handover_args`).
#[derive(Clone, Copy)]
struct Handover<'a> {
    /// The locker's registration id (`r…`/`w…` for a read-write lease).
    reg: &'a str,
    /// The grant token the registration names; empty: a try-once attempt
    /// that does not register.
    grant: &'a str,
    /// The grant token when the locker's registration is queued, so a
    /// grant to it is looked for; empty otherwise.
    other: &'a str,
    /// `d`, `k` or `r` (the script's `keep`).
    keep: &'a str,
    reg_ms: u64,
}

impl<'a> Handover<'a> {
    /// A waiting attempt of a locker with no other waiter.
    fn waiting(reg: &'a str, grant: &'a str) -> Self {
        Handover {
            reg,
            grant,
            other: grant,
            keep: "d",
            reg_ms: 10_000,
        }
    }
}

struct Scripts<'s> {
    server: &'s RedisServer,
    names: Names,
}

impl<'s> Scripts<'s> {
    fn new(server: &'s RedisServer, ns: &str, key: &str) -> Self {
        Scripts {
            server,
            names: Names::new(ns, key),
        }
    }

    fn eval(&self, script: &str, keys: &[String], args: &[String]) -> redis::RedisResult<Value> {
        let source = script_source(script).unwrap_or_else(|e| panic!("{e}"));
        redis::cmd("EVAL")
            .arg(source)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query(&mut self.server.conn())
    }

    fn run(&self, script: &str, keys: &[String], args: &[String]) -> Value {
        self.eval(script, keys, args)
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// The hand-over's keys and arguments for queue kind `kind`.
    fn handover(&self, kind: &str, message: &str, h: Handover<'_>) -> (Vec<String>, Vec<String>) {
        let n = &self.names;
        (
            vec![n.queue(kind), n.flag(kind), n.reg(kind, h.reg)],
            vec![
                h.reg.to_owned(),
                h.reg_ms.to_string(),
                "2000".to_owned(),
                "PUBLISH".to_owned(),
                n.channel(),
                message.to_owned(),
                h.other.to_owned(),
                h.keep.to_owned(),
                h.grant.to_owned(),
            ],
        )
    }

    fn lock(&self, token: &str, lease_ms: u64, h: Option<Handover<'_>>) -> Value {
        let n = &self.names;
        let mut keys = vec![n.of("lock"), n.of("lock-fence")];
        let mut args = vec![token.to_owned(), lease_ms.to_string(), "0".to_owned()];
        if let Some(h) = h {
            let (k, a) = self.handover("lock", &n.sha, h);
            keys.extend(k);
            args.extend(a);
        }
        self.run("ACQUIRE_LUA", &keys, &args)
    }

    fn unlock(&self, token: &str) -> Value {
        let n = &self.names;
        self.run(
            "RELEASE_LUA",
            &[
                n.of("lock"),
                n.of("lock-fence"),
                n.queue("lock"),
                n.flag("lock"),
            ],
            &[
                token.to_owned(),
                "PUBLISH".to_owned(),
                n.channel(),
                n.sha.clone(),
                "0".to_owned(),
            ],
        )
    }

    fn rw(
        &self,
        script: &str,
        token: &str,
        lease_ms: u64,
        intent_ms: Option<u64>,
        h: Option<Handover<'_>>,
    ) -> Value {
        let n = &self.names;
        let mut keys = vec![
            n.of("rw-write"),
            n.of("rw-read"),
            n.of("rw-intent"),
            n.of("rw-fence"),
        ];
        let mut args = vec![token.to_owned(), lease_ms.to_string(), "0".to_owned()];
        args.extend(intent_ms.map(|ms| ms.to_string()));
        if let Some(h) = h {
            let (k, a) = self.handover("rw", &format!("rw:{}", n.sha), h);
            keys.extend(k);
            args.extend(a);
        }
        self.run(script, &keys, &args)
    }

    fn read(&self, token: &str, lease_ms: u64, h: Option<Handover<'_>>) -> Value {
        self.rw("RW_READ_LUA", token, lease_ms, None, h)
    }

    fn write(&self, token: &str, lease_ms: u64, h: Option<Handover<'_>>) -> Value {
        self.rw("RW_WRITE_LUA", token, lease_ms, Some(300), h)
    }

    /// A writer's release, with the hand-over.
    fn write_release(&self, token: &str) -> Value {
        let n = &self.names;
        self.run(
            "RELEASE_LUA",
            &[
                n.of("rw-write"),
                n.of("rw-fence"),
                n.queue("rw"),
                n.flag("rw"),
                n.of("rw-read"),
            ],
            &[
                token.to_owned(),
                "PUBLISH".to_owned(),
                n.channel(),
                format!("rw:{}", n.sha),
                "0".to_owned(),
            ],
        )
    }

    fn sem(&self, token: &str, permits: u32, h: Option<Handover<'_>>) -> Value {
        let n = &self.names;
        let mut keys = vec![n.of("sem-permits")];
        keys.extend((0..permits).map(|i| format!("{}:{i}", n.of("sem"))));
        keys.extend((0..permits).map(|i| format!("{}:{i}", n.of("sem-fence"))));
        let mut args = vec![
            token.to_owned(),
            "10000".to_owned(),
            "0".to_owned(),
            permits.to_string(),
        ];
        if let Some(h) = h {
            let (k, a) = self.handover("sem", &format!("sem:{}", n.sha), h);
            keys.extend(k);
            args.extend(a);
        }
        self.run("SEM_ACQUIRE_LUA", &keys, &args)
    }

    fn sem_release(&self, token: &str, slot: u32) -> Value {
        let n = &self.names;
        self.run(
            "RELEASE_LUA",
            &[
                format!("{}:{slot}", n.of("sem")),
                format!("{}:{slot}", n.of("sem-fence")),
                n.queue("sem"),
                n.flag("sem"),
            ],
            &[
                token.to_owned(),
                "PUBLISH".to_owned(),
                n.channel(),
                format!("sem:{}", n.sha),
                "0".to_owned(),
                String::new(),
                slot.to_string(),
            ],
        )
    }

    /// Takes registration `reg` of the grant token `owner` out of the
    /// queue of kind `kind` (what a locker sends when its line emptied).
    fn deregister(&self, kind: &str, reg: &str, owner: &str) -> Value {
        let n = &self.names;
        let keys = [n.queue(kind), n.reg(kind, reg)];
        self.run("DEREGISTER_LUA", &keys, &[owner.to_owned()])
    }

    /// Appends a registration of a locker that is gone: its bound has
    /// passed (as a killed locker's does), and its key has expired.
    fn dead_registration(&self, kind: &str, reg: &str) {
        let entry = format!("{reg}|{}|{reg}-owner:2000", self.now_ms() - 1);
        let n = &self.names;
        self.query(redis::cmd("RPUSH").arg(n.queue(kind)).arg(entry));
        self.query(redis::cmd("SET").arg(n.flag(kind)).arg("1"));
    }

    fn query(&self, cmd: &redis::Cmd) -> Value {
        self.server.query(cmd)
    }

    fn now_ms(&self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query(&mut self.server.conn())
            .expect("TIME");
        s * 1000 + us / 1000
    }

    fn get(&self, name: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(name)
            .query(&mut self.server.conn())
            .expect("GET")
    }

    fn pttl(&self, name: &str) -> i64 {
        redis::cmd("PTTL")
            .arg(name)
            .query(&mut self.server.conn())
            .expect("PTTL")
    }

    /// The registration ids queued for `kind`, in order.
    fn queued(&self, kind: &str) -> Vec<String> {
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(self.names.queue(kind))
            .arg(0)
            .arg(-1)
            .query(&mut self.server.conn())
            .expect("LRANGE");
        entries
            .iter()
            .map(|e| e.split('|').next().unwrap_or_default().to_owned())
            .collect()
    }

    /// The live readers' tokens with their expiries.
    fn readers(&self) -> Vec<(String, u64)> {
        redis::cmd("ZRANGE")
            .arg(self.names.of("rw-read"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut self.server.conn())
            .expect("ZRANGE")
    }

    /// Waits (bounded) until the server's clock has passed `ms`.
    fn wait_past(&self, ms: u64) {
        wait_until(BOUND, "the server's clock to pass a bound", || {
            self.now_ms() > ms
        });
    }

    /// Asserts that no writer holds the lease beside a live reader.
    fn assert_no_writer_beside_a_live_reader(&self, step: &str) {
        let now = self.now_ms();
        let live: Vec<_> = self
            .readers()
            .into_iter()
            .filter(|(_, expiry)| *expiry > now)
            .collect();
        let writer = self.get(&self.names.of("rw-write"));
        assert!(
            live.is_empty() || writer.is_none(),
            "{step}: writer {writer:?} beside live readers {live:?}"
        );
    }
}

fn sha_of(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn is_fence(v: &Value) -> bool {
    matches!(v, Value::BulkString(_))
}

/// Busy: the ms to wait, or a lock's `{ms, TIME ms}` when the attempt
/// registered.
fn is_busy(v: &Value) -> bool {
    match v {
        Value::Int(_) => true,
        Value::Array(items) => matches!(items[..], [Value::Int(_), Value::Int(at)] if at > 0),
        _ => false,
    }
}

/// A registering lock attempt answers busy with the server's time; the
/// grant's notice carries the grant's server time, and a release or renew
/// by the whole value of a hold `<grant token>:<fence>` matches that hold
/// only (docs/PROTOCOL.md §4.3).
#[test]
fn a_grant_carries_its_time_and_a_hold_is_matched_whole() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-claimless", "k");
    assert!(is_fence(&s.lock("holder", 10_000, None)));
    let waiting = Handover::waiting("W", "grant-w");
    let Value::Array(busy) = s.lock("w", 10_000, Some(waiting)) else {
        panic!("a registering attempt answers busy with the server's time");
    };
    let Value::Int(registered_at) = busy[1] else {
        panic!("{busy:?}");
    };
    let mut pubsub = server.conn();
    pubsub
        .send_packed_command(
            &redis::cmd("SUBSCRIBE")
                .arg(s.names.channel())
                .get_packed_command(),
        )
        .expect("subscribe");
    pubsub.recv_response().expect("the confirmation");
    assert_eq!(s.unlock("holder"), Value::Int(3), "handed over");
    let notice = pubsub.recv_response().expect("the grant's notice");
    // RESP2 `message, channel, payload`, or a RESP3 push of the last two.
    let payload = match &notice {
        Value::Push { data, .. } => data.last(),
        Value::Array(items) => items.last(),
        _ => None,
    };
    let Some(Value::BulkString(payload)) = payload else {
        panic!("{notice:?}");
    };
    let payload = String::from_utf8(payload.clone()).expect("text");
    let parts: Vec<&str> = payload.split(':').collect();
    // <sha>:g:<reg>:<fence>:<claim ms>:<server ms>
    assert_eq!(parts[1..3], ["g", "W"], "{payload}");
    let fence = parts[3];
    let at: i64 = parts[5].parse().expect("a server time");
    assert!(
        at >= registered_at,
        "granted after it registered: {payload}"
    );
    let lock = s.names.of("lock");
    let hold = format!("grant-w:{fence}");
    assert_eq!(s.get(&lock), Some(hold.clone()));

    let renew = |token: &str| {
        s.run(
            "RENEW_LUA",
            std::slice::from_ref(&lock),
            &[token.to_owned(), "10000".to_owned()],
        )
    };
    assert_eq!(
        renew(&format!("grant-w:{}", fence.parse::<u64>().unwrap() - 1)),
        Value::Int(2)
    );
    assert_eq!(renew(&hold), Value::Int(1), "the hold itself");
    assert_eq!(s.unlock("grant-w:1"), Value::Int(2), "another grant's hold");
    assert_eq!(
        s.unlock(&hold),
        Value::Int(3),
        "released by its whole value, and granted to the same registration again"
    );
    let later = s.get(&lock).expect("the next grant");
    assert_ne!(later, hold);
    // A replay of the old hold's release or renew leaves the later grant.
    assert_eq!(s.unlock(&hold), Value::Int(2));
    assert_eq!(renew(&hold), Value::Int(2));
    assert_eq!(s.get(&lock), Some(later));
}

/// A writer excludes every reader: a read attempt whose queue starts with a
/// dead reader's entry, followed by a live writer's, never grants that
/// writer while another reader is live (here one admitted by a locker
/// without the hand-over, which sees no queue).
#[test]
fn a_read_attempt_never_grants_a_writer_beside_a_live_reader() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f2b", "doc");
    let writer = Handover::waiting("wB", "grant-w");
    // A writer holds; writer B waits behind it, registered without an intent.
    assert!(is_fence(&s.write("w0", 300, None)));
    s.dead_registration("rw", "rX");
    assert!(is_busy(&s.write("wb", 10_000, Some(writer))));
    assert_eq!(s.queued("rw"), ["rX", "wB"]);
    // The holder lapses; a reader of a locker without the hand-over joins.
    wait_until(BOUND, "the writer to lapse", || {
        s.get(&s.names.of("rw-write")).is_none()
    });
    assert!(is_fence(&s.read("r1", 30_000, None)));
    // A reader with the hand-over comes next.
    let reader = Handover::waiting("rR2", "grant-r2");
    let reply = s.read("r2", 30_000, Some(reader));
    s.assert_no_writer_beside_a_live_reader("the second reader's attempt");
    assert!(is_busy(&reply), "a writer is queued first: {reply:?}");
    // Writer B's claim finds nothing to claim.
    let claim = s.write("wb", 10_000, Some(writer));
    s.assert_no_writer_beside_a_live_reader("the writer's claim");
    assert!(is_busy(&claim), "{claim:?}");
}

/// The same with nine dead readers' entries ahead of the live writer: the
/// first read attempt may not take the lease past the writer, and the next
/// one may not grant the writer beside it.
#[test]
fn nine_dead_readers_let_no_reader_past_a_queued_writer() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f2c", "doc");
    let writer = Handover::waiting("wB", "grant-w");
    assert!(is_fence(&s.write("w0", 300, None)));
    for i in 0..9 {
        s.dead_registration("rw", &format!("rD{i}"));
    }
    assert!(is_busy(&s.write("wb", 10_000, Some(writer))));
    wait_until(BOUND, "the writer to lapse", || {
        s.get(&s.names.of("rw-write")).is_none()
    });
    let r1 = s.read("r1", 30_000, Some(Handover::waiting("rR1", "grant-r1")));
    s.assert_no_writer_beside_a_live_reader("the first reader's attempt");
    let r2 = s.read("r2", 30_000, Some(Handover::waiting("rR2", "grant-r2")));
    s.assert_no_writer_beside_a_live_reader("the second reader's attempt");
    let claim = s.write("wb", 10_000, Some(writer));
    s.assert_no_writer_beside_a_live_reader("the writer's claim");
    // The writer was first in line: it holds, and no reader got in.
    assert!(is_busy(&r1) && is_busy(&r2), "{r1:?} {r2:?}");
    assert!(is_fence(&claim), "{claim:?}");
}

/// FIFO among live registrations: a try-once attempt that finds the lock
/// free with eight dead entries ahead of a live registration does not take
/// the lock; the live registration gets it.
#[test]
fn eight_dead_entries_let_no_attempt_jump_a_live_registration() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f3", "k");
    assert!(is_fence(&s.lock("holder", 300, None)));
    for i in 0..8 {
        s.dead_registration("lock", &format!("D{i}"));
    }
    let live = Handover::waiting("L", "grant-l");
    assert!(is_busy(&s.lock("l", 10_000, Some(live))));
    wait_until(BOUND, "the holder to lapse", || {
        s.get(&s.names.of("lock")).is_none()
    });
    let outsider = Handover {
        grant: "",
        other: "",
        ..Handover::waiting("C", "grant-c")
    };
    let reply = s.lock("c", 10_000, Some(outsider));
    assert!(is_busy(&reply), "the outsider jumped the queue: {reply:?}");
    let held = s.get(&s.names.of("lock")).unwrap_or_default();
    assert!(held.starts_with("grant-l:"), "granted to {held:?}");
    assert_eq!(s.queued("lock"), ["L"]);
}

/// The queue's flag is set whenever the queue holds an entry: a locker
/// that takes a free lock (flag left set, queue empty) and stays
/// registered for its next waiter leaves the flag set, so its release
/// hands over.
#[test]
fn a_registration_is_never_queued_without_the_flag() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f4", "k");
    let n = &s.names;
    s.query(redis::cmd("SET").arg(n.flag("lock")).arg("1"));
    let refresh = Handover {
        keep: "r",
        other: "",
        ..Handover::waiting("L", "grant-l")
    };
    assert!(is_fence(&s.lock("l1", 10_000, Some(refresh))));
    assert_eq!(s.queued("lock"), ["L"]);
    assert_eq!(
        s.get(&n.flag("lock")).as_deref(),
        Some("1"),
        "an entry is queued without the flag"
    );
    // Its second waiter refreshes the registration; the release hands over.
    let second = Handover {
        keep: "k",
        ..Handover::waiting("L", "grant-l")
    };
    assert!(is_busy(&s.lock("l2", 10_000, Some(second))));
    assert_eq!(s.unlock("l1"), Value::Int(3), "released and handed over");
    let outsider = Handover {
        grant: "",
        other: "",
        ..Handover::waiting("C", "grant-c")
    };
    assert!(is_busy(&s.lock("c", 10_000, Some(outsider))));
}

/// An attempt that gets the lease and refreshes its locker's registration
/// for the next waiter (`r`) registers it again where the queue lapsed
/// (the locker was stopped past its registration's bound): the locker
/// believes it registered, and its next waiter is served by the release.
#[test]
fn a_refreshing_attempt_registers_again_where_the_queue_lapsed() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-refresh", "k");
    let refresh = Handover {
        keep: "r",
        ..Handover::waiting("L", "grant-l")
    };
    assert!(is_fence(&s.lock("l1", 10_000, Some(refresh))));
    assert_eq!(s.queued("lock"), ["L"], "the registration asked for");
    assert_eq!(s.get(&s.names.flag("lock")).as_deref(), Some("1"));
    assert_eq!(s.unlock("l1"), Value::Int(3), "released and handed over");
}

/// FIFO (read-write): a writer's release admits every reader queued at the
/// head, however many, and leaves the writer behind them first in line.
#[test]
fn a_release_admits_every_reader_at_the_head_of_the_queue() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f5", "doc");
    assert!(is_fence(&s.write("w0", 30_000, None)));
    let regs: Vec<String> = (0..17).map(|i| format!("r{i:04}")).collect();
    let grants: Vec<String> = (0..17).map(|i| format!("grant-r{i:04}")).collect();
    for (reg, grant) in regs.iter().zip(&grants) {
        let reply = s.read(
            &format!("{grant}-t"),
            30_000,
            Some(Handover::waiting(reg, grant)),
        );
        assert!(is_busy(&reply));
    }
    assert!(is_busy(&s.write(
        "wb",
        30_000,
        Some(Handover::waiting("wW", "grant-w"))
    )));
    assert_eq!(s.write_release("w0"), Value::Int(1));
    let admitted: Vec<String> = s.readers().into_iter().map(|(t, _)| t).collect();
    assert_eq!(admitted.len(), 17, "admitted: {admitted:?}");
    assert_eq!(s.queued("rw").first().map(String::as_str), Some("wW"));
}

/// One grant per registration per round, for a semaphore whose key carries
/// a hash tag too: a registration granted one slot is not granted a second
/// before it claims the first.
#[test]
fn a_permit_registration_is_granted_one_slot_at_a_time() {
    let server = RedisServer::start();
    // The queue of a tagged key: `<ns>:sem-queue:{<sha(tag)>}:<sha>`.
    let mut s = Scripts::new(&server, "proto-f6", "{tenant}:pool");
    s.names = Names::tagged("proto-f6", "{tenant}:pool", "tenant");
    assert!(matches!(s.sem("a", 2, None), Value::Array(_)));
    assert!(matches!(s.sem("b", 2, None), Value::Array(_)));
    assert!(is_busy(&s.sem(
        "r",
        2,
        Some(Handover::waiting("R", "grant-r"))
    )));
    assert_eq!(s.sem_release("a", 0), Value::Int(3), "A's slot to R");
    let second = s.sem_release("b", 1);
    assert_eq!(second, Value::Int(1), "B's slot is not R's as well");
}

/// A re-sent read (the same token, after a reply was lost) runs its lease
/// from the re-send on, as every other kind's replay does.
#[test]
fn a_replayed_read_runs_its_lease_from_the_replay() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f1", "doc");
    let first = s.read("r", 1000, None);
    assert!(is_fence(&first));
    let start = s.now_ms();
    s.wait_past(start + 300);
    let replay_at = s.now_ms();
    assert_eq!(s.read("r", 1000, None), first, "the same epoch");
    let expiry = s.readers()[0].1;
    assert!(
        expiry >= replay_at + 1000,
        "the reader expires at {expiry}, before the replay's {replay_at} + 1000"
    );
    assert!(s.pttl(&s.names.of("rw-read")) > 900);
}

/// A live reader's re-sent read is its own again, also behind a waiting
/// writer's intent after the fence counter expired (`fence_counter_ttl`
/// shorter than the lease): it gets an epoch, never a busy reply that
/// would leave its token held and untracked.
#[test]
fn a_replayed_read_behind_an_intent_is_granted_after_the_counter_expired() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f11", "doc");
    assert!(is_fence(&s.read("r", 30_000, None)));
    s.query(redis::cmd("DEL").arg(s.names.of("rw-fence")));
    assert!(is_busy(&s.write("w", 30_000, None)), "a writer waits");
    assert!(s.get(&s.names.of("rw-intent")).is_some(), "with its intent");
    let replay = s.read("r", 30_000, None);
    assert!(is_fence(&replay), "the replay got {replay:?}");
}

/// Every script the crate ships compiles on a real server (`SCRIPT
/// LOAD`), composed from `src/scripts/` as the crate composes it.
#[test]
fn every_script_loads_into_redis() {
    let server = RedisServer::start();
    let names = script_names();
    assert!(names.len() >= 18, "{names:?}");
    for name in &names {
        let source = script_source(name).unwrap_or_else(|e| panic!("{e}"));
        let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&source)
            .query(&mut server.conn());
        assert!(loaded.is_ok(), "{name}: {loaded:?}");
    }
}

/// A permit attempt sent again after its reply was lost, by a locker whose
/// registration was granted a slot meanwhile: the attempt names its own
/// token and (as its outcome is unknown, it may have registered) the grant
/// token. It answers its own slot, the first send's, and leaves the grant
/// for the locker's next waiter; had it claimed the grant, the first
/// send's slot would stay held for a lease with nobody tracking it.
#[test]
fn a_replayed_permit_attempt_answers_its_own_slot_before_a_grant() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-f7", "pool");
    let holder = s.sem("h", 2, None);
    assert!(matches!(&holder, Value::Array(a) if a.first() == Some(&Value::Int(0))));
    // The locker's waiter takes slot 1, the last free one, and registers
    // the locker for its next waiter; the reply is lost.
    let taking = Handover {
        reg: "R",
        grant: "grant-r",
        other: "",
        keep: "k",
        reg_ms: 10_000,
    };
    let first = s.sem("w1", 2, Some(taking));
    let Value::Array(first) = first else {
        panic!("granted: {first:?}")
    };
    assert_eq!(first.first(), Some(&Value::Int(1)));
    assert_eq!(
        s.sem_release("h", 0),
        Value::Int(3),
        "slot 0 to R's registration"
    );
    let again = Handover {
        other: "grant-r",
        ..taking
    };
    let replay = s.sem("w1", 2, Some(again));
    let Value::Array(replay) = replay else {
        panic!("granted: {replay:?}")
    };
    assert_eq!(replay[..2], first[..2], "the first send's slot and fence");
    let slot0: Option<String> = redis::cmd("GET")
        .arg(format!("{}:0", s.names.of("sem")))
        .query(&mut server.conn())
        .expect("GET");
    assert!(
        slot0.is_some_and(|v| v.starts_with("grant-r:")),
        "the grant stays for the next waiter"
    );
}

/// A line's removal of its registration runs late: it went out on one
/// connection as the line emptied, and the same locker's next line of the
/// key, with a grant token of its own, registered on another connection
/// first (the same registration key: one per locker and key). The removal
/// takes out only the registration that named its grant token, so the
/// next line stays queued instead of waiting, registered as far as it
/// knows, for a grant that cannot come until its safety poll.
#[test]
fn a_late_deregistration_leaves_the_next_lines_registration_queued() {
    let server = RedisServer::start();
    let s = Scripts::new(&server, "proto-late-dereg", "k");
    assert!(is_fence(&s.lock("holder", 10_000, None)));
    let first = Handover {
        other: "",
        ..Handover::waiting("r1", "g-first")
    };
    assert!(is_busy(&s.lock("w1", 10_000, Some(first))));
    let next = Handover {
        other: "",
        ..Handover::waiting("r1", "g-next")
    };
    assert!(is_busy(&s.lock("w2", 10_000, Some(next))));
    s.deregister("lock", "r1", "g-first");
    assert_eq!(s.queued("lock"), vec!["r1"], "the next line stays queued");
    s.deregister("lock", "r1", "g-next");
    assert!(s.queued("lock").is_empty(), "its own removal takes it out");
}
