//! `redlease status KEY`: the lock's remaining time and the fence counter,
//! read with plain Redis commands (`PTTL`, `GET`) on the stored names. The
//! lock's value (the owner token) is never read.

use std::io::Write;
use std::time::Duration;

use crate::cli::{exit, StatusArgs};
use crate::output::Out;
use crate::Target;

/// Connect, read and write timeout of the status query.
const TIMEOUT: Duration = Duration::from_secs(2);

/// What `status` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Status {
    held: bool,
    /// `None` when not held, or held without an expiry.
    remaining_ms: Option<u64>,
    /// `None` when the key was never locked.
    fence: Option<u64>,
}

pub(crate) fn status(target: Target, args: &StatusArgs, out: Out) -> u8 {
    let names = target.names(&args.key);
    let query = || -> redis::RedisResult<(i64, Option<String>)> {
        let mut conn = target.client.get_connection_with_timeout(TIMEOUT)?;
        conn.set_read_timeout(Some(TIMEOUT))?;
        conn.set_write_timeout(Some(TIMEOUT))?;
        redis::pipe()
            .atomic()
            .cmd("PTTL")
            .arg(&names.lock)
            .cmd("GET")
            .arg(&names.fence)
            .query(&mut conn)
    };
    let (pttl, fence) = match query() {
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
    let status = Status {
        held: pttl != -2,
        remaining_ms: u64::try_from(pttl).ok(),
        fence,
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
    0
}

fn opt(n: Option<u64>) -> String {
    n.map_or_else(|| "null".to_owned(), |n| n.to_string())
}

fn json(s: &Status) -> String {
    format!(
        "{{\"held\":{},\"remaining_ms\":{},\"fence\":{}}}",
        s.held,
        opt(s.remaining_ms),
        opt(s.fence)
    )
}

fn text(s: &Status) -> String {
    let held = if s.held { "yes" } else { "no" };
    let remaining = match (s.held, s.remaining_ms) {
        (false, _) => "-".to_owned(),
        (true, Some(ms)) => format!("{ms} ms"),
        (true, None) => "no expiry (not set by redlease)".to_owned(),
    };
    let fence = match s.fence {
        Some(f) => f.to_string(),
        None => "none (never locked)".to_owned(),
    };
    format!("held:      {held}\nremaining: {remaining}\nfence:     {fence}\n")
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
        };
        assert_eq!(
            json(&held),
            r#"{"held":true,"remaining_ms":1234,"fence":1700000000000001}"#
        );
        let free = Status {
            held: false,
            remaining_ms: None,
            fence: None,
        };
        assert_eq!(
            json(&free),
            r#"{"held":false,"remaining_ms":null,"fence":null}"#
        );
    }

    #[test]
    fn text_shapes() {
        let free = Status {
            held: false,
            remaining_ms: None,
            fence: Some(7),
        };
        assert_eq!(text(&free), "held:      no\nremaining: -\nfence:     7\n");
    }
}
