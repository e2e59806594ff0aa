//! The blocking command connections: a small pool of `redis::Connection`s,
//! opened on demand, and the one place scripts are sent (EVALSHA, reloading
//! the script on `NOSCRIPT`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
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
    client: redis::Client,
    timeout: Duration,
    idle: Mutex<Vec<redis::Connection>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for Commands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands")
            .field("idle", &self.idle.lock().len())
            .finish_non_exhaustive()
    }
}

impl Commands {
    pub(crate) fn new(client: redis::Client, timeout: Duration) -> Self {
        Commands {
            client,
            timeout,
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// Opens a connection with the command timeout on connect, reads and
    /// writes, retrying a failed connect twice within that timeout.
    pub(crate) fn connect(&self) -> Result<redis::Connection, redis::RedisError> {
        open(&self.client, self.timeout)
    }

    /// An idle connection (flagged as reused) or a new one.
    fn checkout(&self) -> Result<(redis::Connection, bool), redis::RedisError> {
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
    fn send(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<(redis::Connection, redis::RedisResult<Value>), Failure> {
        loop {
            let (mut conn, reused) = self.checkout().map_err(Failure::NotSent)?;
            if !reused {
                let result = cmd.query::<Value>(&mut conn);
                return Ok((conn, result));
            }
            match probe_and_send(&mut conn, cmd) {
                Probe::Stale => continue,
                Probe::Sent(result) => return Ok((conn, result)),
            }
        }
    }

    fn checkin(&self, conn: redis::Connection) {
        if self.closed.load(Ordering::SeqCst) || !conn.is_open() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Sends a script call: EVALSHA, and on `NOSCRIPT` (which Redis answers
    /// without running anything) `SCRIPT LOAD` and EVALSHA once more.
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
            result = call.load().query::<Value>(&mut conn).and_then(|_| {
                counters.script_sent();
                call.evalsha().query::<Value>(&mut conn)
            });
        }
        let then_reply = match (&result, then) {
            (Ok(value), Some(cmd)) if call.kind.grants(value) => {
                Some(cmd.query::<Value>(&mut conn))
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
        let (mut conn, _) = self.checkout().map_err(Failure::NotSent)?;
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

    fn finish(&self, conn: redis::Connection, result: &redis::RedisResult<Value>) {
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
