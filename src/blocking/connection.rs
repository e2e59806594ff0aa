//! The blocking command connections: a small pool of connections of our
//! own over plain TCP or a unix socket ([`Wire`]), of the redis crate's
//! `Connection`s over TLS, or on Redis Cluster of `ClusterConnection`s,
//! opened on demand, and the one place a [`Request`] is sent. Clones share
//! the pool.
//!
//! A reused connection may have been closed by the server while idle
//! (`CLIENT KILL`, restart, idle timeout). A [`Wire`] is looked at before
//! it is taken from the pool, without sending anything, and one found
//! closed is dropped. The redis crate's `Connection` only learns it by use,
//! so a request on a reused one goes out behind a `PING` in the same write
//! (still one round trip): if the PING's reply already finds the connection
//! dropped, the server closed it before reading the request, which is sent
//! again on a fresh connection. A close that comes after the look, or
//! after the PING, leaves the request's outcome unknown. On a
//! cluster a dropped node connection is sent on again; a redirect
//! (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`: not executed) is sent again on a
//! fresh cluster connection, which reads the new slot map, and `ASK` is
//! followed with `ASKING` on the named node. A timeout is never re-sent.
//! (The scripts are replay-safe, so even a re-send after a crash between
//! executing and replying grants nothing twice.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::cluster::ClusterConnection;
use redis::{ConnectionLike, Value};

use crate::clock::now;
use crate::cluster::{is_ask, is_redirect};
use crate::core::script::{pipeline_loading, ScriptCall};
use crate::driver::connect::Ask;
use crate::driver::ops::{resend_as_eval, then_after, ReleaseReplies, Reply, Request};
use crate::driver::state::Connections;
use crate::driver::target::Source;
use crate::driver::wire::{OneServer, Wire};
use crate::error::{connect_failed, is_noscript, is_server_reply, Failure, Transport};
use crate::sentinel::is_failover_reply;
use crate::stats::Counters;

/// Idle connections kept for reuse; more concurrent commands open more.
const MAX_IDLE: usize = 16;
/// Pauses between connect attempts; connect failures are certainly not
/// sent, so trying again is safe.
const CONNECT_BACKOFF: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(50)];
/// Releases sent at once at shutdown on a cluster (each its own round trip).
const PARALLEL_RELEASES: usize = 8;

#[derive(Clone)]
pub struct Commands {
    source: Source,
    timeout: Duration,
    idle: Arc<Mutex<Vec<Conn>>>,
    closed: Arc<AtomicBool>,
}

/// A pooled connection: to one server (ours over plain TCP or a unix
/// socket, the redis crate's over TLS), or to a cluster.
enum Conn {
    One(Box<dyn OneServer>),
    Cluster(Box<ClusterConnection>),
}

impl Conn {
    fn as_like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::One(c) => c.as_mut(),
            Conn::Cluster(c) => c.as_mut(),
        }
    }
}

impl std::fmt::Debug for Commands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands")
            .field("idle", &self.idle.lock().len())
            .finish_non_exhaustive()
    }
}

impl Commands {
    pub(crate) fn new(source: Source, timeout: Duration) -> Self {
        Commands {
            source,
            timeout,
            idle: Arc::default(),
            closed: Arc::default(),
        }
    }

    /// Sends a request of an operation.
    pub(crate) fn send(&self, request: &Request, counters: &Counters) -> Reply {
        match request {
            Request::Script { call, then } => {
                let (reply, then) = self.run_then(call, counters, then.as_ref());
                Reply::Script { reply, then }
            }
            Request::Releases { calls, until } => Reply::Releases(if self.source.is_cluster() {
                Ok(self.releases_in_parallel(calls, *until))
            } else {
                self.releases_in_one_pipeline(calls, *until)
            }),
        }
    }

    /// Opens a connection with the command timeout on connect, reads and
    /// writes, retrying a failed connect twice within that timeout.
    fn connect(&self) -> Result<Conn, redis::RedisError> {
        match &self.source {
            Source::Standalone(client) => open(client, self.timeout),
            Source::Sentinel(resolver) => open(&resolver.primary(self.timeout)?, self.timeout),
            Source::Cluster(client, template) => {
                let transport = Source::cluster_transport(template.as_ref());
                client
                    .get_connection()
                    .map(|c| Conn::Cluster(Box::new(c)))
                    .map_err(|e| connect_failed(transport, e))
            }
        }
    }

    /// Sends a connect-time check on a fresh connection.
    pub(crate) fn ask(&self, ask: &Ask) -> Result<Value, Failure> {
        match (ask, &self.source) {
            (Ask::EveryPrimary(cmd), Source::Cluster(client, _)) => {
                let mut conn = client.get_connection().map_err(Failure::NotSent)?;
                conn.route_command(cmd, crate::eviction::every_primary())
                    .map_err(Failure::Sent)
            }
            (Ask::EveryPrimary(_), _) => Err(Failure::not_a_cluster()),
            (Ask::One(cmd), _) => {
                let mut conn = self.connect().map_err(Failure::NotSent)?;
                let result = cmd.query::<Value>(conn.as_like());
                self.finish(conn, &result);
                result.map_err(Failure::Sent)
            }
        }
    }

    /// An idle connection (flagged as reused) or a new one. An idle one
    /// found closed by the server is dropped here, before anything was
    /// sent on it.
    fn checkout(&self) -> Result<(Conn, bool), redis::RedisError> {
        loop {
            let idle = self.idle.lock().pop();
            match idle {
                Some(Conn::One(one)) if one.closed_while_idle() => {}
                Some(conn) => return Ok((conn, true)),
                None => return self.connect().map(|conn| (conn, false)),
            }
        }
    }

    /// Sends `cmd` on a working connection; see the module docs. `noscript`
    /// is the call whose `EVAL` to send instead where the node that answers
    /// lacks the script (only needed where the caller cannot resend on the
    /// same connection: after following `ASK`); it is built only then, as
    /// it carries the script's source.
    fn send_cmd(
        &self,
        cmd: &redis::Cmd,
        noscript: Option<&ScriptCall>,
    ) -> Result<(Conn, redis::RedisResult<Value>), Failure> {
        loop {
            let (conn, reused) = self.checkout().map_err(Failure::NotSent)?;
            let mut one = match conn {
                Conn::Cluster(cluster) => {
                    return self.send_on_cluster(cmd, noscript, cluster, reused)
                }
                Conn::One(one) => one,
            };
            let packed = cmd.get_packed_command();
            if let Probe::Sent(sent) = send_probed(one.as_mut(), &packed, reused) {
                let result = sent.and_then(|()| one.recv_response());
                return Ok((Conn::One(one), result.and_then(Value::extract_error)));
            }
        }
    }

    /// Sends on a cluster connection and again, on fresh ones (each reads
    /// the slot map anew), while the cluster says the command did not run,
    /// within the command timeout: nodes learn a failover's new owner at
    /// slightly different times.
    fn send_on_cluster(
        &self,
        cmd: &redis::Cmd,
        noscript: Option<&ScriptCall>,
        mut conn: Box<ClusterConnection>,
        mut reused: bool,
    ) -> Result<(Conn, redis::RedisResult<Value>), Failure> {
        let started = now();
        let mut pause = Duration::from_millis(10);
        loop {
            let result = cmd.query::<Value>(conn.as_mut());
            let again = match &result {
                Err(e) if is_ask(e) => {
                    let result = self.follow_ask(cmd, noscript, e);
                    return Ok((Conn::Cluster(conn), result));
                }
                Err(e) if is_redirect(e) || e.is_connection_refusal() => true,
                // Closed while idle: like the PING probe's stale case.
                Err(e) if reused && e.is_connection_dropped() && !e.is_timeout() => true,
                _ => false,
            };
            let elapsed = now().saturating_duration_since(started);
            if !again || elapsed + pause >= self.timeout {
                return Ok((Conn::Cluster(conn), result));
            }
            if !reused {
                #[expect(clippy::disallowed_methods, reason = "bounded redirect backoff")]
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            reused = false;
            conn = match self.connect().map_err(Failure::NotSent)? {
                Conn::Cluster(fresh) => fresh,
                _ => return Ok((Conn::Cluster(conn), result)),
            };
        }
    }

    /// Sends `cmd` once more to the node an `ASK` redirect names, behind
    /// `ASKING` (a slot being migrated: the key already moved there).
    fn follow_ask(
        &self,
        cmd: &redis::Cmd,
        noscript: Option<&ScriptCall>,
        ask: &redis::RedisError,
    ) -> redis::RedisResult<Value> {
        let template = match &self.source {
            Source::Cluster(_, template) => template.as_ref(),
            _ => None,
        };
        let info = crate::cluster::ask_node_info(ask, template)?;
        let mut conn = open(&redis::Client::open(info)?, self.timeout)?;
        let asking = |conn: &mut Conn, cmd: &redis::Cmd| {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(cmd.clone());
            let mut replies: Vec<Value> = pipe.query(conn.as_like())?;
            replies.pop().ok_or_else(|| ask.clone())
        };
        match (asking(&mut conn, cmd), noscript) {
            (Err(e), Some(fallback)) if is_noscript(&e) => asking(&mut conn, &fallback.eval()),
            (result, _) => result,
        }
    }

    fn checkin(&self, mut conn: Conn) {
        if self.closed.load(Ordering::SeqCst) || !conn.as_like().is_open() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Sends a script call: EVALSHA, and on `NOSCRIPT` (which Redis answers
    /// without running anything) the script once more as `EVAL`, which
    /// also caches it. Then, if the script granted or renewed the lease,
    /// `then` on the same connection (the replication `WAIT`, which only
    /// counts the writes of its own connection).
    fn run_then(
        &self,
        call: &ScriptCall,
        counters: &Counters,
        then: Option<&redis::Cmd>,
    ) -> (Result<Value, Failure>, Option<redis::RedisResult<Value>>) {
        counters.script_sent();
        let (mut conn, mut result) = match self.send_cmd(&call.evalsha(), Some(call)) {
            Ok(sent) => sent,
            Err(f) => return (Err(f), None),
        };
        if resend_as_eval(&result, counters) {
            result = call.eval().query::<Value>(conn.as_like());
        }
        let then_reply = then_after(call, &result, then).map(|cmd| cmd.query(conn.as_like()));
        match &then_reply {
            Some(Err(e)) if !is_server_reply(e) => {}
            _ => self.finish(conn, &result),
        }
        (result.map_err(Failure::Sent), then_reply)
    }

    /// Sends many releases in one round trip on one server: a pipeline of
    /// `SCRIPT LOAD` (so that none can fail with `NOSCRIPT`) and the calls,
    /// behind the PING probe on a reused redis crate connection (TLS).
    /// Each reply counts on its own; one that still says `NOSCRIPT` is
    /// sent again as `EVAL`.
    fn releases_in_one_pipeline(
        &self,
        calls: &[ScriptCall],
        until: Option<Instant>,
    ) -> Result<ReleaseReplies, Failure> {
        let timeout = until.map_or(self.timeout, |at| at.saturating_duration_since(now()));
        if timeout.is_zero() {
            return Ok(calls.iter().map(|_| None).collect());
        }
        let pipe = pipeline_loading(calls);
        let bytes = pipe.get_packed_pipeline();
        loop {
            let (Conn::One(mut one), reused) = self.checkout().map_err(Failure::NotSent)? else {
                return Ok(calls.iter().map(|_| None).collect());
            };
            one.set_timeout(timeout).map_err(Failure::Sent)?;
            match send_probed(one.as_mut(), &bytes, reused) {
                Probe::Stale => continue,
                Probe::Sent(Err(e)) => return Err(Failure::Sent(e)),
                // The connection's timeouts were changed: it is never reused.
                Probe::Sent(Ok(())) => {
                    let loads = pipe.len() - calls.len();
                    return Ok(read_release_replies(one.as_mut(), loads, calls));
                }
            }
        }
    }

    /// Sends releases on a cluster, where each key may live on another
    /// node: each is its own round trip, up to `PARALLEL_RELEASES` at once,
    /// and the whole is bounded by `until` (replies later than that are
    /// left to the threads, which end by the command timeout).
    fn releases_in_parallel(&self, calls: &[ScriptCall], until: Option<Instant>) -> ReleaseReplies {
        let mut replies: ReleaseReplies = calls.iter().map(|_| None).collect();
        let queue: Vec<_> = calls.iter().cloned().enumerate().rev().collect();
        let queue = Arc::new(Mutex::new(queue));
        let (answer, answers) = mpsc::channel();
        let work = {
            let (queue, commands) = (queue.clone(), self.clone());
            move |answer: mpsc::Sender<_>| {
                let counters = Counters::default();
                loop {
                    let next = queue.lock().pop();
                    let Some((i, call)) = next else { return };
                    let (reply, _) = commands.run_then(&call, &counters, None);
                    if answer.send((i, reply)).is_err() {
                        return;
                    }
                }
            }
        };
        // One release needs no thread of its own; without a thread to be
        // had, the rest are sent from here, one by one.
        let threads = (calls.len() > 1).then(|| calls.len().min(PARALLEL_RELEASES));
        let spawned = threads.is_some_and(|n| {
            (0..n).all(|_| {
                let (work, answer) = (work.clone(), answer.clone());
                let thread = std::thread::Builder::new().name("redlease-release".into());
                thread.spawn(move || work(answer)).is_ok()
            })
        });
        if !spawned {
            work(answer.clone());
        }
        drop(answer);
        for _ in 0..calls.len() {
            // Without `until`, `Duration::MAX` waits as `recv` does.
            let left = until.map_or(Duration::MAX, |at| at.saturating_duration_since(now()));
            let Ok((i, reply)) = answers.recv_timeout(left) else {
                break;
            };
            replies[i] = Some(reply);
        }
        replies
    }

    /// Keeps a connection after a reply or an error reply. One that timed
    /// out is dropped: its late reply would answer the next request (the
    /// redis crate would skip it, but the `PING` probe reads two replies
    /// per request and would fall out of step).
    ///
    /// After `READONLY` or `MASTERDOWN` the server is no longer a writable
    /// primary: this connection and the idle ones (to the same server) are
    /// dropped, so the next request connects anew (through Sentinel, to
    /// the primary it names now).
    fn finish(&self, conn: Conn, result: &redis::RedisResult<Value>) {
        match result {
            Ok(_) => self.checkin(conn),
            Err(e) if is_failover_reply(e) => self.idle.lock().clear(),
            Err(e) if is_server_reply(e) => self.checkin(conn),
            Err(_) => {}
        }
    }
}

impl Connections for Commands {
    /// Whether an idle pooled connection exists, after dropping those the
    /// server closed as far as that can be seen without sending (over TLS
    /// it is only learnt by use).
    fn is_connected(&self) -> bool {
        let mut idle = self.idle.lock();
        idle.retain(|conn| !matches!(conn, Conn::One(one) if one.closed_while_idle()));
        !idle.is_empty()
    }

    /// Closes the idle connections and stops keeping new ones.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.idle.lock().clear();
    }
}

/// Reads the `SCRIPT LOAD` reply and one reply per release call; sends the
/// calls answered `NOSCRIPT` again as `EVAL` on the same connection.
fn read_release_replies(
    conn: &mut dyn OneServer,
    loads: usize,
    calls: &[ScriptCall],
) -> ReleaseReplies {
    let mut replies: ReleaseReplies = calls.iter().map(|_| None).collect();
    let read = |conn: &mut dyn OneServer| conn.recv_response().and_then(Value::extract_error);
    for _ in 0..loads {
        if matches!(read(conn), Err(e) if !is_server_reply(&e)) {
            return replies;
        }
    }
    for slot in replies.iter_mut() {
        match read(conn) {
            Ok(value) => *slot = Some(Ok(value)),
            Err(e) if is_server_reply(&e) => *slot = Some(Err(Failure::Sent(e))),
            // Timed out or dropped: this and the rest are unconfirmed.
            Err(_) => return replies,
        }
    }
    for (slot, call) in replies.iter_mut().zip(calls) {
        if matches!(slot, Some(Err(Failure::Sent(e))) if is_noscript(e)) {
            *slot = Some(call.eval().query::<Value>(conn).map_err(Failure::Sent));
        }
    }
    replies
}

enum Probe {
    /// The connection was closed before the request was read: not sent.
    Stale,
    /// The request was written (and the PING answered).
    Sent(redis::RedisResult<()>),
}

/// Writes `bytes`, behind a `PING` in the same write on a `reused`
/// connection that needs it ([`OneServer::needs_probe`]), and
/// reads the PING's reply; see the module docs.
fn send_probed(conn: &mut dyn OneServer, bytes: &[u8], reused: bool) -> Probe {
    if !(reused && conn.needs_probe()) {
        return Probe::Sent(conn.send_packed_command(bytes));
    }
    let mut probed = redis::cmd("PING").get_packed_command();
    probed.extend_from_slice(bytes);
    match conn
        .send_packed_command(&probed)
        .and_then(|()| conn.recv_response())
    {
        Ok(_pong) => Probe::Sent(Ok(())),
        Err(e) if e.is_connection_dropped() && !e.is_timeout() => Probe::Stale,
        Err(e) => Probe::Sent(Err(e)),
    }
}

/// Opens a connection with `timeout` on connect, reads and writes: our
/// own where it can be ([`Wire::connect`]), else the redis crate's. A
/// failure says where the scheme may not match the port
/// ([`connect_failed`]).
fn open(client: &redis::Client, timeout: Duration) -> Result<Conn, redis::RedisError> {
    let started = now();
    let mut backoff = CONNECT_BACKOFF.iter();
    loop {
        let attempt = match Wire::connect(client.get_connection_info(), timeout) {
            Some(wire) => wire.map(|wire| Conn::One(Box::new(wire))),
            None => client
                .get_connection_with_timeout(timeout)
                .and_then(|conn| {
                    conn.set_timeout(timeout)?;
                    Ok(Conn::One(Box::new(conn)))
                }),
        };
        match attempt {
            Ok(conn) => return Ok(conn),
            Err(e) => match backoff.next() {
                Some(pause)
                    if now().saturating_duration_since(started) + *pause < timeout
                        && !is_server_reply(&e) =>
                {
                    #[expect(clippy::disallowed_methods, reason = "bounded connect backoff")]
                    std::thread::sleep(*pause);
                }
                _ => {
                    let transport = Transport::of(client.get_connection_info().addr());
                    return Err(connect_failed(transport, e));
                }
            },
        }
    }
}
