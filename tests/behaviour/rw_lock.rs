//! The read-write lease (docs/PROTOCOL.md §5.3): readers share and carry an epoch, a
//! writer holds alone with a fence, a waiting writer's intent keeps new
//! readers out, and dead holders free the key at their TTL.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redlease::{Error, ReleaseOutcome, RenewOutcome};

use super::common::{
    config, connect, get, granted, key_sha, leased, namespace, no_wait, refused, spawn, waiting,
    BOUND,
};
use super::fences::script_lua;
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// `<ns>:rw-<part>:{<sha>}`
pub(crate) fn rw_name(ns: &str, part: &str, key: &str) -> String {
    format!("{ns}:rw-{part}:{{{}}}", key_sha(key))
}

fn exists(server: &RedisServer, name: &str) -> bool {
    super::common::exists(server, name)
}

fn assert_busy<T>(result: Result<T, Error>, what: &str) {
    match refused(result, what) {
        Error::Busy { .. } => {}
        other => panic!("{what}: expected LOCK_BUSY, got {other:?}"),
    }
}

/// Readers on two lockers hold at once with the same epoch; a writer is
/// busy meanwhile and gets a fence above the epoch once they left; readers
/// are busy while it writes, and the next readers' epoch is its fence.
pub(crate) fn readers_share_a_writer_holds_alone_and_epochs_follow_fences<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-basic");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));

    let r1 = granted(a.read_with("doc", no_wait()), "a first reader");
    let r2 = granted(b.read_with("doc", no_wait()), "a second reader");
    let r3 = granted(a.read_with("doc", no_wait()), "a third reader, same locker");
    let epoch = F::epoch(&r1);
    assert_eq!(F::epoch(&r2), epoch);
    assert_eq!(F::epoch(&r3), epoch);
    assert_eq!(
        get(&server, &rw_name(&ns, "fence", "doc")),
        Some(epoch.get().to_string()),
        "the epoch is the counter's value"
    );
    assert_busy(
        b.write_with("doc", no_wait()),
        "a writer while readers hold",
    );
    assert!(
        !exists(&server, &rw_name(&ns, "intent", "doc")),
        "a try-once write leaves no intent"
    );
    for r in [r1, r2, r3] {
        assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
    }

    let w = granted(
        b.write_with("doc", no_wait()),
        "the writer after the readers",
    );
    let fence = F::write_fence(&w);
    assert!(fence > epoch, "the writer's fence is above every epoch");
    assert_busy(
        a.read_with("doc", no_wait()),
        "a reader while the writer holds",
    );
    assert_busy(a.write_with("doc", no_wait()), "a second writer");
    assert_eq!(F::renew_write(&w).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);

    let r = granted(a.read_with("doc", no_wait()), "a reader after the writer");
    assert_eq!(F::epoch(&r), fence, "the epoch is the latest writer fence");
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
    // A lock of the same key is another thing.
    let lease = granted(a.acquire_with("doc", no_wait()), "the lock of the key");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// Writer fences strictly increase, also after Redis lost its data; an
/// epoch handed out with no counter is below the next writer's fence.
pub(crate) fn writer_fences_strictly_increase_also_after_data_loss<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-fences");
    let locker: F = connect(&server, config(&ns));
    let mut fences = Vec::new();
    for round in 0..6 {
        if round == 3 {
            // Data lost in the ms of the last grant would floor the next
            // fence at that same ms (docs/PROTOCOL.md §3's limit): let the clock pass it.
            let last = fences.last().map_or(0, |f: &redlease::Fence| f.get());
            wait_until(BOUND, "the server clock passes the last fence's ms", || {
                super::common::server_time_ms(&server) > last / 1000
            });
            server.flushall();
            let r = granted(
                locker.read_with("doc", no_wait()),
                "a reader after the loss",
            );
            let epoch = F::epoch(&r);
            assert!(
                epoch > *fences.last().unwrap(),
                "floored at the server clock"
            );
            fences.push(epoch);
            assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
        }
        let w = granted(locker.write_with("doc", no_wait()), "a free writer");
        fences.push(F::write_fence(&w));
        assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
    }
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "writer fences (and the epoch after the loss) strictly increase: {fences:?}"
    );
}

/// A writer waiting for a reader sets its intent, which keeps new readers
/// out (writer preference); the reader's release hands the key to the
/// writer through the notification (safety polls 30 s, bound 10 s).
pub(crate) fn a_waiting_writer_keeps_new_readers_out_and_gets_in_on_release<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-prefer");
    let slow = config(&ns)
        .wait(Duration::from_secs(20))
        .lease(Duration::from_secs(30))
        .notify_poll_interval(Duration::from_secs(30));
    let readers: F = connect(&server, slow.clone());
    let writer = Arc::new(connect::<F>(&server, slow));

    let r = granted(readers.read_with("doc", no_wait()), "a reader");
    let w = writer.clone();
    let waiting_writer = spawn("waiting writer", move || {
        w.write_with("doc", waiting(Duration::from_secs(20)))
    });
    wait_until(BOUND, "the waiting writer's intent", || {
        exists(&server, &rw_name(&ns, "intent", "doc"))
    });
    assert_busy(
        readers.read_with("doc", no_wait()),
        "a new reader behind a waiting writer",
    );
    wait_until(BOUND, "the writer waits subscribed", || {
        let s = writer.stats();
        s.waiters == 1 && s.subscribed
    });
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
    let w = granted(
        waiting_writer.join_within(BOUND),
        "the writer after the reader",
    );
    assert!(
        !exists(&server, &rw_name(&ns, "intent", "doc")),
        "the grant cleared the writer's intent"
    );
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
}

/// A writer that gave up waiting leaves its intent behind, which keeps
/// readers out only for its short life (3 × `notify_poll_interval`).
pub(crate) fn a_dead_writers_intent_blocks_readers_only_briefly<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-intent");
    let cfg = config(&ns).notify_poll_interval(Duration::from_millis(100));
    let a: F = connect(&server, cfg.clone());
    let b: F = connect(&server, cfg);

    let r = granted(a.read_with("doc", no_wait()), "a reader");
    assert!(matches!(
        b.write_with("doc", waiting(Duration::from_millis(50))),
        Err(Error::WaitTimeout { .. })
    ));
    let intent = rw_name(&ns, "intent", "doc");
    assert!(exists(&server, &intent), "the writer left its intent");
    let left = super::common::pttl(&server, &intent);
    assert!(
        left > 0 && left <= 300,
        "the intent lives 3 × 100 ms: {left}"
    );
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
    let r = granted(
        a.read_with("doc", waiting(Duration::from_secs(5))),
        "a reader once the dead writer's intent expired",
    );
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
}

/// A reader that dies without releasing frees the writer at its TTL.
pub(crate) fn a_dead_reader_frees_the_writer_at_its_ttl<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-dead");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));
    let r = granted(
        a.read_with("doc", leased(Duration::from_millis(300))),
        "a short reader",
    );
    // Never released, never dropped: as if its process died.
    std::mem::forget(r);
    let w = granted(
        b.write_with("doc", waiting(Duration::from_secs(5))),
        "the writer after the dead reader's TTL",
    );
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
}

/// A reader's renew extends it; once it expired, renew and release say
/// `Expired` and the reader is never brought back.
pub(crate) fn a_reader_renew_never_resurrects_an_expired_reader<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-renew");
    let locker: F = connect(&server, config(&ns));
    let readers = rw_name(&ns, "read", "doc");

    let r = granted(locker.read_with("doc", no_wait()), "a reader");
    assert_eq!(F::renew_read(&r).unwrap(), RenewOutcome::Renewed);
    let ttl = super::common::pttl(&server, &readers);
    assert!(ttl > 4000, "the set expires with its latest member: {ttl}");
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);

    let short = granted(
        locker.read_with("doc", leased(Duration::from_millis(200))),
        "a short reader",
    );
    wait_until(BOUND, "the reader's set expired", || {
        !exists(&server, &readers)
    });
    assert_eq!(F::renew_read(&short).unwrap(), RenewOutcome::Expired);
    assert!(!exists(&server, &readers), "never resurrected");
    assert_eq!(F::release_read(short).unwrap(), ReleaseOutcome::Expired);

    // Expired by its score while another reader keeps the set alive.
    let long = granted(locker.read_with("doc", no_wait()), "a long reader");
    let short = granted(
        locker.read_with("doc", leased(Duration::from_millis(200))),
        "a short reader",
    );
    let server_ms = super::common::server_time_ms(&server);
    wait_until(BOUND, "past the short reader's expiry", || {
        super::common::server_time_ms(&server) > server_ms + 250
    });
    assert_eq!(F::renew_read(&short).unwrap(), RenewOutcome::Expired);
    assert_eq!(F::release_read(short).unwrap(), ReleaseOutcome::Expired);
    assert_eq!(F::release_read(long).unwrap(), ReleaseOutcome::Released);
}

/// The read and write scripts run again with a token already granted
/// return the same epoch or fence, without a second member or `INCR`.
pub(crate) fn replayed_reads_and_writes_return_the_same_epoch_and_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-replay");
    let _locker: F = connect(&server, config(&ns));
    let eval = |script: &str, key: &str, token: &str, extra: &[u64]| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script_lua(script)).arg(4);
        for part in ["write", "read", "intent", "fence"] {
            cmd.arg(rw_name(&ns, part, key));
        }
        cmd.arg(token).arg(5000).arg(0);
        for x in extra {
            cmd.arg(*x);
        }
        server.query(&cmd)
    };
    let mine = "0123456789abcdef0123456789abcdef";
    let first = eval("RW_READ_LUA", "r", mine, &[]);
    assert!(matches!(first, Value::BulkString(_)), "an epoch: {first:?}");
    assert_eq!(eval("RW_READ_LUA", "r", mine, &[]), first);
    let members: u64 = redis::cmd("ZCARD")
        .arg(rw_name(&ns, "read", "r"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(members, 1, "one reader");

    let fence = eval("RW_WRITE_LUA", "w", mine, &[750]);
    assert!(matches!(fence, Value::BulkString(_)), "a fence: {fence:?}");
    let counter = get(&server, &rw_name(&ns, "fence", "w"));
    assert_eq!(eval("RW_WRITE_LUA", "w", mine, &[750]), fence);
    assert_eq!(
        get(&server, &rw_name(&ns, "fence", "w")),
        counter,
        "no second INCR"
    );
}

/// A continuous stream of overlapping readers (eight lockers, each reading
/// again at once) does not starve a writer waiting on another locker: it
/// gets in within its wait (5 s; without writer preference it waits for an
/// instant with no reader, which this stream hardly leaves).
pub(crate) fn a_stream_of_readers_does_not_starve_a_waiting_writer<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-starve");
    let cfg = config(&ns).notify_poll_interval(Duration::from_millis(100));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..8)
        .map(|i| {
            let locker: F = connect(&server, cfg.clone());
            let (stop, reads) = (stop.clone(), reads.clone());
            spawn(&format!("reader {i}"), move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(r) = locker.read_with("doc", waiting(Duration::from_secs(1))) {
                        reads.fetch_add(1, Ordering::SeqCst);
                        super::common::let_pass(Duration::from_millis(50));
                        let _ = F::release_read(r);
                    }
                }
            })
        })
        .collect();
    wait_until(BOUND, "readers overlap", || {
        reads.load(Ordering::SeqCst) >= 16
    });
    let writer: F = connect(&server, cfg);
    let w = granted(
        writer.write_with("doc", waiting(Duration::from_secs(5))),
        "the writer amid a stream of readers",
    );
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join_within(BOUND);
    }
}

/// Readers overlap, a writer never overlaps anyone: 4 lockers with 6
/// reader and 2 writer loops each, marking on a second Redis (one script
/// call per entry, atomic there) how many readers and writers hold. Every
/// reader's epoch is the fence of the last writer that held before it,
/// writer fences strictly increase in grant order, and every loop finishes
/// its rounds within the bound.
pub(crate) fn readers_overlap_and_a_writer_never_overlaps_anyone_under_contention<F: Front>() {
    const LOCKERS: usize = 4;
    const READERS: usize = 6;
    const WRITERS: usize = 2;
    const ROUNDS: usize = 5;
    const HOLD: Duration = Duration::from_millis(2);
    // KEYS = the counter entered, the other; ARGV = the fence to record
    // (writers) or the epoch to check (readers). Returns
    // {entered, other, last writer fence or -1}.
    const ENTER: &str = r"
        local entered = redis.call('INCR', KEYS[1])
        local other = tonumber(redis.call('GET', KEYS[2]) or '0')
        local last = redis.call('GET', 'last-fence')
        if KEYS[1] == 'writers' then
          redis.call('RPUSH', 'fences', ARGV[1])
          redis.call('SET', 'last-fence', ARGV[1])
        end
        if KEYS[1] == 'readers' and entered > 1 then
          redis.call('INCR', 'overlapping-reads')
        end
        return {entered, other, tonumber(last or '-1')}
    ";
    let server = RedisServer::start();
    let markers = Arc::new(RedisServer::start());
    let ns = namespace("rw-contend");
    let lockers: Vec<Arc<F>> = (0..LOCKERS)
        .map(|_| Arc::new(connect(&server, config(&ns).wait(Duration::from_secs(30)))))
        .collect();
    let threads: Vec<_> = (0..LOCKERS * (READERS + WRITERS))
        .map(|i| {
            let (locker, markers) = (lockers[i % LOCKERS].clone(), markers.clone());
            let writer = (i / LOCKERS) < WRITERS;
            spawn(&format!("rw-{i}"), move || {
                let mut conn = markers.conn();
                let mut enter = |counter: &str, other: &str, n: u64| -> (i64, i64, i64) {
                    redis::cmd("EVAL")
                        .arg(ENTER)
                        .arg(2)
                        .arg(counter)
                        .arg(other)
                        .arg(n)
                        .query(&mut conn)
                        .unwrap_or_else(|e| panic!("marker enter: {e}"))
                };
                let leave = |counter: &str| {
                    let _: i64 = redis::cmd("DECR")
                        .arg(counter)
                        .query(&mut markers.conn())
                        .unwrap();
                };
                for round in 0..ROUNDS {
                    let what = format!("rw-{i}, round {round}");
                    if writer {
                        let w = granted(
                            locker.write_with("doc", waiting(Duration::from_secs(30))),
                            &what,
                        );
                        let fence = F::write_fence(&w).get();
                        let (writers, readers, last) = enter("writers", "readers", fence);
                        assert_eq!((writers, readers), (1, 0), "a writer alone: {what}");
                        assert!(
                            last < fence as i64,
                            "writer fences increase: {last} then {fence}"
                        );
                        super::common::let_pass(HOLD);
                        leave("writers");
                        assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
                    } else {
                        let r = granted(
                            locker.read_with("doc", waiting(Duration::from_secs(30))),
                            &what,
                        );
                        let epoch = F::epoch(&r).get();
                        let (_, writers, last) = enter("readers", "writers", epoch);
                        assert_eq!(writers, 0, "no writer beside a reader: {what}");
                        if last >= 0 {
                            assert_eq!(epoch as i64, last, "the epoch is the last writer's fence");
                        }
                        super::common::let_pass(HOLD * 4);
                        leave("readers");
                        assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join_within(Duration::from_secs(60));
    }
    let fences: Vec<u64> = redis::cmd("LRANGE")
        .arg("fences")
        .arg(0)
        .arg(-1)
        .query(&mut markers.conn())
        .unwrap();
    assert_eq!(
        fences.len(),
        LOCKERS * WRITERS * ROUNDS,
        "every write logged"
    );
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let overlapping: Option<u64> = redis::cmd("GET")
        .arg("overlapping-reads")
        .query(&mut markers.conn())
        .unwrap();
    assert!(overlapping.unwrap_or(0) > 0, "readers did overlap");
    for locker in &lockers {
        assert_eq!(locker.stats().waiters, 0);
    }
}

/// A writer's renew and release report `Renewed`/`Released`; after its
/// TTL ran out, `Expired` (and a release after that renew still reports
/// `Expired`); once another writer took the key, `Conflict` for both, and
/// the other writer's key stays.
pub(crate) fn writer_renew_and_release_report_their_outcomes<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-w-outcomes");
    let locker: F = connect(&server, config(&ns));
    let other: F = connect(&server, config(&ns));
    let writer = rw_name(&ns, "write", "doc");

    let w = granted(locker.write_with("doc", no_wait()), "a free writer");
    assert_eq!(F::renew_write(&w).unwrap(), RenewOutcome::Renewed);
    let ttl = super::common::pttl(&server, &writer);
    assert!(ttl > 4000, "renewed to a full lease: {ttl}");
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);

    let short = Duration::from_millis(200);
    let gone = granted(locker.write_with("doc", leased(short)), "a short writer");
    wait_until(BOUND, "the writer's key expired", || {
        !exists(&server, &writer)
    });
    assert_eq!(F::renew_write(&gone).unwrap(), RenewOutcome::Expired);
    assert!(!exists(&server, &writer), "never resurrected");
    assert_eq!(F::release_write(gone).unwrap(), ReleaseOutcome::Expired);

    let stale = granted(locker.write_with("doc", leased(short)), "a short writer");
    wait_until(BOUND, "the writer's key expired", || {
        !exists(&server, &writer)
    });
    let taken = granted(other.write_with("doc", no_wait()), "another writer");
    assert!(F::write_fence(&taken) > F::write_fence(&stale));
    assert_eq!(F::renew_write(&stale).unwrap(), RenewOutcome::Conflict);
    assert_eq!(F::release_write(stale).unwrap(), ReleaseOutcome::Conflict);
    assert!(exists(&server, &writer), "the other writer's key stays");
    assert_eq!(F::release_write(taken).unwrap(), ReleaseOutcome::Released);
}

/// What a read-write lease costs Redis, counted in
/// `commandstats`, each step alone: a read of a key nobody reads, a reader
/// joining, the releases of a reader and of the last one, a reader's
/// renew, a read and a try-once write refused by a writer and by readers,
/// and a write cycle. `TIME` runs only where a grant or a reader's expiry
/// needs it; the writer, the intent and the counter are read with one
/// `MGET`; the readers' set gets its expiry with `PEXPIREAT ... GT` (and
/// `NX` on a set that has none yet).
pub(crate) fn read_and_write_steps_run_the_commands_counted_here<F: Front>() {
    use super::fences::Counts;
    let server = RedisServer::start();
    let ns = namespace("rw-cost");
    let locker: F = connect(&server, config(&ns));
    let other: F = connect(&server, config(&ns));
    // Warm: the scripts are cached, the connections open, the counter set.
    for f in [&locker, &other] {
        let w = granted(f.write_with("doc", no_wait()), "warm-up write");
        assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
        let r = granted(f.read_with("doc", no_wait()), "warm-up read");
        assert_eq!(F::renew_read(&r).unwrap(), RenewOutcome::Renewed);
        assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
    }
    let mut counts = Counts::new(&server);
    // Every step below moves the server clock on, so that a later reader's
    // expiry is the latest (equal ones would need the `NX` try as well).
    let tick = || super::common::let_pass(Duration::from_millis(3));

    let first = counts.step(
        "a read of a key nobody reads",
        &[
            ("evalsha", 1),
            ("mget", 1),
            ("time", 1),
            ("zadd", 1),
            ("pexpireat", 2),
        ],
        || granted(locker.read_with("doc", no_wait()), "a first reader"),
    );
    tick();
    let second = counts.step(
        "a reader joining",
        &[
            ("evalsha", 1),
            ("mget", 1),
            ("time", 1),
            ("zadd", 1),
            ("pexpireat", 1),
            ("zremrangebyscore", 1),
        ],
        || granted(other.read_with("doc", no_wait()), "a second reader"),
    );
    counts.step(
        "the release of a reader with another left",
        &[
            ("evalsha", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zrem", 1),
            ("zcard", 1),
        ],
        || assert_eq!(F::release_read(second).unwrap(), ReleaseOutcome::Released),
    );
    tick();
    counts.step(
        "a reader's renew",
        &[
            ("evalsha", 1),
            ("time", 1),
            ("zscore", 1),
            ("zadd", 1),
            ("pexpireat", 1),
        ],
        || assert_eq!(F::renew_read(&first).unwrap(), RenewOutcome::Renewed),
    );
    counts.step(
        "a try-once write while a reader holds",
        &[("evalsha", 1), ("mget", 1), ("time", 1), ("zrange", 1)],
        || {
            assert_busy(
                other.write_with("doc", no_wait()),
                "a writer beside a reader",
            )
        },
    );
    counts.step(
        "the release of the last reader",
        &[
            ("evalsha", 1),
            // the hand-over queue's flag and the counter (a queued
            // locker would get the lease)
            ("mget", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zrem", 1),
            ("zcard", 1),
            ("publish", 1),
        ],
        || assert_eq!(F::release_read(first).unwrap(), ReleaseOutcome::Released),
    );
    counts.step(
        "a write cycle",
        &[
            ("evalsha", 2),
            ("mget", 2),
            ("time", 1),
            ("zrange", 1),
            ("set", 2),
            ("del", 1),
            ("publish", 1),
        ],
        || {
            let w = granted(locker.write_with("doc", no_wait()), "a free writer");
            assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
        },
    );
    let w = granted(other.write_with("doc", no_wait()), "a writer");
    counts.step(
        "a read while a writer holds",
        &[("evalsha", 1), ("mget", 1), ("pttl", 1)],
        || {
            assert_busy(
                locker.read_with("doc", no_wait()),
                "a reader beside a writer",
            )
        },
    );
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);

    // A waiting writer's attempt (it sets its intent) and a read behind it,
    // the writer's attempt run as the script it is.
    let r = granted(other.read_with("doc", no_wait()), "a reader");
    let waiting_writer = "0123456789abcdef0123456789abcdef";
    let write = |token: &str| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script_lua("RW_WRITE_LUA")).arg(4);
        for part in ["write", "read", "intent", "fence"] {
            cmd.arg(rw_name(&ns, part, "doc"));
        }
        cmd.arg(token).arg(5000).arg(0).arg(750);
        server.query(&cmd)
    };
    counts.step(
        "a waiting writer's attempt while a reader holds",
        &[
            ("eval", 1),
            ("mget", 1),
            ("time", 1),
            ("zrange", 1),
            ("set", 1),
        ],
        || assert!(matches!(write(waiting_writer), Value::Int(_))),
    );
    counts.step(
        "a read behind a waiting writer's intent",
        &[("evalsha", 1), ("mget", 1), ("zscore", 1), ("pttl", 1)],
        || {
            assert_busy(
                locker.read_with("doc", no_wait()),
                "a reader behind the intent",
            )
        },
    );
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
    counts.step(
        "the waiting writer's grant, which clears its intent",
        &[
            ("eval", 1),
            ("mget", 1),
            ("time", 1),
            ("zrange", 1),
            ("set", 2),
            ("del", 1),
        ],
        || assert!(matches!(write(waiting_writer), Value::BulkString(_))),
    );
    assert!(!exists(&server, &rw_name(&ns, "intent", "doc")));
    counts.finish();
}

/// The readers' set expires with its latest member: a longer reader
/// extends it, a shorter one or a shorter renew never cuts it. A replayed
/// read of a live reader returns its epoch and sets its expiry anew from
/// the replay on, as every kind's replay does, also behind a waiting
/// writer's intent; a member past its expiry that is
/// still in the set is granted anew, never taken for a replay. A writer
/// counts live readers only, also in a set that has no expiry.
pub(crate) fn the_readers_set_expires_with_its_latest_member_and_replays_keep_their_grant<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("rw-expiry");
    let _locker: F = connect(&server, config(&ns));
    let readers = rw_name(&ns, "read", "doc");
    let script = |name: &str, key: &str, token: &str, lease: u64, extra: &[u64]| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script_lua(name)).arg(4);
        for part in ["write", "read", "intent", "fence"] {
            cmd.arg(rw_name(&ns, part, key));
        }
        cmd.arg(token).arg(lease).arg(0);
        for x in extra {
            cmd.arg(*x);
        }
        server.query(&cmd)
    };
    let read = |token: &str, lease: u64| script("RW_READ_LUA", "doc", token, lease, &[]);
    let score = |token: &str| -> Option<f64> {
        redis::cmd("ZSCORE")
            .arg(&readers)
            .arg(token)
            .query(&mut server.conn())
            .unwrap()
    };
    let set_ttl = || super::common::pttl(&server, &readers);
    let token = |c: char| c.to_string().repeat(32);
    let (a, b, c, d, e) = (token('a'), token('b'), token('c'), token('d'), token('e'));

    let epoch = read(&a, 5000);
    assert!(matches!(epoch, Value::BulkString(_)), "{epoch:?}");
    let ttl = set_ttl();
    assert!(
        ttl > 0 && ttl <= 5000,
        "a new set expires with its reader: {ttl}"
    );
    assert_eq!(read(&b, 20_000), epoch);
    assert!(set_ttl() > 5000, "a longer reader extends the set");
    assert_eq!(read(&c, 1000), epoch);
    assert!(set_ttl() > 5000, "a shorter one never cuts it");
    let renewed = server.query(
        redis::cmd("EVAL")
            .arg(script_lua("RW_READ_RENEW_LUA"))
            .arg(1)
            .arg(&readers)
            .arg(&c)
            .arg(1000),
    );
    assert_eq!(renewed, Value::Int(1));
    assert!(set_ttl() > 5000, "nor a shorter renew");

    let a_score = score(&a);
    super::common::let_pass(Duration::from_millis(3));
    assert_eq!(read(&a, 5000), epoch, "a replay returns the epoch");
    assert!(
        score(&a) > a_score,
        "and sets the reader's expiry anew from the replay on"
    );

    // A member past its expiry, kept in the set by the others.
    let now = super::common::server_time_ms(&server);
    server.query(
        redis::cmd("ZADD")
            .arg(&readers)
            .arg(now.saturating_sub(10))
            .arg(&e),
    );
    assert_eq!(read(&e, 5000), epoch, "granted anew");
    assert!(
        score(&e).is_some_and(|s| s > now as f64 + 4000.0),
        "with a new expiry: {:?}",
        score(&e)
    );

    // A waiting writer's intent keeps new readers out, not replays.
    let writer = token('f');
    assert!(matches!(
        script("RW_WRITE_LUA", "doc", &writer, 5000, &[750]),
        Value::Int(_)
    ));
    assert!(exists(&server, &rw_name(&ns, "intent", "doc")));
    assert_eq!(read(&a, 5000), epoch, "a replay behind the intent");
    assert!(
        matches!(read(&d, 5000), Value::Int(_)),
        "a new reader behind the intent is busy"
    );
    assert_eq!(score(&d), None);

    // Only dead readers, in a set without expiry: the writer is not kept out.
    let dead = rw_name(&ns, "read", "dead");
    let now = super::common::server_time_ms(&server);
    server.query(
        redis::cmd("ZADD")
            .arg(&dead)
            .arg(now.saturating_sub(100))
            .arg(&a),
    );
    let fence = script("RW_WRITE_LUA", "dead", &writer, 5000, &[0]);
    assert!(matches!(fence, Value::BulkString(_)), "{fence:?}");
    assert!(!exists(&server, &dead), "and the dead readers are purged");
}

/// A writer's next fence is computed as the lock's (docs/PROTOCOL.md §3): a counter
/// past 2^53 moves by exactly one (through `INCR`), one that is not an
/// integer is refused without a grant, and the counter keeps its expiry
/// where the locker sets none and takes the locker's `fence_counter_ttl`
/// where it does; a reader's epoch is that counter, set to the clock's
/// floor (with that expiry) when it is missing.
pub(crate) fn the_write_counter_moves_exactly_and_keeps_or_takes_its_expiry<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rw-counter");
    let _locker: F = connect(&server, config(&ns));
    let (writer, counter) = (rw_name(&ns, "write", "doc"), rw_name(&ns, "fence", "doc"));
    let eval = |name: &str, counter_ttl: u64| -> redis::RedisResult<Value> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script_lua(name)).arg(4);
        for part in ["write", "read", "intent", "fence"] {
            cmd.arg(rw_name(&ns, part, "doc"));
        }
        cmd.arg("0123456789abcdef0123456789abcdef")
            .arg(5000)
            .arg(counter_ttl)
            .arg(0);
        cmd.query(&mut server.conn())
    };
    let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    server.query(redis::cmd("SET").arg(&counter).arg("9007199254740993"));
    assert_eq!(eval("RW_WRITE_LUA", 0).unwrap(), bulk("9007199254740994"));
    server.query(redis::cmd("DEL").arg(&writer));

    server.query(redis::cmd("SET").arg(&counter).arg("not-a-number"));
    assert!(
        eval("RW_WRITE_LUA", 0).is_err(),
        "a counter that is not an integer"
    );
    assert!(!exists(&server, &writer), "and nothing was granted");

    server.query(
        redis::cmd("SET")
            .arg(&counter)
            .arg("7")
            .arg("PX")
            .arg(600_000),
    );
    assert!(matches!(eval("RW_WRITE_LUA", 0), Ok(Value::BulkString(_))));
    let kept = super::common::pttl(&server, &counter);
    assert!(kept > 0 && kept <= 600_000, "the expiry is kept: {kept}");
    server.query(redis::cmd("DEL").arg(&writer));
    assert!(matches!(
        eval("RW_WRITE_LUA", 90_000),
        Ok(Value::BulkString(_))
    ));
    let set = super::common::pttl(&server, &counter);
    assert!(set > 0 && set <= 90_000, "the locker's expiry: {set}");
    server.query(redis::cmd("DEL").arg(&writer));

    server.query(redis::cmd("DEL").arg(&counter));
    let before = super::common::server_time_ms(&server);
    let Value::BulkString(epoch) = eval("RW_READ_LUA", 90_000).unwrap() else {
        panic!("a reader of a free key is granted");
    };
    let epoch: u64 = String::from_utf8(epoch).unwrap().parse().unwrap();
    assert!(epoch >= before * 1000, "the epoch is floored at the clock");
    assert_eq!(get(&server, &counter), Some(epoch.to_string()));
    let set = super::common::pttl(&server, &counter);
    assert!(set > 0 && set <= 90_000, "with the locker's expiry: {set}");
}
