//! `MONITOR` on a test server: every command the server runs, in the order
//! it ran them, with its arguments as sent. Tests use it to replay a
//! command exactly as a client library would re-send it after a timeout.
//!
//! The connection is a plain TCP socket (the redis crate has no sync
//! monitor); servers with a password are not supported. Commands a script
//! runs are left out (`[0 lua]` lines).

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::{wait_until, RedisServer};

/// One command the server ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitored {
    /// The client's address (`127.0.0.1:<port>`).
    pub client: String,
    /// The command's name and arguments, as sent.
    pub args: Vec<String>,
}

impl Monitored {
    /// The command again, ready to be sent as it was.
    pub fn to_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd(&self.args[0]);
        for arg in &self.args[1..] {
            cmd.arg(arg);
        }
        cmd
    }

    /// For an `EVAL` or `EVALSHA`: its keys and its arguments.
    pub fn script_call(&self) -> Option<(&[String], &[String])> {
        let name = self.args.first()?.to_ascii_uppercase();
        if name != "EVAL" && name != "EVALSHA" {
            return None;
        }
        let numkeys: usize = self.args.get(2)?.parse().ok()?;
        let rest = self.args.get(3..)?;
        (rest.len() >= numkeys).then(|| rest.split_at(numkeys))
    }
}

/// A `MONITOR` connection and what it has seen so far; closed on drop.
#[derive(Debug)]
pub struct Monitor {
    stream: TcpStream,
    seen: Arc<Mutex<Vec<Monitored>>>,
}

impl Monitor {
    /// Starts monitoring `server`: every command run after this returns is
    /// seen.
    pub fn start(server: &RedisServer) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port()))
            .unwrap_or_else(|e| panic!("connect for MONITOR: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut reader = BufReader::new(stream.try_clone().expect("clone the socket"));
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("MONITOR's reply");
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        reader
            .get_ref()
            .set_read_timeout(None)
            .expect("no read timeout");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if let Some(command) = parse_line(line.trim_end()) {
                            log.lock().unwrap().push(command);
                        }
                    }
                }
            }
        });
        Monitor { stream, seen }
    }

    /// What was seen so far.
    pub fn seen(&self) -> Vec<Monitored> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until everything `server` ran before this call has been seen
    /// (an `ECHO` of a fresh marker, sent now, is seen; the feed keeps the
    /// order the server ran the commands in).
    pub fn catch_up(&self, server: &RedisServer) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let marker = format!(
            "monitor-marker-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        server.query(redis::cmd("ECHO").arg(&marker));
        wait_until(Duration::from_secs(10), "MONITOR sees the marker", || {
            self.seen
                .lock()
                .unwrap()
                .iter()
                .any(|c| c.args.len() == 2 && c.args[1] == marker)
        });
    }

    /// How many of the commands `server` ran so far (caught up) match.
    pub fn count(&self, server: &RedisServer, matches: impl Fn(&Monitored) -> bool) -> usize {
        self.catch_up(server);
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|c| matches(c))
            .count()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// `+<time> [<db> <client>] "arg" "arg" ...`; `None` for other lines and
/// for commands run by a script.
fn parse_line(line: &str) -> Option<Monitored> {
    let rest = line.strip_prefix('+')?;
    let open = rest.find('[')?;
    let close = open + rest[open..].find(']')?;
    let client = rest[open + 1..close].split_once(' ')?.1.to_owned();
    if client == "lua" {
        return None;
    }
    let args = parse_args(&rest[close + 1..])?;
    (!args.is_empty()).then_some(Monitored { client, args })
}

/// The quoted arguments of a MONITOR line, unescaped (Redis writes them
/// with `sdscatrepr`: `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b`, `\xHH`).
fn parse_args(s: &str) -> Option<Vec<String>> {
    let mut args = Vec::new();
    let mut chars = s.bytes().peekable();
    loop {
        while chars.peek() == Some(&b' ') {
            chars.next();
        }
        match chars.next() {
            None => return Some(args),
            Some(b'"') => {}
            Some(_) => return None,
        }
        let mut arg = Vec::new();
        loop {
            match chars.next()? {
                b'"' => break,
                b'\\' => match chars.next()? {
                    b'n' => arg.push(b'\n'),
                    b'r' => arg.push(b'\r'),
                    b't' => arg.push(b'\t'),
                    b'a' => arg.push(7),
                    b'b' => arg.push(8),
                    b'x' => {
                        let hex = [chars.next()?, chars.next()?];
                        let hex = std::str::from_utf8(&hex).ok()?;
                        arg.push(u8::from_str_radix(hex, 16).ok()?);
                    }
                    other => arg.push(other),
                },
                other => arg.push(other),
            }
        }
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
}
