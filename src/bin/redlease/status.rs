//! `redlease status KEY`: the lock's remaining time, the fence counter and
//! the holder record, read with plain `PTTL` and `GET` on the stored names
//! (no MULTI/EXEC, so the README's least-privilege ACL is enough). The
//! lock's value (the owner token) is never read.

use std::io::Write;
use std::time::Duration;

use crate::cli::{exit, StatusArgs};
use crate::duration::human;
use crate::holder::{json_string, Holder};
use crate::output::Out;
use crate::Target;

/// Connect, read and write timeout of the status query.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Exit code of `status` for a free key (0 is held).
const FREE: u8 = 1;

/// What `status` found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    held: bool,
    /// `None` when not held, or held without an expiry.
    remaining_ms: Option<u64>,
    /// `None` when the key was never locked.
    fence: Option<u64>,
    /// Who holds it, when held and the holder recorded it for this grant.
    holder: Option<Holder>,
}

pub(crate) fn status(target: Target, args: &StatusArgs, out: Out) -> u8 {
    let names = target.names(&args.key);
    let query = || -> redis::RedisResult<(i64, Option<String>, Option<String>)> {
        let mut conn = target.client.get_connection_with_timeout(TIMEOUT)?;
        conn.set_read_timeout(Some(TIMEOUT))?;
        conn.set_write_timeout(Some(TIMEOUT))?;
        // Two commands in one round trip, not a transaction: the lock can
        // change in between, which the fence check below tolerates.
        let (pttl, fence): (i64, Option<String>) = redis::pipe()
            .cmd("PTTL")
            .arg(&names.lock)
            .cmd("GET")
            .arg(&names.fence)
            .query(&mut conn)?;
        // The record is optional: a user whose ACL lacks its name still
        // gets the rest.
        let holder = if pttl == -2 {
            None
        } else {
            redis::cmd("GET")
                .arg(&names.holder)
                .query::<Option<String>>(&mut conn)
                .ok()
                .flatten()
        };
        Ok((pttl, fence, holder))
    };
    let (pttl, fence, holder) = match query() {
        Ok(reply) => reply,
        Err(e) => {
            out.fatal(format_args!(
                "cannot read the lock's status from Redis at {}: {}",
                target.address(),
                crate::describe_redis(&e)
            ));
            return exit::UNAVAILABLE;
        }
    };
    let fence = match fence.map(|f| f.parse::<u64>()) {
        None => None,
        Some(Ok(f)) => Some(f),
        Some(Err(_)) => {
            out.fatal("the fence counter in Redis is not a decimal integer");
            return exit::UNAVAILABLE;
        }
    };
    // PTTL: -2 no such key, -1 no expiry, otherwise milliseconds left.
    let held = pttl != -2;
    let status = Status {
        held,
        remaining_ms: u64::try_from(pttl).ok(),
        fence,
        holder: holder
            .as_deref()
            .and_then(Holder::decode)
            .filter(|h| held && Some(h.fence) == fence),
    };
    let report = if args.json {
        json(&status) + "\n"
    } else {
        text(&status)
    };
    // A closed stdout (`| head -0`) is not worth a panic.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(report.as_bytes())
        .and_then(|()| stdout.flush());
    if status.held {
        0
    } else {
        FREE
    }
}

fn opt(n: Option<u64>) -> String {
    n.map_or_else(|| "null".to_owned(), |n| n.to_string())
}

fn json(s: &Status) -> String {
    let holder = s.holder.as_ref().map_or_else(
        || "null".to_owned(),
        |h| {
            format!(
                "{{\"host\":{},\"pid\":{},\"command\":{}}}",
                json_string(&h.host),
                h.pid,
                json_string(&h.command)
            )
        },
    );
    format!(
        "{{\"held\":{},\"remaining_ms\":{},\"fence\":{},\"holder\":{holder}}}",
        s.held,
        opt(s.remaining_ms),
        opt(s.fence)
    )
}

fn text(s: &Status) -> String {
    let held = if s.held { "yes" } else { "no" };
    let remaining = match (s.held, s.remaining_ms) {
        (false, _) => "-".to_owned(),
        (true, Some(ms)) => human(Duration::from_millis(ms)),
        (true, None) => "no expiry (not set by redlease)".to_owned(),
    };
    let fence = match s.fence {
        Some(f) => f.to_string(),
        None => "none (never locked)".to_owned(),
    };
    let mut report = format!("held:      {held}\nremaining: {remaining}\nfence:     {fence}\n");
    match (&s.holder, s.held) {
        (Some(h), _) => report.push_str(&format!(
            "holder:    pid {} on {} running {}\n",
            h.pid,
            if h.host.is_empty() { "?" } else { &h.host },
            h.command
        )),
        (None, true) => report.push_str("holder:    not recorded\n"),
        (None, false) => {}
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shapes() {
        let held = Status {
            held: true,
            remaining_ms: Some(1234),
            fence: Some(1_700_000_000_000_001),
            holder: Some(Holder {
                fence: 1_700_000_000_000_001,
                host: "web-1".into(),
                pid: 77,
                command: "backup".into(),
            }),
        };
        assert_eq!(
            json(&held),
            r#"{"held":true,"remaining_ms":1234,"fence":1700000000000001,"holder":{"host":"web-1","pid":77,"command":"backup"}}"#
        );
        let free = Status {
            held: false,
            remaining_ms: None,
            fence: None,
            holder: None,
        };
        assert_eq!(
            json(&free),
            r#"{"held":false,"remaining_ms":null,"fence":null,"holder":null}"#
        );
    }

    #[test]
    fn text_shapes() {
        let free = Status {
            held: false,
            remaining_ms: None,
            fence: Some(7),
            holder: None,
        };
        assert_eq!(text(&free), "held:      no\nremaining: -\nfence:     7\n");
        let held = Status {
            held: true,
            remaining_ms: Some(22_800),
            fence: Some(7),
            holder: None,
        };
        assert_eq!(
            text(&held),
            "held:      yes\nremaining: 22.8s\nfence:     7\nholder:    not recorded\n"
        );
    }
}
