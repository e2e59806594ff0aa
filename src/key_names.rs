//! The connect-time key-names marker (docs/PROTOCOL.md): which naming
//! scheme the lockers of a namespace use. `Config::key_hash_tags` renames
//! every tagged key, so two lockers of one namespace with different
//! settings would lock one key under two names: two holders. The first
//! locker to connect records its scheme in `<ns>:key-names` (never
//! expires); every later one compares and refuses to connect on a
//! mismatch.
//!
//! ```text
//!  GET <ns>:key-names ── ours ───────────────▶ connected (one command)
//!        │ ── the other scheme, or unknown ─▶ InvalidConfig
//!        │ nil
//!        ▼
//!  SET <ns>:key-names <ours> NX GET ── nil or ours ─▶ connected
//!        └── the other scheme (a racing locker) ────▶ InvalidConfig
//! ```
//!
//! Refused (`NOPERM`: an ACL without `~<ns>:key-names`, or a read-only
//! user finding no marker): a locker with the default names logs
//! `KEY_NAMES_UNCHECKED` once and connects, as every locker before the
//! marker did; a locker with `key_hash_tags(true)` fails with
//! `InvalidConfig`, since nothing would stop a default locker beside it.

use redis::Value;

use crate::error::{describe, is_auth_failure, is_server_reply, Error, Failure, Operation};

/// The marker's value for the default names (docs/PROTOCOL.md §1).
const PLAIN: &[u8] = b"plain";
/// The marker's value with `Config::key_hash_tags(true)`.
const TAGGED: &[u8] = b"tagged";
/// The option a mismatch is reported under.
const OPTION: &str = "key_hash_tags";

/// A locker's naming scheme and the name of its namespace's marker.
#[derive(Debug, Clone)]
pub(crate) struct Marker {
    name: String,
    tagged: bool,
}

impl Marker {
    pub(crate) fn new(namespace: &str, tagged: bool) -> Self {
        Marker {
            name: format!("{namespace}:key-names"),
            tagged,
        }
    }

    fn ours(&self) -> &'static [u8] {
        if self.tagged {
            TAGGED
        } else {
            PLAIN
        }
    }

    /// `GET <ns>:key-names`: what the namespace's lockers recorded.
    pub(crate) fn get_cmd(&self) -> redis::Cmd {
        redis::cmd("GET").arg(&self.name).take()
    }

    /// `SET <ns>:key-names <scheme> NX GET`: records this locker's scheme
    /// unless another locker did first, and answers what was there.
    pub(crate) fn set_cmd(&self) -> redis::Cmd {
        redis::cmd("SET")
            .arg(&self.name)
            .arg(self.ours())
            .arg("NX")
            .arg("GET")
            .take()
    }

    /// The verdict on the reply to [`get_cmd`](Self::get_cmd), comparing
    /// the recorded scheme with ours: `true` when none is recorded yet, so
    /// ours is to be recorded ([`set_cmd`](Self::set_cmd)); `false` when it
    /// is ours or could not be read (logged, for a default locker): connected;
    /// an error on a mismatch.
    pub(crate) fn check_get(&self, reply: Result<Value, Failure>) -> Result<bool, Error> {
        match reply {
            Ok(Value::Nil) => Ok(true),
            Ok(Value::BulkString(scheme)) if scheme == self.ours() => Ok(false),
            Ok(Value::BulkString(scheme)) if scheme == PLAIN || scheme == TAGGED => {
                Err(self.mismatch())
            }
            Ok(_) => Err(Error::invalid_config(
                OPTION,
                "the namespace's key-names marker holds a naming scheme this version does not \
                 know (written by a newer redlease, or not by redlease); every locker of a \
                 namespace must name its keys alike",
            )),
            Err(Failure::Sent(e)) if is_auth_failure(&e) => Err(Error::from_connect(e)),
            Err(Failure::Sent(e)) if is_server_reply(&e) => self.unchecked(&e).map(|()| false),
            Err(failure) => Err(failure.into_error(Operation::Connect)),
        }
    }

    /// The verdict on the reply to [`set_cmd`](Self::set_cmd): `nil` (ours
    /// is now recorded) or the scheme a racing locker recorded first.
    pub(crate) fn check_set(&self, reply: Result<Value, Failure>) -> Result<(), Error> {
        self.check_get(reply).map(drop)
    }

    fn mismatch(&self) -> Error {
        let (ours, theirs) = if self.tagged {
            ("with", "without")
        } else {
            ("without", "with")
        };
        Error::invalid_config(
            OPTION,
            format!(
                "this locker names keys {ours} their hash tags (key_hash_tags({})), but the \
                 namespace's key-names marker says its lockers name them {theirs}; every locker \
                 of a namespace must use the same key_hash_tags setting",
                self.tagged
            ),
        )
    }

    /// Redis refused the marker: a default locker logs it and connects; a
    /// tagged one cannot protect its names and fails.
    fn unchecked(&self, e: &redis::RedisError) -> Result<(), Error> {
        if self.tagged {
            return Err(Error::invalid_config(
                OPTION,
                format!(
                    "key_hash_tags(true) needs the namespace's key-names marker, which Redis \
                     refused ({}); grant the ACL key pattern ~<namespace>:key-names with +get \
                     +set",
                    describe(e)
                ),
            ));
        }
        log::warn!(
            target: "redlease",
            "KEY_NAMES_UNCHECKED: Redis refused the namespace's key-names marker ({}); a locker \
             of this namespace with Config::key_hash_tags(true) would not be noticed; grant the \
             ACL key pattern ~<namespace>:key-names with +get +set",
            describe(e)
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Result<Value, Failure> {
        Ok(Value::BulkString(s.as_bytes().to_vec()))
    }

    fn refused(code: &str) -> Result<Value, Failure> {
        Err(Failure::Sent(redis::RedisError::from((
            redis::ErrorKind::Extension,
            "refused",
            code.to_owned(),
        ))))
    }

    #[test]
    fn a_missing_marker_is_recorded_and_a_matching_one_agrees() {
        for tagged in [false, true] {
            let marker = Marker::new("ns", tagged);
            let ours = if tagged { "tagged" } else { "plain" };
            assert!(marker.check_get(Ok(Value::Nil)).unwrap(), "to be recorded");
            assert!(!marker.check_get(bulk(ours)).unwrap(), "agreed");
            marker.check_set(Ok(Value::Nil)).unwrap();
            marker.check_set(bulk(ours)).unwrap();
        }
    }

    #[test]
    fn the_other_scheme_or_an_unknown_one_is_invalid_config() {
        for (tagged, theirs) in [(false, "tagged"), (true, "plain")] {
            let marker = Marker::new("ns", tagged);
            for e in [
                marker.check_get(bulk(theirs)).unwrap_err(),
                marker.check_set(bulk(theirs)).unwrap_err(),
                marker.check_get(bulk("v2")).unwrap_err(),
                marker.check_get(Ok(Value::Int(1))).unwrap_err(),
            ] {
                assert_eq!(e.code(), "INVALID_CONFIG");
                assert!(!e.to_string().contains("ns:"), "{e}");
            }
        }
    }

    #[test]
    fn a_refused_marker_fails_only_a_tagged_locker() {
        assert!(!Marker::new("ns", false)
            .check_get(refused("NOPERM"))
            .unwrap());
        let e = Marker::new("ns", true)
            .check_get(refused("NOPERM"))
            .unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
        assert!(e.to_string().contains("~<namespace>:key-names"), "{e}");
    }

    #[test]
    fn the_commands_name_the_namespaces_marker() {
        let marker = Marker::new("svc", true);
        let packed = String::from_utf8_lossy(&marker.set_cmd().get_packed_command()).into_owned();
        assert!(packed.contains("svc:key-names") && packed.contains("tagged"));
        assert!(packed.contains("NX") && packed.ends_with("GET\r\n"));
    }
}
