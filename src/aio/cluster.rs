//! The async locker on Redis Cluster: construction and the connect-time
//! checks (sharded pub/sub, every primary's eviction policy). The redis
//! crate's async cluster connection routes every command, the scripts
//! included (all names of a key share its hash tag); notifications come
//! from the driver's subscriber thread.

use redis::cluster::ClusterClient;
use redis::Value;

use super::connection::{AnyConnection, Source};
use super::locker::{Locker, Shared};
use crate::config::Config;
use crate::driver::subscriber;
use crate::error::{Error, Operation};
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
        let infos = nodes
            .into_iter()
            .map(|n| n.into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs"))?;
        let template = infos.first().cloned();
        let client = ClusterClient::builder(infos)
            .connection_timeout(config.command_timeout)
            .response_timeout(config.command_timeout)
            .build()
            .map_err(|_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs"))?;
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
        let shared = Shared::new(
            Source::Cluster(client.clone()),
            subscriber::Source::Cluster {
                slots: client,
                template,
            },
            config,
        );
        check_sharded_pubsub(&shared).await?;
        check_every_primary(&shared).await;
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
        Err(e) => Err(Error::from_command(Operation::Connect, e)),
    }
}

/// Reads `maxmemory-policy` on every primary (each has its own) and logs
/// an unsafe one.
async fn check_every_primary(shared: &Shared) {
    let reply = match shared.commands.connection().await {
        Ok(AnyConnection::Cluster(mut conn)) => {
            conn.route_command(eviction::config_get_cmd(), eviction::every_primary())
                .await
        }
        Ok(AnyConnection::Standalone(_)) => return,
        Err(e) => Err(e),
    };
    match reply {
        Ok(reply) => eviction::report_cluster(&eviction::policies_from_cluster_reply(reply)),
        Err(e) => eviction::report_refused(&e),
    }
}
