//! Leases on Redis with fencing tokens: a distributed mutex whose every grant
//! carries a strictly increasing number that downstream stores can check.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlease::{blocking::Locker, Config};
//!
//! let config = Config::new("my-service")          // namespace: required
//!     .lease(Duration::from_secs(10))             // default lease
//!     .wait(Duration::from_secs(5));              // default wait; ZERO = try once
//! let locker = Locker::connect("redis://127.0.0.1:6379/0", config)?;
//!
//! let lease = locker.acquire("job:42")?;
//! // Hand the fence to every store the lease protects.
//! let fence = lease.fence();
//! # let _ = fence;
//! lease.release()?;
//! locker.shutdown()?;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! # How it works
//!
//! An acquire is one Lua script (one round trip): `SET NX PX` of the lock and,
//! only if that succeeded, the next fence, `max(counter + 1, Redis TIME in
//! ms × 1000)`, so fences keep increasing even after Redis lost its data or
//! failed over to a replica that missed the last grants. Release and renew are one script each and compare the owner token.
//! Inside one locker, waiters for a key form a FIFO line and only the head
//! talks to Redis; a release publishes a notification that wakes the head at
//! once, and safety polls cover notifications lost in transit.
//!
//! The logic lives in a sans-IO core (no I/O, no clock reads, no threads)
//! and in operations written once above it (acquire-and-wait, renew,
//! release, the `with_lock` renewer, shutdown), each a small state value
//! that says what to send next and what to wait for. Two thin front ends
//! with the same API drive them: [`blocking`] for std threads and `aio` for
//! futures on any executor (smol, async-std, `futures::executor`, or inside
//! a tokio program, without a tokio runtime). A waiter whose attempt fails
//! while its wait lasts keeps its place and tries again.
//!
//! A locker talks to one server (`Locker::connect`), a Redis Cluster
//! (`connect_cluster`) or the primary that Redis Sentinel names
//! ([`blocking::Locker::connect_sentinel`]: the primary is asked for again
//! after a connection error, `READONLY` or `MASTERDOWN`, and the
//! notification subscriber follows it).
//!
//! # Where to look
//!
//! - Acquire, work, always release, with the lease kept alive while the
//!   work runs: [`blocking::Locker::with_lock`] with [`WithLock`] (loss
//!   reported through [`Lost`]).
//! - Redis Cluster: [`blocking::Locker::connect_cluster`] (keys spread
//!   over the primaries; sharded release notifications).
//! - The protected resource: [`fenced::FencedStore`], a store in Redis that
//!   refuses a write whose fence is lower than one it already accepted.
//! - Options: [`Config`] (per locker) and [`AcquireOptions`] (per call):
//!
//! | [`Config`] method | default | what it does |
//! |---|---|---|
//! | [`lease`](Config::lease) | 10 s | lease of acquires |
//! | [`wait`](Config::wait) | 5 s | how long an acquire waits; `ZERO` tries once ([`blocking::Locker::try_acquire`]) |
//! | [`poll_interval`](Config::poll_interval) | 25 ms | safety poll while notifications are unavailable |
//! | [`notify_poll_interval`](Config::notify_poll_interval) | 250 ms | safety poll while subscribed |
//! | [`max_waiters`](Config::max_waiters) | 128 | acquires in progress per locker |
//! | [`max_tracked_leases`](Config::max_tracked_leases) | 10 000 | leases tracked for cleanup at shutdown |
//! | [`shutdown_timeout`](Config::shutdown_timeout) | 5 s | bound on `shutdown()` |
//! | [`max_key_bytes`](Config::max_key_bytes) | 1024 | longest key |
//! | [`command_timeout`](Config::command_timeout) | 2 s | bound on connecting and on each command |
//! | [`min_replicas`](Config::min_replicas) | off | `WAIT n timeout` after acquire and renew |
//! | [`fence_counter_ttl`](Config::fence_counter_ttl) | never | let unused fence counters expire |
//! | [`handover`](Config::handover) | on | waiting lockers register in the key's queue in Redis and a release hands the lease to the next one (`docs/PROTOCOL.md`) |
//! | [`claim_window`](Config::claim_window) | 4 × the connect round trip, ≥ 100 ms | how long a lease handed over lasts before its claim or extension; a dead or paused grantee costs the others this long |
//! | [`key_hash_tags`](Config::key_hash_tags) | off | a key's Redis hash tag decides where its names are stored, so keys of one tag share a Cluster slot (multi-key leases); one setting per namespace, checked at connect |
//! | [`max_value_bytes`](Config::max_value_bytes) | 4 KiB | longest election value |
//!
//! - Errors: [`Error`], one stable [`Error::code`] per kind (stable across
//!   minor versions), and [`Error::is_busy`], [`Error::is_timeout`],
//!   [`Error::is_outcome_unknown`], [`Error::is_retryable`]:
//!
//! | code | meaning |
//! |---|---|
//! | `LOCK_BUSY` | held by someone else and the acquire may not wait ([`Error::Busy`]) |
//! | `WAIT_TIMEOUT` | the wait ran out ([`Error::WaitTimeout`]) |
//! | `QUEUE_FULL` | `max_waiters` acquires in progress ([`Error::QueueFull`]) |
//! | `TOO_MANY_LEASES` | `max_tracked_leases` leases held ([`Error::TooManyLeases`]) |
//! | `CANCELLED` | the acquire's [`CancelHandle`] was cancelled |
//! | `SHUTTING_DOWN` | the locker is shutting down |
//! | `PROVIDER_FAILED` | Redis certainly did not apply the command ([`Error::ProviderFailed`]) |
//! | `OUTCOME_UNKNOWN` | the command may have been applied ([`Error::OutcomeUnknown`], [`Error::UnexpectedReply`]) |
//! | `CLEANUP_TIMEOUT`, `CLEANUP_FAILED` | shutdown could not confirm every release |
//! | `INVALID_KEY`, `INVALID_CONFIG` | bad input; the message says why |
//! | `REPLICATION_FAILED` | fewer than `min_replicas` acknowledged ([`Error::ReplicationFailed`]) |
//! | `LOCK_LOST` | a lease kept alive by `with_lock` was lost ([`Error::LockLost`]) |
//!
//! # Semaphores
//!
//! [`blocking::Locker::semaphore`] (and `aio::Locker::semaphore`) gives at
//! most N holders at once. Each [`blocking::Permit`] is a slot with its own
//! lease key and fence counter, so a store checks `(slot, fence)` (see
//! [`fenced::FencedStore::write_permit`]); waiting, notifications, retries
//! and shutdown are the leases' own.
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let pool = locker.semaphore("db-pool", 4)?;
//! let permit = pool.acquire()?;
//! println!("slot {} fence {}", permit.slot(), permit.fence());
//! permit.release()?;
//! # Ok(()) }
//! ```
//!
//! # Read-write leases
//!
//! [`blocking::Locker::rw_lock`] (and `aio::Locker::rw_lock`) gives many
//! readers at once or one writer, writers preferred. A
//! [`blocking::WriteLease`] has a fence; a [`blocking::ReadLease`] has an
//! epoch, the latest writer fence at its grant, which writes derived from
//! the read carry ([`fenced::FencedStore::write_derived`]).
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let doc = locker.rw_lock("doc:7")?;
//! let read = doc.read()?;
//! println!("epoch {}", read.epoch());
//! read.release()?;
//! # Ok(()) }
//! ```
//!
//! # Leader election
//!
//! [`blocking::Locker::election`] (and `aio::Locker::election`) elects one
//! leader per name across lockers and processes. A
//! [`blocking::Leadership`]'s term is a fence, its value (bytes) anyone
//! reads with [`Election::leader`]; a keeper thread renews it until it is
//! resigned or dropped.
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let election = locker.election("billing-scheduler")?;
//! let leadership = election.campaign(b"host-a:4242")?;
//! println!("term {}", leadership.term());
//! leadership.resign()?;
//! # Ok(()) }
//! ```
//!
//! # Multi-key leases
//!
//! [`blocking::Locker::acquire_all`] (and `aio::Locker::acquire_all`)
//! takes up to 64 keys in one script, all or none, with a fence per key
//! from that key's own counter; waiting holds nothing, so two callers
//! taking `{a, b}` and `{b, a}` never deadlock.
//! [`fenced::FencedStore::write_all`] writes their resources all or none.
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let lease = locker.acquire_all(&["account:7", "account:9"])?;
//! println!("fence of account:7: {:?}", lease.fence_of("account:7"));
//! lease.release()?;
//! # Ok(()) }
//! ```
//!
//! # Which to use
//!
//! | you need | use | the store checks |
//! |---|---|---|
//! | one holder at a time | a lease: [`blocking::Locker::acquire`], [`blocking::Locker::with_lock`] | its fence |
//! | at most N holders | a semaphore: [`blocking::Locker::semaphore`] | `(slot, fence)` |
//! | many readers or one writer | a read-write lease: [`blocking::Locker::rw_lock`] | the writers' fence, and the epoch for writes derived from a read |
//! | one leader whose value others read | an election: [`blocking::Locker::election`] | the term |
//! | several keys together | a multi-key lease: [`blocking::Locker::acquire_all`] | each key's fence, `fence_of(key)` |
//!
//! Leases are not reentrant: a key held by a lease is held for its own
//! locker and thread too. Acquiring it again while the lease is held is
//! `LOCK_BUSY` at once with `try_acquire`, and otherwise waits for that
//! lease to end (`WAIT_TIMEOUT`, or the key once the first lease expired,
//! which is then lost): pass the lease (or its fence) down instead of
//! acquiring again.
//!
//! The store outside Redis checks the fence itself: a SQL database keeps
//! it in a `BIGINT` column and writes only when the new fence is not
//! lower, checked and written in one transaction
//! (`examples/postgres_fencing.rs`; the transaction and the other kinds'
//! variants are in [Fencing in SQL](#fencing-in-sql)).
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `aio` | yes | the async front end `redlease::aio` (redis `smol-comp`, `futures`, `async-io`), and the blocking front end's own plain TCP and unix connection (without it: the redis crate's, with a `PING` in front of each request on a reused one) |
//! | `cli` | no | the `redlease` command-line tool (a binary; the library does not use it): `cargo install redlease --features cli` |
//! | `tls-rustls` | no | `rediss://` URLs on both front ends (redis `tls-rustls` and `smol-rustls-comp`, rustls with `ring`); custom roots through `redis::Client::build_with_tls` and `Locker::new`, behind Sentinel through [`SentinelOptions`] |
//! | `tokio` | no | implies `aio`; a plain TCP or unix socket connection opened inside a tokio runtime (with its IO driver) uses that runtime's reactor, one context switch per round trip instead of two; never starts a runtime ([In a tokio program](#in-a-tokio-program-feature-tokio)) |
//! | `metrics` | no | the metrics of [Metrics](#metrics) through the `metrics` facade 0.24 (the application installs the exporter before building a locker); label `locker` from [`Config::metrics_label`] |
//! | `test-server` | no | `redlease::testing`: a throwaway `redis-server` on a free loopback port for the tests of programs that use the crate |
//!
//! # Guarantees and their limits
//!
//! One Redis server decides who holds a lease: there is no Redlock. Order
//! is kept inside one locker and, with
//! [`Config::handover`] (the default), among waiting lockers in the order
//! they registered in the key's queue in Redis (`docs/PROTOCOL.md`). A lease's validity
//! ([`blocking::Lease::is_valid`]) is a conservative local estimate counted
//! from when the acquire was sent. A process can still be paused (GC, swap,
//! a stopped VM) past its lease and act on a lock it lost; only a store that
//! checks the fence atomically turns that into a rejected write, also
//! across a failover that lost the last grants: every fence is floored at
//! the server's clock ([Limits of the guarantee](#limits-of-the-guarantee)
//! lists the conditions).
//!
//! # When not to use this
//!
//! If your store can do the mutual exclusion itself (a database row lock, a
//! compare-and-set on a version), prefer it. If you need locks that survive
//! the loss of a Redis primary without a fencing store behind them, use a
//! consensus system (etcd, ZooKeeper) instead.
//!
//! # Errors
//!
//! One [`Error`] type with a stable [`Error::code`] per kind. A command that
//! certainly did not take effect is `PROVIDER_FAILED`; one that may have
//! (timeout, dropped connection, unexpected reply) is `OUTCOME_UNKNOWN` and is
//! never retried automatically. Keys, owner tokens and server addresses never
//! appear in `Display`, `Debug` or log lines.
//!
//! # The async front end
//!
//! The async locker has the same names and semantics: both are one generic
//! `redlease::Locker<F>` (and `Lease<F, K>`, `Semaphore<F>`, `RwLock<F>`), so
//! code that embeds redlease can be generic over the front end with
//! `F: redlease::front::Front`. Cancelling an acquire is
//! dropping its future: the waiter leaves its line without disturbing it, and an
//! acquire Redis may have granted after the drop is released by token at the
//! locker's next operation. If that attempt was still unanswered, the next
//! waiter for the key waits until it can no longer be answered (the command
//! timeout) or until the abandoned token's release came back, so the locker
//! still sends one attempt per key at a time. Dropping a held lease never
//! blocks the executor: its token goes back to the locker, which releases it
//! within one round trip when a waiter of the locker waits for that key, else at
//! its next operation or at shutdown.
//!
//! Commands of all tasks share one multiplexed connection. Release
//! notifications arrive on the crate's own subscriber thread, the same one the
//! blocking front end uses, so the crate spawns no task on your executor and the
//! subscription closes 1 s after the last waiter left even if the program makes
//! no further call. On one server over plain TCP or a unix socket the command
//! connection is the crate's own: requests are pipelined on one socket and the
//! futures that wait for replies drive it, on your own tasks (replies parsed by
//! the redis crate's parser, the connection set up by the redis crate):
//! under `smol::block_on` or async-std a round trip costs one context switch,
//! as on the blocking front end, and under other executors two, the socket's
//! readiness coming from async-io's `async-io` reactor thread (a host name is
//! resolved once per connection with the standard library's resolver, which
//! blocks; an IP address needs no lookup). In a tokio program, feature `tokio`
//! removes that hop (below). Over TLS or on a cluster, the
//! redis crate runs the connection's driver on
//! smol's global executor instead: one `smol-1` thread (set `SMOL_THREADS` to
//! change the count) plus the reactor thread, and three to four context
//! switches per round trip. The command timeout on one server is kept by one
//! `redlease-deadlines` thread per locker (it checks every 20 ms while commands
//! are in flight and parks otherwise), rather than by a timer per command,
//! which would wake the reactor thread once more for each command.
//!
//! ## In a tokio program (feature `tokio`)
//!
//! With feature `tokio`, a connection to one server over plain TCP or a unix
//! socket that is opened inside a tokio runtime is registered with that
//! runtime's reactor instead of async-io's: a reply wakes the runtime's own
//! thread, one context switch per round trip like the blocking front end,
//! instead of two (on 2 vCPUs the uncontended TCP cycle went from 1.17-1.42×
//! the blocking one to 1.01-1.11× on a current-thread runtime, over a unix
//! socket from 1.44-1.73× to 1.18-1.19×, and to 1.03-1.10× on a multi-thread
//! one; BENCHMARKS "Async vs blocking").
//! The library still starts no runtime and needs none, and the feature is off
//! by default:
//!
//! ```toml
//! redlease = { version = "0.1", features = ["tokio"] }
//! ```
//!
//! Where that reactor turns decides where the connection is used:
//!
//! - a **multi-thread** runtime turns its reactor on its workers, so the
//!   connection serves every caller while the runtime runs;
//! - a **current-thread** runtime turns it only inside its `block_on`: an
//!   operation started anywhere else (another thread, `futures::executor`,
//!   an election's keeper thread) first replaces the locker's connection with
//!   one on async-io's reactor, which serves every caller from then on,
//!   rather than wait for a reply nobody reads;
//! - after the runtime shuts down, the next operation opens a new connection
//!   before sending anything (on async-io's reactor if the dead runtime is
//!   still entered through its handle: it refuses new sockets);
//! - a runtime built without its IO driver (`Builder::new_current_thread()`
//!   without `enable_io()` / `enable_all()`) keeps async-io's reactor. tokio
//!   cannot be asked whether IO is on, so the first connection finds out by
//!   trying and tokio prints its panic message once (the panic is caught;
//!   with `panic = "abort"` the feature is not used at all).
//!
//! TLS and Cluster keep their current transports.
//!
//! # Fencing in SQL
//!
//! The same check in SQL keeps the last accepted fence in the row, in a
//! `BIGINT` column (`i64::try_from(fence.get())?`: PostgreSQL has no unsigned
//! type, and a fence that does not fit is an error, not a negative number),
//! and writes only when the new fence is not lower, checked and written in
//! one transaction. [`examples/postgres_fencing.rs`](examples/postgres_fencing.rs)
//! does it with the `postgres` crate (`cargo run --example postgres_fencing`
//! with `REDLEASE_EXAMPLE_POSTGRES_URL` set):
//!
//! ```sql
//! BEGIN;
//! -- The first write creates the row, so that there is a row to lock:
//! INSERT INTO reports (id, body, fence) VALUES ($1, '', 0) ON CONFLICT (id) DO NOTHING;
//! SELECT fence FROM reports WHERE id = $1 FOR UPDATE;  -- held until COMMIT
//! -- stored fence > $3: a newer holder already wrote; ROLLBACK and stop.
//! UPDATE reports SET body = $2, fence = $3 WHERE id = $1;
//! -- ... the other writes of the same unit of work ...
//! COMMIT;
//! ```
//!
//! For one row, one statement does it (0 rows: stale):
//!
//! ```sql
//! INSERT INTO reports AS r (id, body, fence) VALUES ($1, $2, $3)
//! ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, fence = EXCLUDED.fence
//!  WHERE r.fence <= EXCLUDED.fence;
//! ```
//!
//! An equal fence is the same holder writing again and is accepted. The
//! other kinds check the same way with a different key or number:
//!
//! - a semaphore's permit: fences are per slot, so the row is keyed by
//!   `(id, slot)` (`PRIMARY KEY (id, slot)`) and each slot's fence is
//!   compared alone; holders of other slots write beside it;
//! - a read-write lease: a writer writes with its fence; a write derived
//!   from a read (a cache fill) writes with the read's epoch (the last
//!   writer's fence at the read's grant) and is refused once a newer writer
//!   committed. A writer at fence `f` that comes after a derived write at
//!   epoch `f` is stale (its lease had ended before the read was granted):
//!   keep a `derived BOOLEAN` set by derived writes and accept a writer's
//!   equal fence only when it is false, as `FencedStore::write_derived` does;
//! - a multi-key lease: each key's fence on its own row (`fence_of(key)`),
//!   all in one transaction;
//! - an election: the term, as a fence.
//!
//! # Each kind in detail
//!
//! ## Semaphores
//!
//! - `acquire`, `acquire_with(options)`, `try_acquire` and `with_permit` behave
//!   as their lease counterparts: waiting (one line per semaphore per locker,
//!   woken by the release notification), `Busy` with the soonest expiry,
//!   `WaitTimeout`, `QueueFull`, cancellation, retries after faults. After a
//!   grant the next waiter of the same locker tries at once: more permits may
//!   be free.
//! - `Permit` has `slot()`, `fence()`, `is_valid()`, `remaining()`, `renew()`,
//!   `release()`; dropping it does what dropping a `Lease` does.
//! - One acquire is one script: it returns the slot a replayed acquire already
//!   holds (replay-safe), else takes the lowest free slot with the next fence
//!   of that slot's counter (floored at the server clock like a lease's), else
//!   answers the smallest remaining time. Its cost grows with the permit count
//!   (one `MGET` over the slots, and a `PTTL` per slot when all are held).
//! - The permit count is recorded at first use. An acquire with another count
//!   fails with `INVALID_CONFIG` while any permit of the recorded count is held
//!   and replaces the record once none is: resize a pool by draining it.
//!   Lockers that disagree on the count never hold more than one count's permits.
//! - `examples/semaphore_pool.rs` runs N workers through K permits and shows a
//!   stalled holder's write being refused.
//!
//! ## Read-write leases
//!
//! - A writer's fence strictly increases per key (floored at the
//!   server clock, as every fence). A reader's **epoch** is the latest writer fence when it was
//!   granted. Writers' stores accept a write whose fence is not below their
//!   high-water; a write derived from a read (a cache fill, a materialised
//!   view) carries the epoch and is accepted only if the epoch is not below the
//!   high-water, so a read that started before a writer committed cannot
//!   overwrite it (`fenced::FencedStore::write_derived`). A reader gets epoch
//!   `f` only after writer `f`'s lease ended, so once a derived write at `f`
//!   was accepted, a write with fence `f` (that writer, past its lease) is
//!   refused; the store keeps the last derived epoch in the resource's hash
//!   (field `derived`, beside `fence` and `value`).
//! - `read`, `read_with`, `try_read`, `write`, `write_with`, `try_write`,
//!   `with_read` and `with_write` behave as their lease counterparts (waiting,
//!   errors, extension and `Lost`); each locker has one line per key and mode;
//!   its readers are granted one after another at once. A writer's release,
//!   and the last reader's, notify both lines.
//! - Readers are a sorted set scored by their expiry in the server's clock
//!   (`TIME`), so no client clock decides; an expired reader is never renewed
//!   back (`Expired`).
//! - `examples/rw_cache.rs` shows a stale cache fill being refused.
//!
//! ## Elections
//!
//! - `campaign`, `campaign_with(value, options)` and `try_campaign` wait, time
//!   out and cancel as acquires do; candidates of one locker form a FIFO line,
//!   and a resign wakes them at once by notification. A leader that lapsed
//!   (killed, paused) is replaced as soon as its lease expires.
//! - A `Leadership` is renewed by a keeper thread of the library (every
//!   lease/2, as `with_lock`'s `extend`), on both front ends, without any call
//!   of the program; `lost()` fires as a lease's `Lost` does. Dropping it
//!   resigns (its keeper sends the resign). Keeper threads wait 1 s for the
//!   next leadership before they exit, and a campaign makes sure one waits,
//!   so a new leader does not wait for a thread to start.
//! - `leader()` is one read-only script (`EVALSHA_RO`): a read-only user can
//!   run it. A leader whose lease lapsed is never reported.
//! - Every change (a new leader, a proclaim, a vacancy) is logged in a capped
//!   stream whose entry ids are the versions `term.seq`; `election.observe()`
//!   yields them in order (blocking: an `Iterator`; async: a `Stream`), the
//!   current state first and again after a gap (`resync`), a lapsed leader
//!   as vacant. It reads when a notification names its election (an observer
//!   keeps the locker's subscription while it lives) and after a
//!   resubscription, and as a safety net every `notify_poll_interval` and at
//!   the leader's expiry. The observers of one name in one locker share those
//!   reads: a change is read once, whatever their number, and each observer
//!   yields every item at its own pace (one more than 64 items behind yields
//!   the current state, `resync`). `with_leadership(value, options, f)` campaigns, runs `f` and
//!   always resigns. Values never appear in `Debug`, errors or logs.
//! - `examples/election.rs` (`cargo run --example election`): one candidate
//!   leads, another waits and takes over at its resign, in a higher term.
//!
//! ## Multi-key leases
//!
//! - A single-key lease of any of the keys excludes the multi-key lease and
//!   the other way round; renew and release act on every key, and a renew
//!   that finds one key gone (evicted, deleted) gives up the others: `lost`
//!   fires once.
//! - Waiting: the lease *reserves* the keys it finds free (`<token>:r<age>`,
//!   no fence; others see them held) and waits for the rest; the oldest
//!   waiting multi-key lease takes a younger one's reservations over. With
//!   the hand-over on, it also queues in each held key's queue, and a release
//!   reserves the key for it instead of granting it: single-key waiters do
//!   not starve it, nor it them. A waiter that gives up releases its
//!   reservations at once; a dead one's lapse after three safety polls.
//! - `try_acquire_all`, `acquire_all_with(keys, options)` and `with_all(keys,
//!   options, f)` as for one key; `InvalidKey` (positions, never a key's text)
//!   for no key, more than 64, an empty or too long key, or two equal keys,
//!   before anything is sent.
//! - `FencedStore::write_all(conn, &[(resource, fence, value), …])` (async:
//!   `write_all_async`) writes a multi-key lease's resources in one script,
//!   each checked as `write` checks it, **all or none**: a stale fence anywhere
//!   refuses the whole batch (`WriteError::StaleAt { index, stale }`), and no
//!   writes, more than 64 or a resource twice are `WriteError::Invalid`
//!   before anything is sent. On Redis Cluster build the store with
//!   `FencedStore::key_hash_tags(true)` and give the resources one hash tag.
//!
//!   ```rust,no_run
//!   # fn f(lease: &redlease::blocking::MultiLease, conn: &mut redis::Connection) -> Result<(), Box<dyn std::error::Error>> {
//!   use redlease::fenced::FencedStore;
//!
//!   let store = FencedStore::new("my-service");
//!   let fence = |key| lease.fence_of(key).ok_or("not a key of the lease");
//!   store.write_all(conn, &[
//!       ("account:7", fence("account:7")?, "-40"),
//!       ("account:9", fence("account:9")?, "+40"),
//!   ])?;
//!   # Ok(()) }
//!   ```
//! - On Redis Cluster the keys must be stored in one slot: set
//!   `Config::key_hash_tags(true)` and give them one hash tag
//!   (`"acct:{7}:in"`, `"acct:{7}:out"`); otherwise `InvalidKey` before
//!   anything is sent. Every locker of a namespace must use the same
//!   setting: the first to connect records it in `<ns>:key-names`, and a
//!   locker with the other setting fails to connect with `InvalidConfig`
//!   (see [What is stored in Redis](#what-is-stored-in-redis)).
//! - `examples/multi_key.rs` (`cargo run --example multi_key`): a transfer
//!   between two accounts under one multi-key lease, written all or none.
//!
//! # Replication check
//!
//!
//! `Config::min_replicas(n, timeout)` runs `WAIT n timeout` after every acquire
//! and renew, on the connection that carried the script. Fewer acknowledgements
//! release the lease again and return `REPLICATION_FAILED { acked, required }`;
//! `lease.replicas()` tells how many acknowledged. The lease must be at least
//! 1.5 × the timeout and the timeout shorter than `command_timeout`
//! (`INVALID_CONFIG` otherwise). On the async locker, `WAIT` holds up the
//! commands queued behind it on the shared connection for at most its timeout,
//! so keep it short. A server that refuses `WAIT` gives `PROVIDER_FAILED`.
//!
//! # Fence counters
//!
//!
//! Fence counters never expire by default: one stays in Redis per key ever
//! locked. `Config::fence_counter_ttl(d)` lets an unused counter expire after
//! `d`. That stays safe because every fence is at least Redis `TIME` in
//! ms × 1000: a re-created counter starts above every fence handed out before,
//! as long as the key had fewer than 1000 acquires per millisecond and the
//! server clock never went back by more than `d`. Give every locker of a
//! namespace the same setting: a multi-key grant by a locker without one
//! writes its counters in one `MSET`, which leaves them without an expiry
//! (fences are unaffected; a single-key grant keeps the expiry it finds).
//!
//! # Statistics and logs
//!
//!
//! `locker.stats()` is a cheap snapshot of plain atomics: `acquires`,
//! `busy_replies`, `wait_timeouts`, `notifications`, `safety_polls`,
//! `scripts_sent`, `noscript_reloads`, and the gauges `waiters`,
//! `tracked_leases`, `subscribed`, `connected`.
//!
//! Every log record has target `redlease` and starts with a stable code; none
//! contains a key, a token or an address:
//!
//! | code | level | when |
//! |---|---|---|
//! | `REDIS_EVICTION_UNSAFE` | error | at connect, `maxmemory-policy` is not `noeviction` |
//! | `REDIS_EVICTION_UNCHECKED` | debug | the server would not tell its policy |
//! | `LOCK_NOTIFY_UNAVAILABLE` | warn | release notifications failed or were refused; waiters poll |
//! | `LOCK_RELEASE_FAILED` | warn / debug | `with_lock` (warn) or a dropped blocking lease (debug) could not release |
//! | `LOCK_CLEANUP_FAILED` | warn / error | orphaned tokens (warn) or shutdown (error) could not be released |
//!
//! # Metrics
//!
//!
//! With feature `metrics` every locker records through the
//! [`metrics`](https://docs.rs/metrics/0.24) facade (the crate links nothing
//! else; the application installs an exporter). Names and labels are a
//! contract; every metric also carries `locker`, from
//! `Config::metrics_label` (default: the namespace). Keys never appear in a
//! name or a label.
//!
//! | name | kind | labels | moves |
//! |---|---|---|---|
//! | `redlease_acquire_wait_seconds` | histogram | `kind` (`lease`, `permit`, `read`, `write`), `outcome` (`acquired`, `busy`, `wait_timeout`, `cancelled`, `queue_full`, `failed`) | from the acquire call to its result; a dropped async acquire is `cancelled` |
//! | `redlease_attempts_total` | counter | `kind` | each acquire script sent |
//! | `redlease_hold_seconds` | histogram | `kind`, `end` (`released`, `expired`, `conflict`, `lost`, `dropped`) | from the grant to the first end seen (a release's or renew's outcome, the `with_lock` loss signal, or the lease dropped) |
//! | `redlease_lost_total` | counter | `kind`, `cause` (`expired`, `conflict`, `deadline`) | a `with_lock` loss signal firing (`deadline`: unconfirmed renewals until the deadline passed) |
//! | `redlease_outcome_unknown_total` | counter | `op` (`acquire`, `renew`, `release`) | a script whose reply was lost after it may have reached Redis |
//! | `redlease_waiters` | gauge | — | acquires in progress |
//! | `redlease_leases_held` | gauge | — | leases granted and not yet released |
//! | `redlease_wakeups_total` | counter | `by` (`notification`, `poll`, `reconnect`) | a waiter woken by a release notification, by its safety poll, or by the subscription coming back |
//!
//! A locker registers its metrics when it is built: **install the recorder
//! first**. [`examples/metrics_prometheus.rs`](examples/metrics_prometheus.rs)
//! wires up `metrics-exporter-prometheus` without its HTTP listener and prints
//! the exposition text (`cargo run --example metrics_prometheus --features metrics`):
//!
//! ```rust,ignore
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
//! let locker = redlease::blocking::Locker::connect(url, Config::new("app").metrics_label("billing"))?;
//! // ... serve handle.render() on /metrics
//! ```
//!
//! `tracing` users need nothing from redlease: its records go through `log`,
//! and `tracing-log` bridges them (`tracing_log::LogTracer::init()?`, or
//! `tracing-subscriber`'s default `tracing-log` feature, which `init()` uses).
//!
//! Without the feature nothing of `metrics` is compiled in (CI checks
//! `cargo tree -e normal -i metrics`); `stats()` is there either way.
//!
//! # Tests of programs that use the crate (feature `test-server`)
//!
//! For the tests of a program that uses the crate, turn on `test-server` in
//! its dev-dependencies (`cargo add redlease --dev --features test-server`,
//! or the feature on the existing entry) and let each test start its own
//! server: `redis-server` from `PATH` on a free loopback port, without
//! persistence, ready when `start` returns (it answered `PING`; at most
//! 10 s), killed and waited for when dropped. A missing binary is an error
//! (`StartError::NotFound`), not a panic.
//!
//! ```rust,ignore
//! use redlease::{blocking::Locker, testing::TestServer, Config};
//!
//! #[test]
//! fn one_report_at_a_time() {
//!     let server = TestServer::start().expect("redis-server on PATH");
//!     let locker = Locker::connect(server.url(), Config::new("my-tests")).unwrap();
//!     let lease = locker.acquire("nightly-report").unwrap();
//!     assert!(locker.try_acquire("nightly-report").unwrap_err().is_busy());
//!     lease.release().unwrap();
//! }
//! ```
//!
//! With `default-features = false` only the blocking front end is built.
//! The minimum supported Rust version is 1.88 (`rust-version` in Cargo.toml,
//! the redis crate's floor); raising it is a minor-version change. On docs.rs
//! every feature is documented, each gated item with its feature's badge.
//!
//! # TLS
//!
//!
//! With feature `tls-rustls`, give a `rediss://host:port/db` URL (or
//! `rediss://user:password@host:port/db`) to `connect` or `connect_cluster`:
//! the server's certificate is checked against the platform's root
//! certificates. For a private CA, build the client yourself and hand it to
//! `Locker::new`; every connection the locker opens (commands, and the
//! notification thread's) uses the same roots:
//!
//! ```rust,ignore
//! let client = redis::Client::build_with_tls(
//!     "rediss://redis.internal:6380/0",
//!     redis::TlsCertificates { client_tls: None, root_cert: Some(std::fs::read("ca.pem")?) },
//! )?;
//! let locker = redlease::blocking::Locker::new(client, redlease::Config::new("myapp"))?;
//! ```
//!
//! `client_tls` takes a client certificate and key for servers that ask for
//! one. On Cluster, `connect_cluster` takes `rediss://` node URLs (platform
//! roots); for a private CA build the `ClusterClient` with
//! `ClusterClientBuilder::certs` and use `new_cluster`, whose notification
//! connections, having no node URL to copy TLS settings from, cannot connect:
//! its waiters fall back to safety polls. `rediss://host:port/db#insecure` (no certificate check) works only if
//! your application also enables the redis crate's `tls-rustls-insecure`.
//! Without the feature a `rediss://` URL is `INVALID_CONFIG`, naming
//! `tls-rustls`; a certificate the client does not trust is `PROVIDER_FAILED`
//! with `could not connect to redis: TLS handshake failed: <reason>`.
//!
//! A URL whose scheme does not match the port fails with `PROVIDER_FAILED`
//! and says so. `rediss://` to a plain Redis port: the plain server reads the
//! TLS ClientHello as the start of an inline command and waits for an end of
//! line that never comes, so nothing fails before `command_timeout`; then the
//! error reads `could not connect to redis: the TLS handshake did not
//! complete: is the server speaking TLS?` (`is_timeout()` is true).
//! `redis://` to a TLS-only port (`--port 0 --tls-port N`): the server resets
//! the connection at the first plain bytes, and the error reads `could not
//! connect to redis: the server closed the connection: it may expect TLS
//! (rediss://)` at once. The same holds at a later reconnect (there the
//! `PROVIDER_FAILED` of the acquire, renew or release carries these words in
//! its `source()`), on Cluster and for `rediss://` sentinel URLs. The words
//! name no address; the redis error stays reachable below them.
//!
//! Behind Sentinel, `SentinelOptions::certificates` gives the CA for the
//! sentinels and the primary: see [Running with Redis Sentinel](#running-with-redis-sentinel).
//!
//! The command-line tool, built with `--features tls-rustls`, takes the CA of a
//! private server with `--tls-ca-cert FILE` (or `REDLEASE_TLS_CA_CERT`):
//! `redlease --url rediss://host:6380/0 --tls-ca-cert ca.pem run KEY -- CMD`.
//!
//! # What is stored in Redis
//!
//!
//! For namespace `ns` and key `k` (`sha` = lowercase hex SHA-256 of `k`):
//!
//! - `ns:lock:{sha}`: the lock, value `<owner token>:<fence>`, with the lease as TTL;
//! - `ns:lock-fence:{sha}`: the fence counter, which never expires (one per key ever locked);
//! - while lockers wait for `k` (the hand-over, `docs/PROTOCOL.md`):
//!   `ns:lock-queue:{sha}` (a list of waiting lockers' entries
//!   `<reg>|<deadline ms>|<grant token>:<claim ms>`, in arrival order; a grant
//!   moves its entry to the tail), `ns:lock-queued:{sha}` (`1` while the list
//!   may be non-empty) and `ns:lock-reg:{sha}:<reg>` (the locker's entry as
//!   queued, with a TTL of three safety polls; the entry's deadline, in the
//!   server's clock, is refreshed while the locker waits or is served; a
//!   locker whose last waiter took the lease keeps its entry while it holds
//!   the lease and 20 ms after the release, for a worker loop's next
//!   acquire, then takes it out); a
//!   grant is published as
//!   `sha:g:<reg>:<fence>:<claim_ms>:<server_ms>::<id>` (`<id>`: 16 hex
//!   digits of the SHA-1 of the grant token; older versions published no
//!   server time or id, and also a claim as `sha:c:<fence>`, still
//!   understood); a waiter of another process takes a lock's grant from
//!   that notice without a claim, the lease held as `<grant token>:<fence>`
//!   until the locker's subscriber extends it (docs/PROTOCOL.md §4.3);
//! - channel `ns:lock-released`: release notifications, message `sha`
//!   (`sem:sha` for a semaphore, `rw:sha` for a read-write lease);
//! - for a semaphore of key `k`: `ns:sem:{sha}:<slot>` (a permit, value
//!   `<owner token>:<fence>`, TTL the lease), `ns:sem-fence:{sha}:<slot>` (each
//!   slot's fence counter, never expires), `ns:sem-permits:{sha}` (the
//!   permit count in use, never expires), and while lockers wait the hand-over
//!   queue as for a lock (`ns:sem-queue:{sha}`, `ns:sem-queued:{sha}`,
//!   `ns:sem-reg:{sha}:<reg>`; a freed slot is granted as
//!   `sem:sha:g:<reg>:<fence>:<claim_ms>:<server_ms>:<slot>:<id>`, and taken
//!   from that notice as a lock's grant is, or claimed);
//! - for a read-write lease of key `k`: `ns:rw-write:{sha}` (the writer,
//!   `<owner token>:<fence>`, TTL the lease), `ns:rw-read:{sha}` (the readers:
//!   a sorted set of owner tokens scored by their expiry in server ms, expiring
//!   with its latest member), `ns:rw-intent:{sha}` (a waiting writer's intent,
//!   short TTL) and `ns:rw-fence:{sha}` (the writers' fence counter, never
//!   expires); notifications carry `rw:sha`;
//! - for an election of name `k`: `ns:elect:{sha}` (the leader,
//!   `<owner token>:<term>`, TTL the lease), `ns:elect-term:{sha}` (the term
//!   counter, never expires) and `ns:elect-log:{sha}` (the change log: a
//!   stream trimmed to about 64 entries, at least 64, ids `<term>-<seq>`, fields `prev`, `leader`
//!   and the leader's `value`); notifications carry `e:sha:<term>-<seq>:<l|v|r>`
//!   (a new leader, a new value, a vacancy).
//!
//! A multi-key lease holds the keys' own locks (`ns:lock:{sha_i}`, value
//! `<owner token>:<fence_i>`); while it waits, a key it reserved holds
//! `<owner token>:r<age>` (TTL three safety polls), and its registrations in
//! held keys' queues carry `m<age>.<owner token>:<ms>`. With
//! `Config::key_hash_tags(true)` a key with a hash tag `{t}` is stored under
//! `{sha(t)}:sha` instead of `{sha}` (`ns:lock:{sha(t)}:sha`, and likewise
//! for every name above), and on Redis Cluster its channel is
//! `ns:lock-released:{sha(t)}`.
//!
//! At connect the locker reads `maxmemory-policy`; anything but `noeviction` is
//! logged as `REDIS_EVICTION_UNSAFE`, because an evicted lock is a lost lock.
//!
//! Because `key_hash_tags` renames tagged keys, two lockers of one namespace
//! with different settings would hold one key under two names. So at connect
//! a locker also reads the namespace's naming scheme, `ns:key-names` (`plain`
//! or `tagged`, never expires): one `GET`, and only for the first locker of
//! a namespace a `SET ns:key-names <scheme> NX GET` to record it; nothing per
//! operation. A locker whose setting differs from the recorded one fails to
//! connect with `InvalidConfig` (option `key_hash_tags`; the message names no
//! key, namespace or address). After Redis lost its data the marker is gone
//! and the next locker to connect records it again; lockers already
//! connected do not check again, so switch the setting for a namespace only
//! with all its lockers stopped. Where the ACL refuses the marker (no
//! `~ns:key-names`), a locker with the default names logs
//! `KEY_NAMES_UNCHECKED` (warn) and connects as before; one with
//! `key_hash_tags(true)` fails with `InvalidConfig`. On Redis Cluster the
//! marker lives in its own slot.
//!
//! # Deployments
//!
//!
//! | deployment | how to connect | what decides who holds a lease | fences after a failover |
//! |---|---|---|---|
//! | one server | `Locker::connect("redis://user:pass@host:6379/0", config)` | that server | floored at its clock: larger after a restart with data loss |
//! | one server over TLS (feature `tls-rustls`) | `rediss://user:pass@host:6380/0`, or `Locker::new(redis::Client::build_with_tls(url, certs)?, config)` for a private CA | that server | as above |
//! | Sentinel (a primary, replicas, 3+ sentinels) | `Locker::connect_sentinel(["redis://sentinel-1:26379", ...], "mymaster", config)`; passwords, TLS and a private CA: `connect_sentinel_with_options(urls, "mymaster", SentinelOptions::new()..., config)` | the primary the sentinels name; the locker asks again after a connection error, `READONLY` or `MASTERDOWN` | floored at the new primary's clock: larger than every fence handed out before, even those the replica never received |
//! | Redis Cluster (≥ 7) | `Locker::connect_cluster(["redis://node-1:7000", ...], config)` (`rediss://` with `tls-rustls`) | the primary of the key's slot | as for Sentinel, per slot |
//!
//! URL forms, as the redis crate takes them: `redis://[user[:password]@]host[:port][/db]`, `rediss://` for TLS,
//! `redis+unix:///path/to/redis.sock[?db=N]` (also `unix://`), `valkey://`, `valkeys://`, `valkey+unix://`, and
//! `?protocol=resp3` for RESP3 (the subscriber uses RESP3 on its own connection either way). In every deployment one
//! primary decides, so the limits below hold: replication is asynchronous, a failover can lose the last grant (a second
//! holder may get in while the first still believes it holds the lease), and only a store that checks fences turns that
//! into a rejected write.
//!
//! Least privilege: the README's ACL ([Least privilege](#least-privilege)) is all a locker needs on a single server and on
//! every primary of a cluster. Behind Sentinel, add `+role` on the primary: the redis crate's Sentinel client checks with
//! `ROLE` that the address the sentinels gave answers as a primary. The sentinels themselves are asked `SENTINEL MASTERS`,
//! so where they run with ACLs a sentinel user needs `+sentinel|masters` (with `requirepass` on the sentinels, put the
//! password in their URLs). TLS changes nothing in the ACL.
//!
//! # Running on Redis Cluster
//!
//!
//! ```rust,no_run
//! use redlease::{blocking::Locker, Config};
//!
//! let nodes = ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/", "redis://10.0.0.3:7000/"];
//! let locker = Locker::connect_cluster(nodes, Config::new("my-service"))?;
//! let lease = locker.acquire("job:42")?;
//! lease.release()?;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! `redlease::aio::Locker::connect_cluster(nodes, config).await` is the async
//! twin; `new_cluster(cluster_client, config)` wraps a
//! `redis::cluster::ClusterClient` you built. Run `cargo run --example cluster`
//! to see both against a throwaway 3-primary cluster (or set
//! `REDLEASE_EXAMPLE_CLUSTER_NODES` to a comma-separated list of node URLs).
//!
//! - Every name of a key carries the same hash tag (`{<sha256 of the key>}`),
//!   so the lock, its fence counter and its release channel share one slot and
//!   each script runs on one node.
//! - Release notifications use **sharded pub/sub** (Redis ≥ 7): the release
//!   script `SPUBLISH`es on `<ns>:lock-released:{<sha>}`, and a locker holds an
//!   `SSUBSCRIBE` for every key it has waiters for, on the node that owns the
//!   key's slot, dropped 1 s after the key's line empties. Connecting fails with
//!   `INVALID_CONFIG` on a cluster without sharded pub/sub.
//! - After a failover the old primary ends its subscriptions (`sunsubscribe`);
//!   the locker subscribes again on the new owner (from a slot map that no
//!   longer names the old primary) and the key's head retries at once. The
//!   safety polls cover the gap: a release between that retry and the new
//!   subscription is seen at the next poll.
//! - The blocking locker's own cluster connection never retries on its own
//!   (`retries(0)`): the redis crate would re-send a timed-out write. What
//!   certainly did not run is sent again on a fresh cluster connection (which
//!   reads the slot map anew): a redirect (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`),
//!   a refused node after a failover, a pooled node connection the server had
//!   closed; `ASK` (a slot being migrated) is followed with `ASKING` on the
//!   named node. Every script declares every key it touches, so during a
//!   slot migration a script whose keys are not all on one node meets
//!   `TRYAGAIN`: an acquire waits it out, and a release that still meets it
//!   when the redirects are spent goes again as a plain release (its lease
//!   key alone, no hand-over). The async locker's cluster connection waits
//!   out `TRYAGAIN` within a tenth of the command timeout for the same
//!   reason. If you pass a client with retries, the acquire script is
//!   replay-safe: a re-sent acquire finds its own token and returns the same
//!   fence without spending another.
//! - A command that times out on a cluster is never re-sent (its outcome is
//!   unknown). The redis crate learns a new slot owner only from a redirect,
//!   which a primary that stopped answering (paused, partitioned) never sends,
//!   so the async locker's next operation first asks another primary for the
//!   slot map (`CLUSTER SLOTS`): if the slot moved, it drops its shared
//!   cluster connection, and the new one reads the map and reaches the replica
//!   promoted meanwhile; if not, the connection is kept, and only the silent
//!   node's keys fail. (The blocking locker reaches a new owner too, after a
//!   timeout on each pooled connection that still routes to the silent node.)
//! - The token of an attempt that timed out is released by the locker's next
//!   operation, before its own command (best effort; the TTL is the
//!   backstop). On a cluster, once such a release goes unanswered, operations
//!   on other slots leave it for a back-off (the command timeout, doubling up
//!   to the lease), so a silent node does not hold every operation up for a
//!   command timeout; operations on its own slot and shutdown still send it.
//! - While a node stops answering (paused, partitioned) and is still in the
//!   slot map, each *new* blocking cluster connection waits up to the command
//!   timeout for it: the redis crate's sync cluster connection connects to
//!   every node of the map and `PING`s each as it opens (and tries the seed
//!   nodes in the order given). A blocking locker then opens its pooled
//!   connections slowly (seconds each with several such waits) until a
//!   failover takes the node out of the map; connections it already holds are
//!   not affected.
//! - Shutdown sends its releases in parallel (each key may live on another
//!   node), bounded as a whole by `shutdown_timeout`.
//! - `min_replicas` is not supported on a cluster. The eviction-policy check at
//!   connect reads `maxmemory-policy` on every primary and logs
//!   `REDIS_EVICTION_UNSAFE` if any may evict.
//! - With `new_cluster`, the locker cannot read your client's credentials, so
//!   its per-node notification connections connect without them; where the
//!   nodes need a password, waiters poll at `poll_interval`. Prefer
//!   `connect_cluster`.
//!
//! **What failover does to the guarantee.** Redis replication is asynchronous.
//! If a primary fails over before its replica received the latest acquire, the
//! new primary does not know the lock is held, so a second holder can acquire
//! it. Its fence counter may be behind too, but every grant is floored at the
//! server's clock (`TIME` in ms × 1000), so the second holder's fence is still
//! larger than the first's and a store that checks fences rejects the older
//! holder's writes (see the conditions in
//! [Limits of the guarantee](#limits-of-the-guarantee)). `WAIT`-based checks
//! (standalone `min_replicas`) narrow the window in which two holders overlap.
//!
//! # Running with Redis Sentinel
//!
//!
//! ```rust,no_run
//! use redlease::{blocking::Locker, Config};
//!
//! let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"];
//! let locker = Locker::connect_sentinel(sentinels, "mymaster", Config::new("my-service"))?;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! `redlease::aio::Locker::connect_sentinel(sentinels, name, config).await` is
//! the async twin. The sentinel URLs are `redis://host:port` URLs (no db:
//! sentinels have none). `master_name` is the name in
//! `sentinel monitor <name> ...`.
//!
//! Passwords: the sentinels' and the primary's are separate. Where the
//! sentinels want one (`requirepass` in `sentinel.conf`), put it in their URLs
//! (`redis://:sentinel-secret@10.0.0.1:26379`). The primary's (its
//! `requirepass`, the one `sentinel auth-pass <name> ...` gives the sentinels)
//! goes in a `SentinelOptions`, with its db and TLS mode:
//!
//! ```rust,no_run
//! use redlease::{blocking::Locker, Config, SentinelOptions};
//!
//! let sentinels = ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"];
//! let options = SentinelOptions::new().primary_password("primary-secret").primary_db(2);
//! let locker = Locker::connect_sentinel_with_options(sentinels, "mymaster", options, Config::new("my-service"))?;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! (`connect_sentinel_with` takes the redis crate's
//! `redis::sentinel::SentinelNodeConnectionInfo` instead, e.g.
//! `SentinelNodeConnectionInfo::default().set_redis_connection_info(
//! RedisConnectionInfo::default().set_password("primary-secret"))`.) A wrong or
//! missing password, the sentinels' or the primary's, fails at connect with
//! `PROVIDER_FAILED`, `could not connect to redis: authentication failed`,
//! naming neither the password nor an address.
//!
//! TLS (feature `tls-rustls`): give `rediss://` sentinel URLs and
//! `primary_tls(redis::TlsMode::Secure)`; certificates are checked against the
//! platform's roots. For a private CA, add its PEM with `certificates`: it is
//! trusted for every `rediss://` sentinel and for the primary (the redis
//! crate's `SentinelClientBuilder` passes it on; with it, every sentinel URL
//! must carry the same username and password):
//!
//! ```rust,ignore
//! let options = SentinelOptions::new()
//!     .primary_password("primary-secret")
//!     .primary_tls(redis::TlsMode::Secure)
//!     .certificates(redis::TlsCertificates { client_tls: None, root_cert: Some(std::fs::read("ca.pem")?) });
//! let sentinels = ["rediss://:sentinel-secret@10.0.0.1:26379", "rediss://:sentinel-secret@10.0.0.2:26379"];
//! let locker = Locker::connect_sentinel_with_options(sentinels, "mymaster", options, config)?;
//! ```
//!
//! A sentinel or primary whose certificate is not trusted fails with
//! `could not connect to redis: TLS handshake failed: <reason>`; a
//! certificate or key whose PEM does not parse is `INVALID_CONFIG` (option
//! `certificates`). On the
//! servers' side, a TLS Sentinel deployment runs the sentinels with `tls-port`
//! (and `port 0` for TLS only) and `tls-replication yes`, so that they talk TLS
//! to the primary, the replicas and each other.
//!
//! The locker asks the sentinels for the primary (the redis crate's
//! `SentinelClient`, which also checks with `ROLE` that the address answers as
//! a primary) at connect and whenever it opens a new connection: after a
//! connection error, and after a `READONLY` or `MASTERDOWN` reply, which drops
//! the connections to that server. The notification subscriber resolves the
//! primary the same way at each reconnect. Waiters keep their place through a
//! failover and retry with backoff while their wait lasts; fences keep
//! increasing by the clock floor described above. A failover can still lose the
//! last grants (asynchronous replication): see the paragraph above. A lookup
//! is bounded by `command_timeout` (the blocking front end runs it on a short
//! helper thread, since the redis crate's sync Sentinel connections take no
//! timeout).
//!
//! # Limits of the guarantee
//!
//!
//! - One Redis server decides who holds a lease: no Redlock. Order is kept among
//!   the waiters of one locker and, with `Config::handover` (the default),
//!   among waiting lockers in the order they registered in the key's queue (a
//!   read-write lease lets the readers at the head of its queue in together);
//!   a locker registers once its notifications for the key are confirmed, so
//!   a locker that started waiting a moment earlier may still be queued
//!   later.
//! - `is_valid()` / `remaining()` are conservative local estimates (counted from
//!   when the acquire or renew was sent), not a promise: a process paused by GC,
//!   swap or a stopped VM can act after its lease ended. **Mutual exclusion holds
//!   only where the protected store checks the fence atomically** and rejects a
//!   write with a fence lower than one it already accepted (see
//!   `examples/blocking_worker.rs` for such a store in Redis).
//! - Fences increase strictly per key: every grant's fence is
//!   `max(counter + 1, server TIME in ms × 1000)`, so they keep increasing after
//!   Redis lost its data and after a failover to a replica that had not received
//!   the last grants, as long as (1) fewer than 1000 acquires per millisecond hit
//!   one key, (2) the clocks of the servers that take over agree to better than
//!   the failover takes (seconds), (3) never go back, and (4) the loss itself
//!   takes longer than a millisecond (data lost within the millisecond of the
//!   last grant, as a `FLUSHALL` right after it, floors the next fence at that
//!   same millisecond). The same holds for each semaphore slot's fences and a
//!   read-write lease's writer fences and epochs. Without the fencing
//!   store, a failover that lost the last grant can still let a second holder in
//!   while the first believes it holds the lease: only the fence check turns that
//!   into a rejected write.
//! - A command whose outcome is unknown is sent again only where that is
//!   harmless: a waiting acquire (with the same token: the replay-safe script
//!   answers with the same fence) and a `with_lock` renewal. Otherwise the token
//!   it may have set is released by token at the locker's next operation, and
//!   the lease TTL is the final expiry in every case. Over TLS, a blocking
//!   release re-sent on a fresh connection because its first connection turned
//!   out closed (the `PING` in front of it found it so) may report `Expired`
//!   instead of `Released` if Redis had applied the first one just before
//!   dying; the lock is gone either way. Over plain TCP and unix sockets a
//!   request is only re-sent when its connection was found closed before
//!   anything was written.
//!
//! # Least privilege
//!
//! The rules are in the README's "Least privilege", the list operators copy;
//! here is why each is there.
//!
//! Each pattern is exact: it matches this namespace's names and no other
//! namespace's. Every name is `<ns>:<kind>:{...`: the kind (`lock`,
//! `lock-fence`, ...) contains no `:`, is followed by the hash tag's `{`, and
//! a namespace contains no `{` (nor a glob character: `Config` refuses
//! `{`, `}`, `*`, `?`, `[`, `]` and `\`), so a name starting with
//! `my-service:lock:{` is namespace `my-service`'s lock and nothing else.
//! Looser patterns leak: `~my-service:lock:*` also matches the locks of
//! namespace `my-service:lock:v2` (`my-service:lock:v2:lock:{...}`),
//! `~my-service:rw-*` every name of namespace `my-service:rw-cache`, and
//! `&my-service:lock-released:*` the channels of namespace
//! `my-service:lock-released:x`. `tests/faults.rs`
//! (`least_privilege_rules_match_no_other_namespaces_names`) asks Redis
//! (`ACL DRYRUN`) whether the README's rules, with those for Cluster and the CLI,
//! reach any name of such namespaces. The only names without a `{` are the
//! namespace's naming-scheme marker `<ns>:key-names` and the release channel
//! `<ns>:lock-released`, which the rules name exactly.
//!
//! What no ACL can prevent: these rights are the namespace's, not one
//! locker's. Any client logged in with them can read a holder's token (`GET`
//! on a lock, `LINDEX` on a queue, `ZRANGE` on a read-write lease's readers)
//! and then release, renew or claim the lease as its owner, or write the
//! keys directly (delete a lock, overwrite a fence counter). Redis checks which
//! keys a user may touch, never who wrote a value, so the ACL separates
//! namespaces (and services that use different ones) but not the lockers
//! inside one namespace: give the rights only to processes you trust as
//! much as each other.
//!
//! `redlease::fenced::FencedStore` keeps its data under `<ns>:fenced:{...`;
//! the connection it writes through needs `+evalsha +eval +script|load
//! +hmget +hset` and `~<ns>:fenced:{*`, which the locker's user does not
//! (grant them to the user of that connection; read from the code, not
//! covered by the least-privilege suite).
//!
//! `tests/faults.rs` runs the
//! behaviour suite's core cases (fences, busy, waiting and notification
//! wake-ups, release and renew outcomes, reloaded scripts, shutdown, and the
//! semaphore's grants, fences, wake-ups and outcomes, and elections' campaigns,
//! reads, proclaims and resigns) for both front ends as a
//! user with exactly these rules, and fails if Redis refused anything
//! (`ACL LOG`) or if the locker sent any other command.
//!
//! | rule | why |
//! |---|---|
//! | `+evalsha` | every acquire, release and renew is one script |
//! | `+eval` | the same script when the server does not have it cached (`NOSCRIPT`: its first use, after a restart or `SCRIPT FLUSH`); `EVAL` runs and caches it in one round trip |
//! | `+script\|load` | before shutdown's pipelined releases |
//! | `+get +mget +set +mset +del +incr +pexpire +pttl +time +publish` | the commands the scripts call (`MGET`: every acquire reads its lock or slots and their fence counter in one call; `MSET`: a multi-key lease's grant writes its keys' fence counters in one call); Redis checks them against the user too. A refused `PUBLISH` (inside `pcall`) only costs the release notification: waiters then poll |
//! | `+subscribe` | release notifications, while someone waits or observes an election. Refused (`NOPERM`), the locker logs `LOCK_NOTIFY_UNAVAILABLE` and its waiters poll every `poll_interval` |
//! | `+unsubscribe +punsubscribe` | not sent by this version (the subscriber closes its connection instead); kept so that lockers of 0.1 sharing the user fill no `ACL LOG` |
//! | `+ping` | over TLS (and in a build without `aio`) the blocking front end puts a `PING` in front of a command on a reused pooled connection, to tell a connection the server closed from a lost reply; over plain TCP and unix sockets it sends none (its own connection sees the close without sending) |
//! | `+config\|get`, `+info` | the `maxmemory-policy` check at connect (`REDIS_EVICTION_UNSAFE`); `INFO memory` is the fallback when `CONFIG GET` is refused. With neither, the check is skipped (debug log `REDIS_EVICTION_UNCHECKED`) |
//! | `~<ns>:lock:{*`, `~<ns>:lock-fence:{*` | the locks and the fence counters (`fence_counter_ttl` uses `PEXPIRE` on the counters) |
//! | `+rpush +lmove +rpop +lpop +lpush +lpos +lset +getdel +exists +lrem +lindex`, `~<ns>:lock-queue:{*`, `~<ns>:lock-queued:{*`, `~<ns>:lock-reg:{*` and their `sem-` and `rw-` twins | the hand-over (`docs/PROTOCOL.md`): a waiting locker's registration (`lock-reg`/`sem-reg`/`rw-reg`, `SET ... GET`, and its entry in the queue refreshed in place: `LPOS`, `LSET`), the queue of registrations and its flag (`lock-queue`, `lock-queued` and the `sem-`/`rw-` twins: `RPUSH`), the grant to the head, whose entry moves to the tail (`LMOVE`; a dead one is dropped, `RPOP`; a semaphore's is popped, `LPOP`, and one met twice in a script put back, `LPUSH`), a locker leaving the queue when it holds the lease with no waiter behind it or its last waiter gave up (`GETDEL`, `LREM`), the read-write lease's look at the head (`LINDEX`: a writer next keeps new readers out); `EXISTS` tells an expired lock from a key of another type at release. Without them the locker logs `LOCK_HANDOVER_UNAVAILABLE` once (warn) and waits without the hand-over (`Config::handover(false)` avoids the refusal) |
//! | `~<ns>:sem:{*`, `~<ns>:sem-fence:{*`, `~<ns>:sem-permits:{*` | a semaphore's slots, each slot's fence counter, and its permit-count record; leave them out if you use no semaphore |
//! | `+zadd +zrem +zscore +zcard +zrange +zremrangebyscore +pexpireat`, `~<ns>:rw-write:{*`, `~<ns>:rw-read:{*`, `~<ns>:rw-intent:{*`, `~<ns>:rw-fence:{*` | a read-write lease's scripts (its readers are a sorted set scored by expiry; `PEXPIREAT ... GT`/`NX` needs Redis ≥ 7.0) and its keys (`rw-write`, `rw-read`, `rw-intent`, `rw-fence`); leave them out if you use no read-write lease |
//! | `+xadd +xrange +xrevrange +evalsha_ro +eval_ro`, `~<ns>:elect:{*`, `~<ns>:elect-term:{*`, `~<ns>:elect-log:{*` | an election's scripts (its change log is a stream) and its keys; `leader()` runs as `EVALSHA_RO` (`EVAL_RO` after `NOSCRIPT`); leave them out if you use no election |
//! | `~<ns>:key-names` | the namespace's naming scheme, read at connect (`GET`) and recorded by the first locker (`SET ... NX GET`; see [What is stored in Redis](#what-is-stored-in-redis)). Without it a locker with the default names logs `KEY_NAMES_UNCHECKED` and works; one with `Config::key_hash_tags(true)` fails to connect (`InvalidConfig`) |
//! | `&<ns>:lock-released` | the release channel |
//! | `~<ns>:lock-holder:{*` | the `redlease` CLI only: `run`'s holder record (`SET ... PX`), read by `status` (`GET`); the library never touches it. Without it `run` skips the record |
//! | `~<ns>:sem-holder:{*` | the `redlease` CLI only: the holder record of each slot `run --permits` holds (`SET ... PX`), read by `status --permits` (`MGET`); as above, and leave it out if you run no `--permits` |
//!
//! Only in some setups:
//!
//! - `+wait` with `Config::min_replicas`;
//! - `+select` when the URL names a database other than 0;
//! - `+client|setinfo` on Redis ≥ 7.2: the redis crate sends
//!   `CLIENT SETINFO LIB-NAME`/`LIB-VER` on every new connection and ignores the
//!   answer, so refusing it is harmless but fills `ACL LOG` (Redis 7.0 does not
//!   know the subcommand). `AUTH` and `HELLO` (the async front end speaks RESP3)
//!   need no permission.
//! - A locker that only reads an election (`leader()`, `observe()`,
//!   `redlease leader [--watch]`) needs read-only rights: `+evalsha_ro
//!   +eval_ro +get +pttl +xrange +xrevrange +subscribe +ping +config|get
//!   +info %R~<ns>:elect:{* %R~<ns>:elect-log:{* &<ns>:lock-released`
//!   (`+subscribe` and the channel for `observe()`,
//!   which reads when notified), and `+set ~<ns>:key-names`: its only write,
//!   the naming scheme recorded at connect when no locker did yet (with
//!   `%R~<ns>:key-names` instead it checks the scheme but, connecting first,
//!   logs `KEY_NAMES_UNCHECKED` and fills `ACL LOG`).
//! - The `redlease` CLI needs nothing more than the holder-record rules above:
//!   `run` is a locker, and `status` reads the lock, the counter and the record
//!   with `PTTL` and `GET` (with `--permits`: the permit count with `GET`, each
//!   slot with `PTTL`, the slots' counters and records with `MGET`; no
//!   MULTI/EXEC; `tests/cli.rs` runs both, with and without `--permits`, as
//!   this ACL user).
//! - On Redis Cluster the notifications are sharded: `+spublish +ssubscribe
//!   +sunsubscribe` and `&<ns>:lock-released:{*` instead of `+publish
//!   +subscribe` and `&<ns>:lock-released`, plus `+command|info` and
//!   `+cluster|slots` for the locker's topology checks (read from the code; the
//!   least-privilege test covers a single server only).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "aio")]
#[cfg_attr(docsrs, doc(cfg(feature = "aio")))]
pub mod aio;
pub mod blocking;
mod cancel;
mod clock;
mod cluster;
mod config;
pub(crate) mod core;
mod driver;
mod entropy;
mod error;
mod eviction;
pub mod fenced;
pub mod front;
mod handle;
mod key_names;
/// The property checks behind the fuzz targets in `fuzz/` (only under
/// `--cfg fuzzing`, which cargo-fuzz passes; hidden: not an API).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::core::model::{check_line, check_names, check_replies};
}
mod lost;
#[cfg(any(test, feature = "bench-hooks"))]
#[doc(hidden)]
pub mod micro;
#[doc(hidden)]
pub mod probe;
mod replication;
mod sentinel;
mod server_version;
mod stats;
#[cfg(feature = "test-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-server")))]
pub mod testing;
mod url;

pub use crate::cancel::CancelHandle;
pub use crate::config::{AcquireOptions, Config, WithLock};
pub use crate::core::{
    Fence, Leader, Observation, ReleaseOutcome, RenewOutcome, ReplyError, Version,
};
pub use crate::error::{Error, LostCause, Operation};
pub use crate::handle::{kind, Election, Leadership, Lease, Locker, Observer, RwLock, Semaphore};
pub use crate::lost::Lost;
pub use crate::sentinel::SentinelOptions;
pub use crate::stats::Stats;
pub use crate::url::IntoConnectionInfo;

/// Compiles the README's Rust examples as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
