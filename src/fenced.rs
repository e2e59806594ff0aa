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
//! One hash per resource, `<ns>:fenced:{<sha256 of the resource>}` (with
//! [`FencedStore::key_hash_tags`], a resource with a Redis hash tag `{t}`
//! is `<ns>:fenced:{<sha256 of t>}:<sha256 of the resource>`):
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
//! A multi-key lease writes all its resources at once, all or none
//! ([`FencedStore::write_all`]): one stale fence refuses the batch.
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
//!
//! `examples/postgres_fencing.rs` does it with PostgreSQL: a `BIGINT`
//! column (`i64::try_from(fence.get())`), the first write creating the
//! row, and `SELECT ... FOR UPDATE` then `UPDATE` in one transaction (or
//! one conditional upsert); README's "Fencing the protected resource"
//! adds the semaphore's and the read-write lease's variants.

use std::sync::LazyLock;

use redis::{ToRedisArgs, Value};

use crate::core::multi::first_duplicate;
use crate::core::names::KeyId;
use crate::core::outcome::Fence;
use crate::core::script::lua;

/// The fenced store's compare-and-set write.
/// Its KEYS, ARGV and replies: `src/scripts/fenced_write.lua`.
const FENCED_WRITE_LUA: &str = lua!("fenced_write");

/// The most resources one [`FencedStore::write_all`] takes: as many keys
/// as a multi-key lease holds.
pub const MAX_WRITES: usize = crate::core::multi::MAX_KEYS;

/// Who writes, the script's first argument: a holder with its fence (a
/// lock's, a writer's, a permit's), or a reader with its epoch.
type Mode = &'static str;
const HOLDER: Mode = "holder";
const DERIVED: Mode = "derived";

/// The hash fields of one register, a lease's or a slot's: its fence, its
/// value and the epoch of its last derived write.
fn fields(slot: Option<u32>) -> [String; 3] {
    let suffix = slot.map(|slot| format!(":{slot}")).unwrap_or_default();
    ["fence", "value", "derived"].map(|field| format!("{field}{suffix}"))
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
    /// A [`write_all`](FencedStore::write_all) refused whole: the write at
    /// `index` (0-based, in the order given) is stale, and nothing was
    /// stored.
    #[error("the fenced writes were refused whole: the write at index {index} is stale: {stale}")]
    StaleAt {
        /// The position of the (first) stale write.
        index: usize,
        /// What its resource accepted.
        stale: StaleFence,
    },
    /// The writes were refused before anything was sent: none, more than
    /// [`MAX_WRITES`], or one resource twice. The reason names positions,
    /// never a resource.
    #[error("invalid fenced write: {reason}")]
    Invalid {
        /// Why.
        reason: String,
    },
    /// Redis failed; the write may or may not have happened when the error
    /// is a timeout or a dropped connection.
    #[error("the fenced write failed in redis")]
    Redis(#[source] redis::RedisError),
}

impl std::fmt::Debug for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Stale(stale) => f.debug_tuple("Stale").field(stale).finish(),
            WriteError::StaleAt { index, stale } => f
                .debug_struct("StaleAt")
                .field("index", index)
                .field("stale", stale)
                .finish(),
            WriteError::Invalid { reason } => {
                f.debug_struct("Invalid").field("reason", reason).finish()
            }
            WriteError::Redis(e) => f
                .debug_struct("Redis")
                .field("kind", &e.kind())
                .field("code", &e.code())
                .finish(),
        }
    }
}

/// The writes, each as a blocking call and (feature `aio`) an async one
/// that sends the same script call: `name / name_async(&self, args) =>
/// invocation, all`, where `all` is [`verdict`]'s.
macro_rules! writes {
    ($(
        $(#[$doc:meta])*
        $name:ident / $name_async:ident $(<$($g:ident: $b:path),+>)?
            (&$self:ident, $($arg:ident: $ty:ty),+) => $invocation:expr, $all:expr;
    )+) => {$(
        $(#[$doc])*
        pub fn $name$(<$($g: $b),+>)?(
            &$self,
            conn: &mut impl redis::ConnectionLike,
            $($arg: $ty),+
        ) -> Result<(), WriteError> {
            verdict($invocation.invoke(conn), $all)
        }

        #[doc = concat!(
            "The async form of [`", stringify!($name), "`](Self::", stringify!($name), ")."
        )]
        ///
        /// # Errors
        ///
        #[doc = concat!("As [`", stringify!($name), "`](Self::", stringify!($name), ").")]
        #[cfg(feature = "aio")]
        #[cfg_attr(docsrs, doc(cfg(feature = "aio")))]
        pub async fn $name_async$(<$($g: $b),+>)?(
            &$self,
            conn: &mut impl redis::aio::ConnectionLike,
            $($arg: $ty),+
        ) -> Result<(), WriteError> {
            verdict($invocation.invoke_async(conn).await, $all)
        }
    )+};
}

/// Fenced values in Redis, one hash per resource under a namespace:
/// `<ns>:fenced:{<sha256 of the resource>}` with fields `fence` and `value`
/// for lease writes (and `derived`, the epoch of the last derived write),
/// `fence:<slot>` and `value:<slot>` for permit writes (see the [module
/// docs](self#what-is-stored)).
#[derive(Debug, Clone)]
pub struct FencedStore {
    namespace: String,
    key_hash_tags: bool,
}

impl FencedStore {
    /// A store whose names start with `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        FencedStore {
            namespace: namespace.into(),
            key_hash_tags: false,
        }
    }

    crate::config::setters! {
        /// Whether a resource's Redis hash tag decides where its hash is
        /// stored, as [`Config::key_hash_tags`](crate::Config::key_hash_tags)
        /// does for a lock: `<ns>:fenced:{<sha(tag)>}:<sha(resource)>`, so the
        /// resources of one tag share a Redis Cluster slot and one
        /// [`write_all`](Self::write_all) can write them. Default off. It
        /// renames tagged resources: every writer of a store must use one
        /// setting.
        key_hash_tags(on: bool) => key_hash_tags = on;
    }

    fn name(&self, resource: &str) -> String {
        let id = KeyId::named(resource, self.key_hash_tags);
        format!("{}:fenced:{}", self.namespace, id.braced())
    }

    writes! {
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
        write / write_async(&self, resource: &str, fence: Fence, value: impl ToRedisArgs)
            => self.invocation(HOLDER, [(resource, None, fence, value)]), false;

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
        write_derived / write_derived_async(
            &self, resource: &str, epoch: Fence, value: impl ToRedisArgs
        ) => // epoch ≥ the high-water, whoever wrote at it.
            self.invocation(DERIVED, [(resource, None, epoch, value)]), false;

        /// Stores `value` for slot `slot` of `resource` if `fence` is not lower
        /// than the last fence that slot accepted: the write of a semaphore
        /// permit, checked against the (resource, slot) high-water.
        ///
        /// # Errors
        ///
        /// As [`write`](Self::write).
        write_permit / write_permit_async(
            &self, resource: &str, slot: u32, fence: Fence, value: impl ToRedisArgs
        ) => self.invocation(HOLDER, [(resource, Some(slot), fence, value)]), false;

        /// Stores every write of a multi-key lease, `(resource, fence,
        /// value)`, if each fence passes [`write`](Self::write)'s check against
        /// its resource: one script checks them all before it stores any, so
        /// the values are stored all or none. Typically the fences are a
        /// [`MultiLease`](crate::blocking::MultiLease)'s, `lease.fence_of(key)`
        /// for each resource it guards.
        ///
        /// On Redis Cluster the resources' hashes must share a slot: build the
        /// store with [`key_hash_tags(true)`](Self::key_hash_tags) and give the
        /// resources one hash tag (else Redis answers `CROSSSLOT`).
        ///
        /// # Errors
        ///
        /// [`WriteError::StaleAt`] naming the first stale write's position and
        /// its resource's accepted fence (nothing stored);
        /// [`WriteError::Invalid`] for no writes, more than [`MAX_WRITES`], or a
        /// resource given twice (nothing sent); [`WriteError::Redis`].
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # fn f(lease: &redlease::blocking::MultiLease, conn: &mut redis::Connection) -> Result<(), Box<dyn std::error::Error>> {
        /// use redlease::fenced::FencedStore;
        ///
        /// let store = FencedStore::new("my-service");
        /// let fence = |key| lease.fence_of(key).ok_or("not a key of the lease");
        /// store.write_all(conn, &[
        ///     ("acct:7:in", fence("acct:7:in")?, "-40"),
        ///     ("acct:9:in", fence("acct:9:in")?, "+40"),
        /// ])?;
        /// # Ok(()) }
        /// ```
        write_all / write_all_async<R: AsRef<str>, V: ToRedisArgs>(&self, writes: &[(R, Fence, V)])
            => self.invocation_all(writes)?, true;
    }

    /// The write script's call for `writes`, each (resource, slot, fence or
    /// epoch, value), by `mode`: the same whichever front end sends it.
    fn invocation<'a, V: ToRedisArgs>(
        &self,
        mode: Mode,
        writes: impl IntoIterator<Item = (&'a str, Option<u32>, Fence, V)>,
    ) -> redis::ScriptInvocation<'static> {
        let mut invocation = FENCED_WRITE.prepare_invoke();
        invocation.arg(mode);
        for (resource, slot, fence, value) in writes {
            invocation
                .key(self.name(resource))
                .arg(fence.get())
                .arg(value)
                .arg(&fields(slot));
        }
        invocation
    }

    /// [`write_all`](Self::write_all)'s checked input as one call.
    fn invocation_all<R: AsRef<str>, V: ToRedisArgs>(
        &self,
        writes: &[(R, Fence, V)],
    ) -> Result<redis::ScriptInvocation<'static>, WriteError> {
        if writes.is_empty() || writes.len() > MAX_WRITES {
            return Err(WriteError::Invalid {
                reason: format!(
                    "write_all takes 1 to {MAX_WRITES} writes, got {}",
                    writes.len()
                ),
            });
        }
        let names: Vec<String> = writes.iter().map(|(r, ..)| self.name(r.as_ref())).collect();
        if let Some((a, b)) = first_duplicate(&names) {
            return Err(WriteError::Invalid {
                reason: format!("writes {a} and {b} name the same resource"),
            });
        }
        Ok(self.invocation(
            HOLDER,
            writes
                .iter()
                .map(|(resource, fence, value)| (resource.as_ref(), None, *fence, value)),
        ))
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
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(self.name(resource))
            .arg(&fields(slot)[..2])
            .query(conn)?;
        Ok(fence.zip(value).map(|(f, v)| (Fence::new(f), v)))
    }
}

/// The verdict on the script's reply: stored, or the first stale write
/// (by its 0-based position for a [`FencedStore::write_all`], `all`) and
/// its resource's stored fence.
fn verdict(reply: redis::RedisResult<Value>, all: bool) -> Result<(), WriteError> {
    let items = match reply.map_err(WriteError::Redis)? {
        Value::Int(1) => return Ok(()),
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    let [Value::Int(i @ 1..), Value::BulkString(current)] = items.as_slice() else {
        return Err(WriteError::Redis(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected reply to the fenced write script",
        ))));
    };
    let current = std::str::from_utf8(current)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let stale = StaleFence {
        current: Fence::new(current),
    };
    Err(if all {
        let index = usize::try_from(*i - 1).unwrap_or(usize::MAX);
        WriteError::StaleAt { index, stale }
    } else {
        WriteError::Stale(stale)
    })
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

    fn stale(i: i64, fence: &str) -> Value {
        Value::Array(vec![
            Value::Int(i),
            Value::BulkString(fence.as_bytes().to_vec()),
        ])
    }

    #[test]
    fn a_stored_higher_fence_makes_the_write_stale() {
        assert!(verdict(Ok(Value::Int(1)), false).is_ok());
        match verdict(Ok(stale(1, "42")), false) {
            Err(WriteError::Stale(s)) => assert_eq!(s.current, Fence::new(42)),
            other => panic!("{other:?}"),
        }
        match verdict(Ok(stale(3, "42")), true) {
            Err(WriteError::StaleAt { index: 2, stale }) => {
                assert_eq!(stale.current, Fence::new(42));
            }
            other => panic!("{other:?}"),
        }
        for odd in [Value::Nil, stale(0, "1"), Value::BulkString(b"42".to_vec())] {
            assert!(
                matches!(verdict(Ok(odd.clone()), false), Err(WriteError::Redis(_))),
                "{odd:?}"
            );
        }
    }

    #[test]
    fn bad_write_all_input_is_refused_naming_positions_only() {
        let store = FencedStore::new("ns");
        let none: [(&str, Fence, &str); 0] = [];
        let f = Fence::new(1);
        let too_many: Vec<(String, Fence, &str)> = (0..=MAX_WRITES)
            .map(|i| (format!("r{i}"), f, "v"))
            .collect();
        for (reason, result) in [
            (
                "1 to 64 writes, got 0",
                store.invocation_all(&none).map(drop),
            ),
            ("got 65", store.invocation_all(&too_many).map(drop)),
            (
                "writes 1 and 3 name the same resource",
                store
                    .invocation_all(&[("secret", f, "a"), ("b", f, "b"), ("secret", f, "c")])
                    .map(drop),
            ),
        ] {
            match result {
                Err(WriteError::Invalid { reason: got }) => {
                    assert!(got.contains(reason), "{got}");
                    assert!(!got.contains("secret"), "{got}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn with_key_hash_tags_resources_of_one_tag_share_a_slot() {
        let tagged = FencedStore::new("ns").key_hash_tags(true);
        let (a, b) = (tagged.name("acct:{7}:in"), tagged.name("acct:{7}:out"));
        assert_ne!(a, b);
        assert_eq!(crate::cluster::slot_of(&a), crate::cluster::slot_of(&b));
        let plain = FencedStore::new("ns");
        assert_eq!(
            plain.name("r"),
            tagged.name("r"),
            "untagged resources keep their name"
        );
    }

    #[test]
    fn names_hide_the_resource_inside_a_hash_tag() {
        let name = FencedStore::new("ns").name("secret-resource");
        assert!(name.starts_with("ns:fenced:{"));
        assert!(!name.contains("secret"));
    }
}
