//! Fence verification for data kept in Redis: a compare-and-set write that
//! stores a value only if its fence is not lower than the last fence the
//! resource accepted. A lease's writes are checked against the resource's
//! high-water fence; a semaphore permit's against the high-water of its
//! (resource, slot), since each slot has fences of its own. A read-write
//! lease's writer writes with its fence; a write derived from a read (a
//! cache fill) carries the read's epoch and is refused once a newer writer
//! committed ([`FencedStore::write_derived`]).
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
//! A permit writes with its slot ([`FencedStore::write_permit`]): holders
//! of other slots write beside it, while a stale holder of the same slot is
//! refused.
//!
//! ```no_run
//! # fn f(permit: &redlease::blocking::Permit) -> Result<(), Box<dyn std::error::Error>> {
//! use redlease::fenced::FencedStore;
//!
//! let store = FencedStore::new("my-service");
//! let mut conn = redis::Client::open("redis://127.0.0.1:6379/0")?.get_connection()?;
//! store.write_permit(&mut conn, "db-pool", permit.slot(), permit.fence(), "batch 7")?;
//! # Ok(()) }
//! ```
//!
//! The same check works for any store that can compare and write in one
//! step, e.g. SQL (for a permit, keep `last_fence` per slot):
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

/// KEYS = the resource's hash; ARGV = fence (decimal), value, the fence
/// field, the value field (`fence`/`value` for a lease, `fence:<slot>`/
/// `value:<slot>` for a permit). Returns 1 when stored, or the stored fence
/// when it is higher. Fences compare as decimal strings (length first),
/// exact for every `u64`.
const FENCED_WRITE_LUA: &str = r#"
local last = redis.call('HGET', KEYS[1], ARGV[3])
if last and (#last > #ARGV[1] or (#last == #ARGV[1] and last > ARGV[1])) then
  return last
end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[1], ARGV[4], ARGV[2])
return 1
"#;

/// The hash fields of one writer's register: a lease's, or a slot's.
fn fields(slot: Option<u32>) -> (String, String) {
    match slot {
        None => ("fence".into(), "value".into()),
        Some(slot) => (format!("fence:{slot}"), format!("value:{slot}")),
    }
}

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
/// `<ns>:fenced:{<sha256 of the resource>}` with fields `fence` and `value`
/// for lease writes, `fence:<slot>` and `value:<slot>` for permit writes.
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
        self.write_as(conn, resource, None, fence, value)
    }

    /// Stores `value` derived from a read (a cache fill, a materialised
    /// view) for `resource` if the read's `epoch` is not lower than the
    /// last fence `resource` accepted: a read that started before a newer
    /// writer committed cannot overwrite that writer's data. Writers of the
    /// same read-write lease write with [`write`](Self::write) and their
    /// fence, which is above every epoch handed out before their grant.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(read: &redlease::blocking::ReadLease, conn: &mut redis::Connection) -> Result<(), Box<dyn std::error::Error>> {
    /// use redlease::fenced::{FencedStore, WriteError};
    ///
    /// let cache = FencedStore::new("my-service");
    /// match cache.write_derived(conn, "doc:7:html", read.epoch(), "<p>rendered</p>") {
    ///     Ok(()) | Err(WriteError::Stale(_)) => {} // stale: a newer save won, drop the fill
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn write_derived(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        epoch: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        // The same comparison as a writer's: epoch ≥ the high-water.
        self.write_as(conn, resource, None, epoch, value)
    }

    /// Stores `value` for slot `slot` of `resource` if `fence` is not lower
    /// than the last fence that slot accepted: the write of a semaphore
    /// permit, checked against the (resource, slot) high-water.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    pub fn write_permit(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        slot: u32,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        self.write_as(conn, resource, Some(slot), fence, value)
    }

    fn write_as(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        slot: Option<u32>,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        let invocation = self.invocation(resource, slot, fence, value);
        verdict(
            &invocation
                .invoke::<Value>(conn)
                .map_err(WriteError::Redis)?,
        )
    }

    /// The write script's call for (`resource`, `slot`) at `fence`, the
    /// same whichever front end sends it.
    fn invocation(
        &self,
        resource: &str,
        slot: Option<u32>,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> redis::ScriptInvocation<'static> {
        let (fence_field, value_field) = fields(slot);
        let mut invocation = FENCED_WRITE.key(self.name(resource));
        invocation
            .arg(fence.get())
            .arg(value)
            .arg(fence_field)
            .arg(value_field);
        invocation
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
        self.write_as_async(conn, resource, None, fence, value)
            .await
    }

    /// The async form of [`write_derived`](Self::write_derived).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    #[cfg(feature = "aio")]
    pub async fn write_derived_async(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        resource: &str,
        epoch: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        self.write_as_async(conn, resource, None, epoch, value)
            .await
    }

    /// The async form of [`write_permit`](Self::write_permit).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    #[cfg(feature = "aio")]
    pub async fn write_permit_async(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        resource: &str,
        slot: u32,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        self.write_as_async(conn, resource, Some(slot), fence, value)
            .await
    }

    #[cfg(feature = "aio")]
    async fn write_as_async(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        resource: &str,
        slot: Option<u32>,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        let invocation = self.invocation(resource, slot, fence, value);
        let reply = invocation.invoke_async::<Value>(conn).await;
        verdict(&reply.map_err(WriteError::Redis)?)
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
        self.read_as(conn, resource, None)
    }

    /// The last accepted fence and value of slot `slot` of `resource`.
    ///
    /// # Errors
    ///
    /// The redis error.
    pub fn read_permit(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        slot: u32,
    ) -> redis::RedisResult<Option<(Fence, Vec<u8>)>> {
        self.read_as(conn, resource, Some(slot))
    }

    fn read_as(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        slot: Option<u32>,
    ) -> redis::RedisResult<Option<(Fence, Vec<u8>)>> {
        let (fence_field, value_field) = fields(slot);
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(self.name(resource))
            .arg(fence_field)
            .arg(value_field)
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
