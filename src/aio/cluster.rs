//! The async locker on Redis Cluster: construction and the connect-time
//! checks (sharded pub/sub, every primary's eviction policy). The redis
//! crate's async cluster connection routes every command, the scripts
//! included (all names of a key share its hash tag), follows redirects and
//! reconnects its nodes; notifications come from the driver's subscriber.

use redis::cluster::ClusterClient;

use super::connection::{AnyConnection, Commands, Source};
use super::locker::{Locker, Shared};
use crate::cluster::{cluster_client, sharded_pubsub_cmd, sharded_pubsub_verdict};
use crate::config::Config;
use crate::driver::subscriber;
use crate::error::{Error, Transport};
use crate::eviction;

impl Locker {
    /// Connects to a Redis Cluster through any of its `nodes` (URLs like
    /// `redis://127.0.0.1:7000/`).
    ///
    /// Release notifications use sharded pub/sub (`SSUBSCRIBE` on the node
    /// that owns each waited-for key), so the cluster must run Redis 7 or
    /// newer; connecting checks that, and every primary's
    /// `maxmemory-policy`.
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
        let (client, template) = cluster_client(nodes, &config, None)?;
        Self::cluster(client, template, config).await
    }

    /// A locker over an existing cluster client.
    ///
    /// The locker cannot read the client's credentials, so its per-node
    /// notification connections connect without them; where the nodes need
    /// a password, waiters fall back to safety polls. Prefer
    /// [`connect_cluster`](Self::connect_cluster).
    ///
    /// # Errors
    ///
    /// As [`connect_cluster`](Self::connect_cluster).
    pub async fn new_cluster(client: ClusterClient, config: Config) -> Result<Self, Error> {
        config.validate()?;
        Self::cluster(client, None, config).await
    }

    async fn cluster(
        client: ClusterClient,
        template: Option<redis::ConnectionInfo>,
        config: Config,
    ) -> Result<Self, Error> {
        let transport = template
            .as_ref()
            .map_or(Transport::Unknown, |t| Transport::of(t.addr()));
        let commands = Commands::new(
            Source::Cluster(client.clone(), transport),
            config.command_timeout,
        );
        let notifications = subscriber::Source::Cluster {
            slots: client,
            template,
        };
        let shared = Shared::new(commands, notifications, config);
        sharded_pubsub_verdict(shared.commands.query(&sharded_pubsub_cmd()).await)?;
        let policies = match shared.commands.connection().await {
            Ok(AnyConnection::Cluster(mut conn)) => {
                conn.route_command(eviction::config_get_cmd(), eviction::every_primary())
                    .await
            }
            Ok(AnyConnection::Standalone(_) | AnyConnection::Driven(_)) => unreachable_standalone(),
            Err(e) => Err(e),
        };
        eviction::report_cluster_reply(policies);
        Ok(Locker::from_shared(shared))
    }
}

/// A cluster source always opens cluster connections.
fn unreachable_standalone() -> redis::RedisResult<redis::Value> {
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "a cluster locker holds a standalone connection",
    )))
}
