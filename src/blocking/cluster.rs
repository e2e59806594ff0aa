//! The blocking locker on Redis Cluster: construction and the connect-time
//! checks (sharded pub/sub, every primary's eviction policy). Routing is
//! in `connection.rs`; notifications come from the driver's subscriber.

use redis::cluster::ClusterClient;
use redis::Value;

use super::connection::Source;
use super::locker::{Locker, Shared};
use crate::config::Config;
use crate::driver::subscriber;
use crate::error::{Error, Failure, Operation};
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
        let infos = nodes
            .into_iter()
            .map(|n| n.into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs"))?;
        let template = infos.first().cloned();
        let client = ClusterClient::builder(infos)
            .retries(0)
            .connection_timeout(config.command_timeout)
            .response_timeout(config.command_timeout)
            .build()
            .map_err(|_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs"))?;
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
        let shared = Shared::new(
            Source::Cluster(client.clone(), template.clone()),
            subscriber::Source::Cluster {
                slots: client.clone(),
                template,
            },
            config,
        );
        check_sharded_pubsub(&shared)?;
        check_every_primary(&client);
        Ok(Locker::from_shared(shared))
    }
}

/// Connects and checks that the cluster knows `SPUBLISH` (Redis ≥ 7).
fn check_sharded_pubsub(shared: &Shared) -> Result<(), Error> {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg("SPUBLISH");
    match shared.commands.query_fresh(&cmd) {
        Ok(Value::Array(items)) if items.first().is_some_and(|v| *v != Value::Nil) => Ok(()),
        Ok(_) => Err(Error::invalid_config(
            "nodes",
            "the cluster has no sharded pub/sub (SPUBLISH); redlease needs Redis 7 or newer",
        )),
        Err(Failure::NotSent(e)) => Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) => Err(Error::from_command(Operation::Connect, e)),
    }
}

/// Reads `maxmemory-policy` on every primary (each has its own) and logs
/// an unsafe one.
fn check_every_primary(client: &ClusterClient) {
    let reply = client.get_connection().and_then(|mut conn| {
        conn.route_command(&eviction::config_get_cmd(), eviction::every_primary())
    });
    match reply {
        Ok(reply) => eviction::report_cluster(&eviction::policies_from_cluster_reply(reply)),
        Err(e) => eviction::report_refused(&e),
    }
}
