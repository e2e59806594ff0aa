//! The async locker on Redis Cluster: construction, and the per-key sharded
//! release channels (`SSUBSCRIBE` while a key has waiters, dropped after the
//! linger, subscribed again after a slot moved).
//!
//! The redis crate's async cluster connection routes every command, the
//! scripts included (all names of a key share its hash tag), and carries the
//! subscriptions. It does not subscribe again after a failover moved a slot:
//! the node sends `sunsubscribe`, which this module answers by waking the
//! key's head, whose next busy reply subscribes on the new owner.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use redis::cluster::ClusterClient;
use redis::{PushInfo, PushKind, Value};

use super::connection::{AnyConnection, Source};
use super::locker::{Locker, Shared};
use crate::clock::now;
use crate::cluster::key_of_channel;
use crate::config::Config;
use crate::core::names::{Channel, KeyId};
use crate::error::{describe, Error};

/// The keys whose sharded release channel this locker subscribed.
#[derive(Debug, Default)]
pub(crate) struct Channels {
    subscribed: Mutex<HashSet<KeyId>>,
}

impl Channels {
    /// Subscribes `key`'s channel unless it already is (cluster only).
    pub(crate) async fn ensure(&self, shared: &Arc<Shared>, key: KeyId) {
        if !shared.commands.is_cluster() || !self.subscribed.lock().insert(key) {
            return;
        }
        let channel = Channel::Sharded.name(&shared.config.namespace, key);
        let subscribed = match shared.commands.connection().await {
            Ok(AnyConnection::Cluster(mut conn)) => conn.ssubscribe(&channel).await,
            Ok(AnyConnection::Standalone(_)) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = subscribed {
            self.subscribed.lock().remove(&key);
            if shared.with_core_no_start(|core| core.handle_subscription_failed(now())) {
                log::warn!(
                    target: "redlease",
                    "LOCK_NOTIFY_UNAVAILABLE: sharded release notifications unavailable ({}); \
                     waiters poll every poll_interval",
                    describe(&e)
                );
            }
        }
    }

    /// Unsubscribes the channels of keys nobody waited for during the
    /// linger.
    pub(crate) async fn drop_unwanted(&self, shared: &Arc<Shared>) {
        if self.subscribed.lock().is_empty() {
            return;
        }
        let wanted: HashSet<KeyId> = shared
            .cell()
            .read_mut(|core| core.wanted_keys(now()))
            .into_iter()
            .collect();
        let stale: Vec<KeyId> = {
            let mut subscribed = self.subscribed.lock();
            let stale: Vec<KeyId> = subscribed.difference(&wanted).copied().collect();
            for key in &stale {
                subscribed.remove(key);
            }
            stale
        };
        if stale.is_empty() {
            return;
        }
        if let Ok(AnyConnection::Cluster(mut conn)) = shared.commands.connection().await {
            for key in stale {
                let channel = Channel::Sharded.name(&shared.config.namespace, key);
                // Best effort: a failed unsubscribe only costs a message.
                let _ = conn.sunsubscribe(&channel).await;
            }
        }
    }

    fn forget(&self, key: KeyId) {
        self.subscribed.lock().remove(&key);
    }

    fn forget_all(&self) {
        self.subscribed.lock().clear();
    }
}

/// Feeds a push from the cluster connection into the locker.
fn on_push(shared: &Shared, push: PushInfo) {
    let prefix = format!("{}:lock-released:{{", shared.config.namespace);
    let key_of = |data: &[Value]| match data.first() {
        Some(Value::BulkString(channel)) if channel.starts_with(prefix.as_bytes()) => {
            key_of_channel(channel)
        }
        _ => None,
    };
    match push.kind {
        PushKind::SMessage => {
            if let (Some(_), Some(Value::BulkString(payload))) =
                (key_of(&push.data), push.data.get(1))
            {
                shared.counters.notification();
                shared.with_core_no_start(|core| core.handle_notification(payload));
            }
        }
        PushKind::SSubscribe => {
            if let Some(key) = key_of(&push.data) {
                shared.with_core_no_start(|core| core.handle_channel_subscribed(key));
            }
        }
        PushKind::SUnsubscribe => {
            // Ours after the linger, or the node's after its slot moved: in
            // the second case the head retries now and, still finding the
            // lock busy, subscribes again on the new owner.
            if let Some(key) = key_of(&push.data) {
                shared.channels.forget(key);
                let sha = key.to_hex();
                shared.with_core_no_start(|core| core.handle_notification(sha.as_bytes()));
            }
        }
        PushKind::Disconnection => {
            shared.channels.forget_all();
            shared.with_core_no_start(|core| core.handle_subscriber_stopped());
        }
        _ => {}
    }
}

impl Locker {
    /// Connects to a Redis Cluster through any of its `nodes` (URLs like
    /// `redis://127.0.0.1:7000/`).
    ///
    /// Release notifications use sharded pub/sub (`SSUBSCRIBE` on the node
    /// that owns each waited-for key), so the cluster must run Redis 7 or
    /// newer; connecting checks that.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config, bad node URLs or a cluster without
    /// sharded pub/sub; `ProviderFailed` when no node can be reached.
    pub async fn connect_cluster<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        let slot: Arc<OnceLock<Weak<Shared>>> = Arc::default();
        let for_push = slot.clone();
        let client = ClusterClient::builder(nodes)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(config.command_timeout)
            .response_timeout(config.command_timeout)
            .push_sender(move |push: PushInfo| -> Result<(), Infallible> {
                if let Some(shared) = for_push.get().and_then(Weak::upgrade) {
                    on_push(&shared, push);
                }
                Ok(())
            })
            .build()
            .map_err(|_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs"))?;
        let shared = Arc::new(Shared::new(
            Source::Cluster(client),
            None,
            Channels::default(),
            config,
        ));
        let _ = slot.set(Arc::downgrade(&shared));
        check_sharded_pubsub(&shared).await?;
        Ok(Locker::from_shared(shared))
    }

    /// A locker over an existing cluster client.
    ///
    /// Release notifications reach the locker only through the push sender
    /// of the client it builds itself; over a client of yours, waiters rely
    /// on their safety polls (`poll_interval`). Prefer
    /// [`connect_cluster`](Self::connect_cluster).
    ///
    /// # Errors
    ///
    /// As [`connect_cluster`](Self::connect_cluster).
    pub async fn new_cluster(client: ClusterClient, config: Config) -> Result<Self, Error> {
        config.validate()?;
        let shared = Arc::new(Shared::new(
            Source::Cluster(client),
            None,
            Channels::default(),
            config,
        ));
        check_sharded_pubsub(&shared).await?;
        Ok(Locker::from_shared(shared))
    }
}

/// Connects and checks that the cluster knows `SPUBLISH` (Redis ≥ 7).
async fn check_sharded_pubsub(shared: &Shared) -> Result<(), Error> {
    let mut conn = shared
        .commands
        .connection()
        .await
        .map_err(Error::from_connect)?;
    let reply = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("SPUBLISH")
        .query_async::<Value>(&mut conn)
        .await;
    match reply {
        Ok(Value::Array(items)) if items.first().is_some_and(|v| *v != Value::Nil) => Ok(()),
        Ok(_) => Err(Error::invalid_config(
            "nodes",
            "the cluster has no sharded pub/sub (SPUBLISH); redlease needs Redis 7 or newer",
        )),
        Err(e) => Err(Error::from_command(crate::error::Operation::Connect, e)),
    }
}
