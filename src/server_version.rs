//! The connect-time check of the server's version. The scripts use commands
//! of Redis 7.0 (`PEXPIRE … GT`, `PEXPIREAT … NX`, `SET … NX GET`,
//! `EVAL_RO`), so an older server is refused at connect, before any
//! operation could fail half-way through a script.

use redis::Value;

use crate::error::{Error, Failure, Operation};

/// The oldest Redis every script runs on.
pub(crate) const NEEDED: (u32, u32) = (7, 0);

/// `EVAL "return redis.REDIS_VERSION" 0`: Redis 7.0 and newer (and Valkey)
/// give scripts the server's version; an older server answers nil. A
/// script, which every locker may run, rather than `INFO`, which a
/// least-privilege user may lack.
pub(crate) fn script_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg("return redis.REDIS_VERSION").arg(0);
    cmd
}

/// `INFO server`, asked only of a server too old to give scripts its
/// version, so that the error can name it.
pub(crate) fn info_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    cmd
}

/// What the script's reply says: `Ok(true)` when the server is too old to
/// tell its scripts its version (ask `INFO` which it is), `Ok(false)` when
/// it is new enough, or a user without `EVAL` (a read-only observer) could
/// not ask.
///
/// # Errors
///
/// `InvalidConfig` for a version older than [`NEEDED`]; the connect's
/// error for a failure to send.
pub(crate) fn check_script_reply(reply: Result<Value, Failure>) -> Result<bool, Error> {
    match reply {
        Ok(Value::Nil) => Ok(true),
        Ok(Value::BulkString(v)) => match parse(&String::from_utf8_lossy(&v)) {
            Some(found) if found < NEEDED => Err(too_old(Some(found))),
            _ => Ok(false),
        },
        Ok(_) => Ok(false),
        Err(Failure::Sent(e)) if is_refused(&e) => Ok(false),
        Err(Failure::NotSent(e)) => Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) => Err(Error::from_command(Operation::Connect, e)),
    }
}

/// The refusal of a server too old to give scripts its version, naming the
/// version `INFO server` reported, if it did.
pub(crate) fn refusal_from_info(reply: Result<Value, Failure>) -> Error {
    let found = reply
        .ok()
        .and_then(|v| redis::from_redis_value::<String>(v).ok())
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .and_then(|v| parse(v.trim()))
        });
    too_old(found)
}

/// `major.minor` of a version such as `7.0.15`.
fn parse(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts.next()?.trim().parse().ok()?;
    Some((major, minor))
}

fn too_old(found: Option<(u32, u32)>) -> Error {
    let (needed_major, needed_minor) = NEEDED;
    let found = match found {
        Some((major, minor)) => format!("the server is Redis {major}.{minor}"),
        None => format!("the server is older than Redis {needed_major}.{needed_minor}"),
    };
    Error::invalid_config(
        "url",
        format!("{found}; redlease needs Redis {needed_major}.{needed_minor} or newer"),
    )
}

fn is_refused(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("NOPERM")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Result<Value, Failure> {
        Ok(Value::BulkString(s.as_bytes().to_vec()))
    }

    #[test]
    fn versions_from_seven_on_pass_and_older_ones_are_refused_by_name() {
        assert!(!check_script_reply(bulk("7.0.15")).unwrap());
        assert!(!check_script_reply(bulk("8.2.1")).unwrap());
        let e = check_script_reply(bulk("6.9.0")).unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
        let text = e.to_string();
        assert!(
            text.contains("Redis 6.9") && text.contains("7.0 or newer"),
            "{text}"
        );
    }

    #[test]
    fn a_server_too_old_to_tell_its_scripts_is_asked_info_and_named() {
        assert!(check_script_reply(Ok(Value::Nil)).unwrap());
        let info = bulk("# Server\r\nredis_version:6.0.9\r\nredis_mode:standalone\r\n");
        let text = refusal_from_info(info).to_string();
        assert!(
            text.contains("Redis 6.0;") && text.contains("7.0 or newer"),
            "{text}"
        );
        let refused = Err(Failure::Sent(redis::RedisError::from((
            redis::ErrorKind::Extension,
            "NOPERM",
            "no info".to_owned(),
        ))));
        let text = refusal_from_info(refused).to_string();
        assert!(text.contains("older than Redis 7.0"), "{text}");
    }

    #[test]
    fn a_user_without_eval_is_not_refused() {
        let refused = Err(Failure::Sent(redis::RedisError::from((
            redis::ErrorKind::Extension,
            "NOPERM",
            "no eval".to_owned(),
        ))));
        assert!(!check_script_reply(refused).unwrap());
    }
}
