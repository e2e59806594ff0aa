//! Fence verification for data kept in Redis: a compare-and-set write that
//! stores a value only if its fence is not lower than the last fence the
//! resource accepted. A lease's writes are checked against the resource's
//! high-water fence; a semaphore permit's against the high-water of its
//! (resource, slot), since each slot has fences of its own. A read-write
//! lease's writer writes with its fence; a write derived from a read (a
//! cache fill) carries the read's epoch and is refused once a newer writer
//! committed ([`FencedStore::write_derived`]).
//!
//! A holder's write with a fence *equal* to the high-water is the same
//! holder writing again and is accepted, unless a derived write at that
//! same number was accepted since: a reader gets epoch `f` only after
//! writer `f`'s lease ended, so from then on a write with fence `f` comes
//! from a writer (or lock holder) past its lease and is stale. Derived
//! writes at the high-water stay accepted (many readers share an epoch).
//!
//! # What is stored
//!
//! One hash per resource, `<ns>:fenced:{<sha256 of the resource>}`:
//!
//! | field | holds |
//! |---|---|
//! | `fence` | the high-water: the highest fence (or epoch) accepted by [`write`](FencedStore::write) and [`write_derived`](FencedStore::write_derived) |
//! | `value` | the value of the last accepted write |
//! | `derived` | the epoch of the last accepted derived write; equal to `fence` when the last write at the high-water was derived, which makes a holder write at that fence stale |
//! | `fence:<slot>`, `value:<slot>` | a semaphore slot's high-water and value ([`write_permit`](FencedStore::write_permit)); a slot has no derived writes, so its `derived:<slot>` is never written and a permit's write is checked against its slot's fence alone |
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

/// KEYS = the resource's hash; ARGV = fence (decimal), value, the
/// register's fence, value and derived fields (`fence`/`value`/`derived`
/// for a lease, `fence:<slot>`/`value:<slot>`/`derived:<slot>` for a
/// permit), the mode (`holder` or `derived`).
///
/// A derived write is stored if its epoch is not below the stored fence,
/// and records its epoch in the derived field. A holder's write is stored
/// if its fence is above the stored fence, or equal to it while the derived
/// field is not (no derived write at that number). Returns 1 when stored,
/// or the stored fence when the write is stale. Fences compare as decimal
/// strings (length first), exact for every `u64`; equal numbers are equal
/// strings (no leading zeros). Replay-safe: a replayed call stores the same
/// fields again and gets the same verdict, except a holder's write replayed
/// after a derived write at its fence, which is stale by then (that
/// holder's lease had ended).
const FENCED_WRITE_LUA: &str = r#"
local last = redis.call('HGET', KEYS[1], ARGV[3])
if last then
  if #last > #ARGV[1] or (#last == #ARGV[1] and last > ARGV[1]) then
    return last
  end
  if ARGV[6] == 'holder' and last == ARGV[1]
      and redis.call('HGET', KEYS[1], ARGV[5]) == last then
    return last
  end
end
if ARGV[6] == 'derived' then
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[1], ARGV[4], ARGV[2], ARGV[5], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[1], ARGV[4], ARGV[2])
end
return 1
"#;

/// Who writes: a holder with its fence (a lock's, a writer's, a permit's),
/// or a reader with its epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Holder,
    Derived,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Holder => "holder",
            Mode::Derived => "derived",
        }
    }
}

/// The hash fields of one register, a lease's or a slot's: its fence, its
/// value and the epoch of its last derived write.
struct Fields {
    fence: String,
    value: String,
    derived: String,
}

fn fields(slot: Option<u32>) -> Fields {
    match slot {
        None => Fields {
            fence: "fence".into(),
            value: "value".into(),
            derived: "derived".into(),
        },
        Some(slot) => Fields {
            fence: format!("fence:{slot}"),
            value: format!("value:{slot}"),
            derived: format!("derived:{slot}"),
        },
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
/// for lease writes (and `derived`, the epoch of the last derived write),
/// `fence:<slot>` and `value:<slot>` for permit writes (see the [module
/// docs](self#what-is-stored)).
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

    /// Stores `value` for `resource` if `fence` is higher than the last
    /// fence it accepted, or equal to it (the same holder writing again)
    /// while no [derived write](Self::write_derived) at that number was
    /// accepted since: a reader's epoch is `fence` only once this holder's
    /// lease ended, so its write would overwrite data derived after it.
    ///
    /// # Errors
    ///
    /// [`WriteError::Stale`] with the accepted fence (equal to `fence` when
    /// a derived write at `fence` refused it); [`WriteError::Redis`].
    pub fn write(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        self.write_as(conn, resource, None, Mode::Holder, fence, value)
    }

    /// Stores `value` derived from a read (a cache fill, a materialised
    /// view) for `resource` if the read's `epoch` is not lower than the
    /// last fence `resource` accepted: a read that started before a newer
    /// writer committed cannot overwrite that writer's data. Writers of the
    /// same read-write lease write with [`write`](Self::write) and their
    /// fence, which is above every epoch handed out before their grant.
    /// Once a derived write at epoch `f` is accepted, writes with fence `f`
    /// (a writer past its lease) are refused; derived writes at `f` are not.
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
        // epoch ≥ the high-water, whoever wrote at it.
        self.write_as(conn, resource, None, Mode::Derived, epoch, value)
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
        self.write_as(conn, resource, Some(slot), Mode::Holder, fence, value)
    }

    fn write_as(
        &self,
        conn: &mut impl redis::ConnectionLike,
        resource: &str,
        slot: Option<u32>,
        mode: Mode,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        let invocation = self.invocation(resource, slot, mode, fence, value);
        verdict(
            &invocation
                .invoke::<Value>(conn)
                .map_err(WriteError::Redis)?,
        )
    }

    /// The write script's call for (`resource`, `slot`) at `fence` by
    /// `mode`, the same whichever front end sends it.
    fn invocation(
        &self,
        resource: &str,
        slot: Option<u32>,
        mode: Mode,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> redis::ScriptInvocation<'static> {
        let fields = fields(slot);
        let mut invocation = FENCED_WRITE.key(self.name(resource));
        invocation
            .arg(fence.get())
            .arg(value)
            .arg(fields.fence)
            .arg(fields.value)
            .arg(fields.derived)
            .arg(mode.arg());
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
        self.write_as_async(conn, resource, None, Mode::Holder, fence, value)
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
        self.write_as_async(conn, resource, None, Mode::Derived, epoch, value)
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
        self.write_as_async(conn, resource, Some(slot), Mode::Holder, fence, value)
            .await
    }

    #[cfg(feature = "aio")]
    async fn write_as_async(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        resource: &str,
        slot: Option<u32>,
        mode: Mode,
        fence: Fence,
        value: impl ToRedisArgs,
    ) -> Result<(), WriteError> {
        let invocation = self.invocation(resource, slot, mode, fence, value);
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
        let fields = fields(slot);
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(self.name(resource))
            .arg(fields.fence)
            .arg(fields.value)
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
