//! The connect-time check of the server's version. The scripts use commands
//! of Redis 7.0 (`PEXPIRE … GT`, `PEXPIREAT … NX`, `SET … NX GET`,
//! `EVAL_RO`), so an older server is refused at connect, before any
//! operation could fail half-way through a script.

use redis::Value;

use crate::config::ensure;
use crate::error::{Error, Failure, Operation};

/// The oldest Redis every script runs on.
pub(crate) const NEEDED: (u32, u32) = (7, 0);

/// `INFO server`, which every least-privilege user the docs describe may
/// send (lockers and observers have `+info` for the eviction check).
pub(crate) fn info_cmd() -> redis::Cmd {
    redis::cmd("INFO").arg("server").take()
}

/// Checks the `INFO server` reply: a `redis_version` (Valkey reports its
/// Redis compatibility there too) older than [`NEEDED`] is refused. A user
/// refused `INFO`, or a reply without a version, is not checked.
///
/// # Errors
///
/// `InvalidConfig` naming the version found and the one needed; the
/// connect's error for a failure to send.
pub(crate) fn check_info_reply(reply: Result<Value, Failure>) -> Result<(), Error> {
    let info = match reply {
        Ok(value) => redis::from_redis_value::<String>(value).unwrap_or_default(),
        Err(Failure::Sent(e)) if is_refused(&e) => return Ok(()),
        Err(failure) => return Err(failure.into_error(Operation::Connect)),
    };
    // A version that cannot be read passes.
    let (major, minor) = version_in(&info).unwrap_or(NEEDED);
    let (needed_major, needed_minor) = NEEDED;
    ensure(
        (major, minor) >= NEEDED,
        "url",
        format!(
            "the server is Redis {major}.{minor}; redlease needs Redis \
             {needed_major}.{needed_minor} or newer"
        ),
    )
}

/// `major.minor` of the `redis_version:` line.
fn version_in(info: &str) -> Option<(u32, u32)> {
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))?;
    let mut parts = version.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn is_refused(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("NOPERM")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(version: &str) -> Result<Value, Failure> {
        let text = format!("# Server\r\nredis_version:{version}\r\nredis_mode:standalone\r\n");
        Ok(Value::BulkString(text.into_bytes()))
    }

    #[test]
    fn versions_from_seven_on_pass_and_older_ones_are_refused_by_name() {
        assert!(check_info_reply(info("7.0.15")).is_ok());
        assert!(
            check_info_reply(info("7.2.4")).is_ok(),
            "Valkey 8 reports 7.2.4"
        );
        assert!(check_info_reply(info("8.2.1")).is_ok());
        let e = check_info_reply(info("6.2.14")).unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
        let text = e.to_string();
        assert!(
            text.contains("the server is Redis 6.2;") && text.contains("7.0 or newer"),
            "{text}"
        );
    }

    #[test]
    fn a_user_without_info_or_a_reply_without_a_version_is_not_refused() {
        let refused = Err(Failure::Sent(redis::RedisError::from((
            redis::ErrorKind::Extension,
            "NOPERM",
            "no info".to_owned(),
        ))));
        assert!(check_info_reply(refused).is_ok());
        assert!(check_info_reply(Ok(Value::BulkString(b"# Server\r\n".to_vec()))).is_ok());
    }
}
