//! Fence verification for data kept in Redis: a compare-and-set write that
//! stores a value only if its fence is not lower than the last fence the
//! resource accepted.
//!
//! This is the check that turns a lease into mutual exclusion under pauses
//! and delays: a holder that lost its lease without knowing it still holds an
//! older fence, and its late write is rejected with [`StaleFence`].
//!
//! ```no_run
//! # fn f(lease: &redlease::blocking::Lease) -> Result<(), Box<dyn std::error::Error>> {
//! use redlease::fenced::{FencedStore, WriteError};
//!
//! let store = FencedStore::new("my-service");
//! let mut conn = redis::Client::open("redis://127.0.0.1:6379/0")?.get_connection()?;
//! match store.write(&mut conn, "report:2026-12-01", lease.fence(), "done") {
//!     Ok(()) => {}
//!     Err(WriteError::Stale(stale)) => eprintln!("a newer holder (fence {}) wrote already", stale.current),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! The same check works for any store that can compare and write in one
//! step, e.g. SQL:
//!
//! ```sql
//! UPDATE reports SET body = $1, last_fence = $2
//!  WHERE id = $3 AND last_fence <= $2;   -- 0 rows updated: stale fence
//! ```

use std::sync::LazyLock;

use redis::{ToRedisArgs, Value};
use sha2::{Digest, Sha256};

use crate::core::names::hex;
use crate::core::outcome::Fence;

/// KEYS = the resource's hash; ARGV = fence (decimal), value. Returns 1
/// when stored, or the stored fence when it is higher. Fences compare as
/// decimal strings (length first), exact for every `u64`.
const FENCED_WRITE_LUA: &str = r#"
local last = redis.call('HGET', KEYS[1], 'fence')
if last and (#last > #ARGV[1] or (#last == #ARGV[1] and last > ARGV[1])) then
  return last
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
"#;

static FENCED_WRITE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(FENCED_WRITE_LUA));

/// A write refused because the resource already accepted a higher fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fence: the resource already accepted fence {current}")]
pub struct StaleFence {
    /// The highest fence the resource accepted.
    pub current: Fence,
}

/// Why a fenced write did not store its value.
///
/// Its `Debug` shows the Redis error's kind and code only: the detail of a
/// redirect (`MOVED 1234 10.0.0.7:6379`) names a server address.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A newer holder already wrote.
    #[error(transparent)]
    Stale(StaleFence),
    /// Redis failed; the write may or may not have happened when the error
    /// is a timeout or a dropped connection.
    #[error("the fenced write failed in redis")]
    Redis(#[source] redis::RedisError),
}

impl std::fmt::Debug for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Stale(stale) => f.debug_tuple("Stale").field(stale).finish(),
            WriteError::Redis(e) => f
                .debug_struct("Redis")
                .field("kind", &e.kind())
                .field("code", &e.code())
                .finish(),
        }
    }
}

/// Fenced values in Redis, one hash per resource under a namespace:
/// `<ns>:fenced:{<sha256 of the resource>}` with fields `fence` and `value`.
#[derive(Debug, Clone)]
pub struct FencedStore {
    namespace: String,
}

impl FencedStore {
    /// A store whose names start with `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        FencedStore {
            namespace: namespace.into(),
        }
    }

    fn name(&self, resource: &str) -> String {
        let sha = hex(&Sha256::digest(resource.as_bytes()));
        format!("{}:fenced:{{{sha}}}", self.namespace)
    }

    /// Stores `value` for `resource` if `fence` is not lower than the last
    /// fence it accepted (equal fences are the same holder writing again).
    ///
    /// # Errors
    ///
    /// [`WriteError::Stale`] with the accepted fence; [`WriteError::Redis`].
    pub fn write(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        let reply = FENCED_WRITE
            .key(self.name(resource))
            .arg(fence.get())
            .arg(value)
            .invoke::<Value>(conn)
            .map_err(WriteError::Redis)?;
        verdict(&reply)
    }

    /// The async form of [`write`](Self::write).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    #[cfg(feature = "aio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aio")))]
    pub async fn write_async(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        resource: &str,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        let reply = FENCED_WRITE
            .key(self.name(resource))
            .arg(fence.get())
            .arg(value)
            .invoke_async::<Value>(conn)
            .await
            .map_err(WriteError::Redis)?;
        verdict(&reply)
    }

    /// The last accepted fence and value of `resource`, if any.
    ///
    /// # Errors
    ///
    /// The redis error.
    pub fn read(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
    ) -> redis::RedisResult<Option<(Fence, Vec<u8>)>> {
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(self.name(resource))
            .arg("fence")
            .arg("value")
            .query(conn)?;
        Ok(fence.zip(value).map(|(f, v)| (Fence::new(f), v)))
    }
}

fn verdict(reply: &Value) -> Result<(), WriteError> {
    match reply {
        Value::Int(1) => Ok(()),
        Value::BulkString(current) => {
            let current = std::str::from_utf8(current)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(u64::MAX);
            Err(WriteError::Stale(StaleFence {
                current: Fence::new(current),
            }))
        }
        _ => Err(WriteError::Redis(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply to the fenced write script",
        )))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_write_errors_debug_never_shows_the_address_in_a_redirect() {
        let moved = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::Moved),
            "MOVED",
            "1234 10.0.0.7:6379".to_string(),
        ));
        let shown = format!("{:?}", WriteError::Redis(moved));
        assert!(!shown.contains("10.0.0.7"), "{shown}");
        assert!(shown.contains("MOVED"), "{shown}");
    }

    use super::*;

    #[test]
    fn a_stored_higher_fence_makes_the_write_stale() {
        assert!(verdict(&Value::Int(1)).is_ok());
        match verdict(&Value::BulkString(b"42".to_vec())) {
            Err(WriteError::Stale(s)) => assert_eq!(s.current, Fence::new(42)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(verdict(&Value::Nil), Err(WriteError::Redis(_))));
    }

    #[test]
    fn names_hide_the_resource_inside_a_hash_tag() {
        let name = FencedStore::new("ns").name("secret-resource");
        assert!(name.starts_with("ns:fenced:{"));
        assert!(!name.contains("secret"));
    }
}
