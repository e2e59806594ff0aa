//! The blocking command connections: a small pool of `redis::Connection`s
//! (or, on Redis Cluster, `ClusterConnection`s), opened on demand, and the
//! one place scripts are sent (EVALSHA, reloading the script on
//! `NOSCRIPT`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{ConnectionLike, Value};

use crate::core::script::{load_cmd, ScriptCall, ScriptKind};
use crate::error::{is_noscript, is_server_reply, Failure};
use crate::stats::Counters;

/// Idle connections kept for reuse; more concurrent commands open more.
const MAX_IDLE: usize = 16;
/// Pauses between connect attempts; connect failures are certainly not
/// sent, so trying again is safe.
const CONNECT_BACKOFF: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(50)];

pub(crate) struct Commands {
    source: Source,
    timeout: Duration,
    idle: Mutex<Vec<Conn>>,
    closed: AtomicBool,
}

/// Where connections come from.
#[allow(clippy::large_enum_variant, reason = "one per locker, built once")]
pub(crate) enum Source {
    Standalone(redis::Client),
    /// A cluster client; the locker builds its own with `retries(0)`, so a
    /// timed-out write is never re-sent behind its back.
    Cluster(ClusterClient),
}

/// A pooled connection of either kind.
enum Conn {
    Single(redis::Connection),
    Cluster(Box<ClusterConnection>),
}

impl Conn {
    fn as_like(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::Single(c) => c,
            Conn::Cluster(c) => c.as_mut(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Conn::Single(c) => c.is_open(),
            Conn::Cluster(c) => c.is_open(),
        }
    }
}

/// Whether a cluster error means the command was not executed because the
/// slot lives elsewhere now (the connection must learn the new slot map).
fn is_redirect(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::Moved
                | redis::ServerErrorKind::Ask
                | redis::ServerErrorKind::TryAgain
                | redis::ServerErrorKind::ClusterDown
        )
    )
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
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// The standalone client (subscriptions use it); `None` on a cluster.
    pub(crate) fn client(&self) -> Option<&redis::Client> {
        match &self.source {
            Source::Standalone(client) => Some(client),
            Source::Cluster(_) => None,
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.source, Source::Cluster(_))
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Opens a connection with the command timeout on connect, reads and
    /// writes, retrying a failed connect twice within that timeout.
    fn connect(&self) -> Result<Conn, redis::RedisError> {
        match &self.source {
            Source::Standalone(client) => open(client, self.timeout).map(Conn::Single),
            Source::Cluster(client) => client.get_connection().map(|c| Conn::Cluster(Box::new(c))),
        }
    }

    /// Runs one plain command on a fresh connection (connect-time checks).
    pub(crate) fn query_fresh(&self, cmd: &redis::Cmd) -> Result<Value, Failure> {
        let mut conn = self.connect().map_err(Failure::NotSent)?;
        let result = cmd.query::<Value>(conn.as_like());
        self.finish(conn, &result);
        result.map_err(Failure::Sent)
    }

    /// An idle connection (flagged as reused) or a new one.
    fn checkout(&self) -> Result<(Conn, bool), redis::RedisError> {
        if let Some(conn) = self.idle.lock().pop() {
            return Ok((conn, true));
        }
        self.connect().map(|conn| (conn, false))
    }

    /// Sends `cmd` on a working connection. A reused idle connection may have
    /// been closed by the server meanwhile (`CLIENT KILL`, restart, idle
    /// timeout), which a sync connection only learns by using it. So on a
    /// reused connection the command goes out behind a `PING` in the same
    /// write, still one round trip: if the PING's reply already finds the
    /// connection dropped, the server closed it before reading our request,
    /// and the command is sent again on the next connection. Only a failure
    /// after the PONG leaves the outcome unknown.
    ///
    /// On a cluster, a redirect (`MOVED`, `ASK`, ...) means the command did
    /// not run; a fresh cluster connection reads the new slot map and sends
    /// it once more. (The sync cluster connection follows redirects only
    /// with `retries > 0`, which would also re-send timed-out writes.)
    fn send(&self, cmd: &redis::Cmd) -> Result<(Conn, redis::RedisResult<Value>), Failure> {
        loop {
            let (mut conn, reused) = self.checkout().map_err(Failure::NotSent)?;
            match &mut conn {
                Conn::Cluster(cluster) => {
                    let result = cmd.query::<Value>(cluster.as_mut());
                    if matches!(&result, Err(e) if is_redirect(e)) {
                        return self.resend_after_redirect(cmd, result);
                    }
                    return Ok((conn, result));
                }
                Conn::Single(single) if reused => match probe_and_send(single, cmd) {
                    Probe::Stale => continue,
                    Probe::Sent(result) => return Ok((conn, result)),
                },
                Conn::Single(single) => {
                    let result = cmd.query::<Value>(single);
                    return Ok((conn, result));
                }
            }
        }
    }

    /// Sends again on fresh cluster connections (each reads the slot map
    /// anew) while the cluster keeps redirecting, within the command
    /// timeout: nodes learn a failover's new owner at slightly different
    /// times, and a redirected command did not run.
    fn resend_after_redirect(
        &self,
        cmd: &redis::Cmd,
        mut result: redis::RedisResult<Value>,
    ) -> Result<(Conn, redis::RedisResult<Value>), Failure> {
        #[expect(clippy::disallowed_methods, reason = "driver call site")]
        let started = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            let mut fresh = self.connect().map_err(Failure::NotSent)?;
            result = match result {
                Err(e) if is_redirect(&e) => cmd.query::<Value>(fresh.as_like()),
                settled => settled,
            };
            let redirected = matches!(&result, Err(e) if is_redirect(e));
            if !redirected || started.elapsed() + pause >= self.timeout {
                return Ok((fresh, result));
            }
            #[expect(clippy::disallowed_methods, reason = "bounded redirect backoff")]
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    fn checkin(&self, conn: Conn) {
        if self.closed.load(Ordering::SeqCst) || !conn.is_open() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Sends a script call: EVALSHA, and on `NOSCRIPT` (which Redis answers
    /// without running anything) the script once more as `EVAL`, which
    /// also caches it.
    pub(crate) fn run(&self, call: &ScriptCall, counters: &Counters) -> Result<Value, Failure> {
        self.run_then(call, counters, None).0
    }

    /// Like [`run`](Self::run), then, if the script granted or renewed the
    /// lease, `then` on the same connection (the replication `WAIT`, which
    /// only counts the writes of its own connection).
    pub(crate) fn run_then(
        &self,
        call: &ScriptCall,
        counters: &Counters,
        then: Option<&redis::Cmd>,
    ) -> (Result<Value, Failure>, Option<redis::RedisResult<Value>>) {
        counters.script_sent();
        let (mut conn, mut result) = match self.send(&call.evalsha()) {
            Ok(sent) => sent,
            Err(f) => return (Err(f), None),
        };
        if matches!(&result, Err(e) if is_noscript(e)) {
            counters.noscript_reload();
            counters.script_sent();
            result = call.eval().query::<Value>(conn.as_like());
        }
        let then_reply = match (&result, then) {
            (Ok(value), Some(cmd)) if call.kind.grants(value) => {
                Some(cmd.query::<Value>(conn.as_like()))
            }
            _ => None,
        };
        match &then_reply {
            Some(Err(e)) if !is_server_reply(e) => {}
            _ => self.finish(conn, &result),
        }
        (result.map_err(Failure::Sent), then_reply)
    }

    /// Sends many release calls in one pipeline (one round trip), preceded
    /// by `SCRIPT LOAD` so that none can fail with `NOSCRIPT`. Returns how
    /// many of them Redis answered with an outcome.
    pub(crate) fn run_releases(
        &self,
        calls: &[ScriptCall],
        timeout: Duration,
    ) -> Result<usize, Failure> {
        if calls.is_empty() {
            return Ok(0);
        }
        if self.is_cluster() {
            return Ok(self.run_releases_one_by_one(calls));
        }
        let (conn, _) = self.checkout().map_err(Failure::NotSent)?;
        let Conn::Single(mut conn) = conn else {
            return Ok(0);
        };
        let timeout = timeout.max(Duration::from_millis(1));
        let set = conn
            .set_read_timeout(Some(timeout))
            .and_then(|()| conn.set_write_timeout(Some(timeout)));
        if let Err(e) = set {
            return Err(Failure::Sent(e));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(load_cmd(ScriptKind::Release)).ignore();
        for call in calls {
            pipe.add_command(call.evalsha());
        }
        let result = pipe.query::<Vec<Value>>(&mut conn);
        // The connection's timeouts were changed: never reuse it.
        drop(conn);
        let replies = result.map_err(Failure::Sent)?;
        Ok(replies
            .iter()
            .filter(|v| matches!(v, Value::Int(0..=2)))
            .count())
    }

    /// On a cluster a pipeline goes to one node while the keys live on many:
    /// each release is its own round trip. Returns how many were answered.
    fn run_releases_one_by_one(&self, calls: &[ScriptCall]) -> usize {
        let counters = Counters::default();
        calls
            .iter()
            .filter(|call| matches!(self.run(call, &counters), Ok(Value::Int(0..=2))))
            .count()
    }

    fn finish(&self, conn: Conn, result: &redis::RedisResult<Value>) {
        match result {
            Ok(_) => self.checkin(conn),
            Err(e) if is_server_reply(e) => self.checkin(conn),
            Err(_) => {}
        }
    }

    /// Whether an idle pooled connection exists (it may still turn out
    /// closed by the server: a sync connection only learns that by use).
    pub(crate) fn is_connected(&self) -> bool {
        !self.idle.lock().is_empty()
    }

    /// Closes the idle connections and stops keeping new ones.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.idle.lock().clear();
    }
}

enum Probe {
    /// The connection was closed before the command was read: not sent.
    Stale,
    /// The command was sent; its reply or failure.
    Sent(redis::RedisResult<Value>),
}

fn probe_and_send(conn: &mut redis::Connection, cmd: &redis::Cmd) -> Probe {
    let mut bytes = redis::cmd("PING").get_packed_command();
    bytes.extend_from_slice(&cmd.get_packed_command());
    if let Err(e) = conn.send_packed_command(&bytes) {
        return if e.is_connection_dropped() {
            Probe::Stale
        } else {
            Probe::Sent(Err(e))
        };
    }
    match conn.recv_response() {
        Ok(_pong) => Probe::Sent(conn.recv_response().and_then(Value::extract_error)),
        Err(e) if e.is_connection_dropped() && !e.is_timeout() => Probe::Stale,
        Err(e) => Probe::Sent(Err(e)),
    }
}

/// Opens a connection with `timeout` on connect, reads and writes.
pub(crate) fn open(
    client: &redis::Client,
    timeout: Duration,
) -> Result<redis::Connection, redis::RedisError> {
    #[expect(clippy::disallowed_methods, reason = "driver call site")]
    let started = Instant::now();
    let mut backoff = CONNECT_BACKOFF.iter();
    loop {
        let attempt = client
            .get_connection_with_timeout(timeout)
            .and_then(|conn| {
                conn.set_read_timeout(Some(timeout))?;
                conn.set_write_timeout(Some(timeout))?;
                Ok(conn)
            });
        match attempt {
            Ok(conn) => return Ok(conn),
            Err(e) => match backoff.next() {
                Some(pause) if started.elapsed() + *pause < timeout && !is_server_reply(&e) => {
                    #[expect(clippy::disallowed_methods, reason = "bounded connect backoff")]
                    std::thread::sleep(*pause);
                }
                _ => return Err(e),
            },
        }
    }
}
