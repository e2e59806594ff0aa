//! `redlease leader NAME`: the leader of an election (its value, term and
//! time left) through the library's read-only read (for a vacancy, whose
//! version that read does not give, the observer's first item), and with
//! `--watch` every change through its observer, until SIGINT or SIGTERM.
//! Also the value `redlease elect` campaigns with.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use redlease::blocking::{Election, Locker};
use redlease::{Config, Leader, Observation, Version};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::cli::{ElectArgs, LeaderArgs};
use crate::connect::{open, TIMEOUT};
use crate::duration::human;
use crate::holder::hostname;
use crate::output::{json, print, Out};
use crate::{describe_error, describe_redis, is_auth_failure, Target};

/// Exit code of `leader` when nobody leads (0: someone does).
const VACANT: u8 = 1;
/// How long the one-shot `leader` waits for the observer's first item
/// (the library's read retries without end).
const FIRST_STATE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `--watch` asks whether Redis answers.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Shows (or watches) `args.name`'s leader; `Err` is the exit code of a
/// failure already reported.
pub(crate) fn leader(target: Target, args: &LeaderArgs, out: Out) -> Result<u8, u8> {
    let config = Config::new(target.namespace.clone())
        .command_timeout(TIMEOUT)
        .shutdown_timeout(TIMEOUT);
    let unavailable = |why: &dyn std::fmt::Display| target.unreadable(out, "election", why);
    let locker = Locker::new(target.client.clone(), config)
        .map(Arc::new)
        .map_err(|e| unavailable(&describe_error(&e)))?;
    let election = locker
        .election(&args.name)
        .map_err(|e| crate::usage_error("leader", e))?;
    if !args.watch {
        let (version, leader) = match election.leader() {
            Ok(Some(leader)) => (leader.version, Some(leader)),
            Ok(None) => match first_state(&locker, &election) {
                Some(first) => (first.version, first.leader),
                None => {
                    let waited = human(FIRST_STATE_TIMEOUT);
                    return Err(unavailable(&format_args!("no answer within {waited}")));
                }
            },
            Err(e) => return Err(unavailable(&describe_error(&e))),
        };
        print(&[&line(leader.as_ref(), version, None, args.json), b"\n"]);
        return Ok(if leader.is_some() { 0 } else { VACANT });
    }
    // Until SIGINT or SIGTERM: the locker's shutdown ends the observer.
    let mut signals =
        Signals::new([SIGINT, SIGTERM]).map_err(|e| crate::signals::setup_failed(out, &e))?;
    let stopper = locker.clone();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = stopper.shutdown();
        }
    });
    let _probe = probe(target.client.clone(), target.address(), out);
    for o in election.observe() {
        let text = line(o.leader.as_ref(), o.version, Some(o.resync), args.json);
        print(&[&text, b"\n"]);
    }
    Ok(0)
}

/// The election's state with its version, for a vacancy, whose version
/// the one-shot read does not give: the observer's first item (the same
/// read, as `--watch` shows it first). `None` when no item came within
/// [`FIRST_STATE_TIMEOUT`]: the locker is then shut down, which ends the
/// observer.
fn first_state(locker: &Arc<Locker>, election: &Election) -> Option<Observation> {
    let (got_it, wait) = mpsc::channel::<()>();
    let stopper = locker.clone();
    let watchdog = thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(FIRST_STATE_TIMEOUT) {
            let _ = stopper.shutdown();
        }
    });
    let first = election.observe().next();
    drop(got_it);
    let _ = watchdog.join();
    first
}

/// `--watch`'s word on Redis's health: the observer retries its failed
/// reads without a word, so a thread of its own PINGs Redis and says once
/// when it stops answering, and once when it is back. A refused PING
/// (NOPERM) is an answer too. Stops when the sender it returns is dropped.
fn probe(client: redis::Client, address: String, out: Out) -> mpsc::Sender<()> {
    let (stop, stopped) = mpsc::channel::<()>();
    thread::spawn(move || {
        let mut conn: Option<redis::Connection> = None;
        let mut down = false;
        loop {
            let answer = ping(&client, &mut conn);
            match (&answer, down) {
                (Err(why), false) => out.notice(format_args!(
                    "cannot reach Redis at {address} ({why}); still watching: the changes are \
                     shown once it answers"
                )),
                (Ok(()), true) => out.notice(format_args!("Redis at {address} answers again")),
                _ => {}
            }
            down = answer.is_err();
            if stopped.recv_timeout(PROBE_EVERY) != Err(RecvTimeoutError::Timeout) {
                return;
            }
        }
    });
    stop
}

/// One PING, on `conn` or on a new connection; `conn` keeps a connection
/// that answered. `Err` says why not, in words.
fn ping(client: &redis::Client, conn: &mut Option<redis::Connection>) -> Result<(), String> {
    let mut c = match conn.take() {
        Some(c) => c,
        None => open(client, TIMEOUT).map_err(|e| describe_redis(&e))?,
    };
    match redis::cmd("PING").query::<redis::Value>(&mut c) {
        Err(e) if e.code().is_none() || is_auth_failure(&e) => Err(describe_redis(&e)),
        _ => {
            *conn = Some(c);
            Ok(())
        }
    }
}

/// The largest value `elect` campaigns with (the library's default
/// `max_value_bytes`).
const MAX_VALUE_BYTES: usize = 4096;

/// The value `elect` campaigns with: `--value`, the contents of
/// `--value-file`, or `<hostname>:<pid>`. `Err` is a usage error's words
/// (never the value).
pub(crate) fn value_of(args: &ElectArgs) -> Result<Vec<u8>, String> {
    let value = match (&args.value, &args.value_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) => std::fs::read(path)
            .map_err(|e| format!("cannot read --value-file {}: {e}", path.display()))?,
        (None, None) => format!("{}:{}", hostname(), std::process::id()).into_bytes(),
    };
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "invalid value: is {} bytes long; at most {MAX_VALUE_BYTES} are allowed",
            value.len()
        ));
    }
    Ok(value)
}

/// One state as a line: text (`leader term T, version T.S, 4.2s left:
/// VALUE` or `no leader (version T.S)`) or a JSON object; `resync` only
/// when watching.
fn line(leader: Option<&Leader>, version: Version, resync: Option<bool>, json: bool) -> Vec<u8> {
    if json {
        return json_line(leader, version, resync).into_bytes();
    }
    let mark = match resync {
        Some(true) => " [resync]",
        _ => "",
    };
    match leader {
        Some(Leader {
            term,
            value,
            remaining,
            ..
        }) => {
            let left = remaining.map_or_else(String::new, |r| format!(", {} left", human(r)));
            let head = format!("leader term {term}, version {version}{left}{mark}: ");
            [head.as_bytes(), value].concat()
        }
        None => format!("no leader (version {version}){mark}").into_bytes(),
    }
}

fn json_line(leader: Option<&Leader>, version: Version, resync: Option<bool>) -> String {
    let value = match leader.map(|l| (std::str::from_utf8(&l.value), &l.value)) {
        None => "\"value\":null".to_owned(),
        Some((Ok(text), _)) => format!("\"value\":{}", json(text)),
        Some((Err(_), raw)) => format!("\"value_base64\":\"{}\"", STANDARD.encode(raw)),
    };
    let resync = resync.map_or_else(String::new, |resync| format!(",\"resync\":{resync}"));
    format!(
        "{{\"leader\":{},\"term\":{},\"version\":\"{version}\",\"remaining_ms\":{},{value}{resync}}}",
        leader.is_some(),
        json(&leader.map(|l| l.term.get())),
        json(&leader.and_then(|l| l.remaining).map(|r| r.as_millis()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlease::Fence;

    #[test]
    fn base64_follows_rfc_4648() {
        for (raw, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(STANDARD.encode(raw.as_bytes()), encoded);
        }
        assert_eq!(STANDARD.encode([0xff, 0xfe]), "//4=");
    }

    #[test]
    fn vacant_and_leading_states_print_as_text_and_json() {
        let v = Version::new(0, 0);
        assert_eq!(line(None, v, None, false), b"no leader (version 0.0)");
        assert_eq!(
            String::from_utf8(line(None, v, Some(true), true)).unwrap(),
            r#"{"leader":false,"term":null,"version":"0.0","remaining_ms":null,"value":null,"resync":true}"#
        );
        let mut leader = redlease_leader(7, b"host \"a\"");
        let text = String::from_utf8(line(Some(&leader), leader.version, None, false)).unwrap();
        assert!(text.starts_with("leader term 7, version 7.1") && text.ends_with(": host \"a\""));
        let json = String::from_utf8(line(Some(&leader), leader.version, None, true)).unwrap();
        assert!(json.contains(r#""value":"host \"a\"""#) && json.contains(r#""term":7"#));
        leader.value = vec![0xff];
        let json = String::from_utf8(line(Some(&leader), leader.version, None, true)).unwrap();
        assert!(json.contains(r#""value_base64":"/w==""#), "{json}");
        leader.value = b"a\nb\x01".to_vec();
        let json = String::from_utf8(line(Some(&leader), leader.version, None, true)).unwrap();
        assert!(json.contains(r#""value":"a\nb\u0001""#), "{json}");
    }

    /// A leader of term `term` at version `term.1`, 4.2 s left.
    fn redlease_leader(term: u64, value: &[u8]) -> Leader {
        let mut leader = Leader::new(Fence::new(term), value, Version::new(term, 1));
        leader.remaining = Some(Duration::from_millis(4200));
        leader
    }
}
