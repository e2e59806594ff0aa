//! The blocking locker on Redis Cluster: construction and the connect-time
//! checks (sharded pub/sub, every primary's eviction policy). Routing is
//! in `connection.rs`; notifications come from the driver's subscriber.

use redis::cluster::ClusterClient;

use super::connection::{Commands, Source};
use super::locker::{Locker, Shared};
use crate::cluster::{cluster_client, sharded_pubsub_cmd, sharded_pubsub_verdict};
use crate::config::Config;
use crate::driver::subscriber;
use crate::error::Error;
use crate::eviction;

impl Locker {
    /// Connects to a Redis Cluster through any of its `nodes` (URLs like
    /// `redis://127.0.0.1:7000/`).
    ///
    /// Commands go through a cluster connection built with `retries(0)`, so
    /// a timed-out write is never re-sent behind the locker's back; a
    /// redirect (the command did not run) is followed by reading the new
    /// slot map and sending once more, `ASK` with `ASKING` on the named
    /// node. Release notifications use sharded pub/sub on the node that
    /// owns each waited-for key (Redis ≥ 7; checked here), and every
    /// primary's `maxmemory-policy` is checked. `min_replicas` is not
    /// supported on a cluster.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or node URLs, `min_replicas`, or a
    /// cluster without sharded pub/sub; `ProviderFailed` when no node can
    /// be reached.
    pub fn connect_cluster<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        let (client, template) = cluster_client(nodes, &config, Some(0))?;
        Self::cluster(client, template, config)
    }

    /// A locker over an existing cluster client.
    ///
    /// The locker cannot read the client's credentials, so its per-node
    /// notification connections connect without them; where the nodes need
    /// a password, waiters fall back to safety polls. If the client has
    /// `retries > 0`, it may re-send a timed-out acquire, which the
    /// replay-safe script answers with the same fence. Prefer
    /// [`connect_cluster`](Self::connect_cluster).
    ///
    /// # Errors
    ///
    /// As [`connect_cluster`](Self::connect_cluster).
    pub fn new_cluster(client: ClusterClient, config: Config) -> Result<Self, Error> {
        config.validate()?;
        Self::cluster(client, None, config)
    }

    fn cluster(
        client: ClusterClient,
        template: Option<redis::ConnectionInfo>,
        config: Config,
    ) -> Result<Self, Error> {
        if config.min_replicas.is_some() {
            return Err(Error::invalid_config(
                "min_replicas",
                "not supported on Redis Cluster (WAIT must run on the node of each key)",
            ));
        }
        let source = Source::Cluster(client.clone(), template.clone());
        let commands = Commands::new(source, config.command_timeout);
        let notifications = subscriber::Source::Cluster {
            slots: client.clone(),
            template,
        };
        let shared = Shared::new(commands, notifications, config);
        sharded_pubsub_verdict(shared.commands.query_fresh(&sharded_pubsub_cmd()))?;
        eviction::report_cluster_reply(client.get_connection().and_then(|mut conn| {
            conn.route_command(&eviction::config_get_cmd(), eviction::every_primary())
        }));
        Ok(Locker::from_shared(shared))
    }
}
