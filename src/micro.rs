//! Hooks for the core micro-benchmarks in `examples/bench` (feature
//! `bench-hooks`, hidden: not part of the API, no stability promise). Each runs
//! one unit of the sans-IO core's work so that the benchmark can time it;
//! and the async front end's connection, bare, for its tests.

use std::time::{Duration, Instant};

use redis::Value;

use crate::config::{Config, ResolvedOptions};
use crate::core::core::{Core, CoreSettings, WaiterStep};
use crate::core::names::{Channel, KeyId, LockNames, OwnerToken, Want};
use crate::core::script::{classify_acquire, classify_release, AcquireReply};

/// Classifies one acquire reply; true when it grants.
pub fn classify_acquire_reply(reply: &Value) -> bool {
    matches!(classify_acquire(reply), Ok(AcquireReply::Acquired(_)))
}

/// Classifies one release reply; true when it is an outcome.
pub fn classify_release_reply(reply: &Value) -> bool {
    classify_release(reply).is_ok()
}

/// Builds a key's stored names (SHA-256 of the key, hash tag); returns the
/// lock name's length.
pub fn build_names(namespace: &str, key: &str) -> usize {
    LockNames::new(namespace, KeyId::of(key)).lock.len()
}

/// `waiters` waiters join one key's line at `now`; each in turn attempts,
/// is granted, releases, and hands the line on through a release
/// notification. Returns the number of grants (`waiters`).
pub fn line_round(now: Instant, waiters: usize) -> usize {
    let config = Config::new("bench").max_waiters(waiters.max(1));
    let mut core = Core::new(CoreSettings::new(&config, Channel::Standalone), now);
    let options = ResolvedOptions {
        wait: Duration::from_secs(10),
        lease_ms: 1_000,
    };
    let sha = KeyId::of("key").to_hex();
    let ids: Vec<_> = (0..waiters)
        .filter_map(|i| {
            let token = OwnerToken::from_bytes([(i % 251) as u8; 16]);
            core.acquire_valued(now, "key", Want::Lock, None, token, options)
                .ok()
        })
        .collect();
    let mut grants = 0;
    for (fence, id) in (1u64..).zip(ids) {
        if let WaiterStep::Attempt(_) = core.poll_waiter(now, id) {
            let fence = fence.to_string().into_bytes();
            let reply = Ok::<_, redis::RedisError>(Value::BulkString(fence));
            core.handle_acquire_reply(now, id, reply);
        }
        if let WaiterStep::Done(Ok(grant)) = core.poll_waiter(now, id) {
            grants += 1;
            let _ =
                core.handle_release_reply(grant.lease, Ok::<_, redis::RedisError>(Value::Int(1)));
        }
        core.handle_notification(sha.as_bytes());
        while core.poll_event().is_some() {}
    }
    grants
}

/// The async locker's own connection to one server (`src/aio/driven.rs`),
/// bare, for its tests: opened and set up as the locker opens it.
#[cfg(feature = "aio")]
#[derive(Clone)]
pub struct DrivenConnection(crate::aio::driven::DrivenConnection);

#[cfg(feature = "aio")]
impl std::fmt::Debug for DrivenConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrivenConnection").finish_non_exhaustive()
    }
}

#[cfg(feature = "aio")]
impl DrivenConnection {
    /// Opens one to `url` (plain TCP or a unix socket) over RESP3.
    pub async fn connect(url: &str, timeout: Duration) -> redis::RedisResult<Self> {
        let info = redis::IntoConnectionInfo::into_connection_info(url)?;
        let client = crate::driver::target::resp3(info)?;
        let conn =
            crate::aio::driven::DrivenConnection::connect(client.get_connection_info(), timeout);
        conn.await.map(DrivenConnection)
    }

    /// Whether it is open, after reading what came in while it was idle.
    pub fn is_open(&self) -> bool {
        self.0.is_open()
    }

    /// Sends `cmd`; its reply.
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        cmd.query_async(&mut self.0.clone()).await
    }

    /// Sends `pipe`; its replies.
    pub async fn pipeline<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<T> {
        pipe.query_async(&mut self.0.clone()).await
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // one real instant for the round
mod tests {
    use super::*;

    #[test]
    fn the_hooks_do_what_they_say() {
        assert!(classify_acquire_reply(&Value::BulkString(b"7".to_vec())));
        assert!(!classify_acquire_reply(&Value::Int(5)));
        assert!(classify_release_reply(&Value::Int(1)));
        assert_eq!(build_names("ns", "k"), "ns:lock:{}".len() + 64);
        assert_eq!(line_round(Instant::now(), 16), 16);
    }
}
