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

    fn checkout(&self) -> Result<redis::Connection, redis::RedisError> {
        if let Some(conn) = self.idle.lock().pop() {
            return Ok(conn);
        }
        self.connect()
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
        let mut conn = self.checkout().map_err(Failure::NotSent)?;
        counters.script_sent();
        let mut result = call.evalsha().query::<Value>(&mut conn);
        if matches!(&result, Err(e) if is_noscript(e)) {
            counters.noscript_reload();
            result = call
                .load()
                .query::<Value>(&mut conn)
                .and_then(|_| {
                    counters.script_sent();
                    call.evalsha().query::<Value>(&mut conn)
                });
        }
        self.finish(conn, &result);
        result.map_err(Failure::Sent)
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
        let mut conn = self.checkout().map_err(Failure::NotSent)?;
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

    /// Closes the idle connections and stops keeping new ones.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.idle.lock().clear();
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
        let attempt = client.get_connection_with_timeout(timeout).and_then(|conn| {
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
