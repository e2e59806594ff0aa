//! `blocking::Locker` (`Locker<Blocking>`) and how it opens its
//! connections: the pooled sync connections and the connect-time checks
//! (eviction policy; on a cluster, sharded pub/sub and every primary's
//! policy). The constructors themselves are written once in
//! `src/handle/connect.rs`.

use redis::cluster::ClusterClient;

use super::connection::{Commands, Source};
use crate::cluster::{cluster_client, sharded_pubsub_cmd, sharded_pubsub_verdict};
use crate::config::Config;
use crate::driver::subscriber;
use crate::driver::target::Target;
use crate::error::{is_auth_failure, Error, Failure};
use crate::eviction;
use crate::front::Blocking;

/// The locker's and its leases' shared state, over the pooled connections.
pub(crate) type Shared = crate::driver::state::Shared<Commands>;

/// A lease client for std threads: `Locker<Blocking>` (see
/// [`Locker`](crate::Locker) for what every locker and its examples do).
/// Each call runs on the caller's thread and returns its result; dropping
/// a held lease releases it at once.
pub type Locker = crate::Locker<Blocking>;

/// Opens a blocking locker's connections to `target` (`Front::open`).
pub(super) fn open(target: Target, config: Config) -> Result<Locker, Error> {
    let (source, notifications) = match target {
        Target::Standalone(client) => (
            Source::Standalone(client.clone()),
            subscriber::Source::Standalone(client),
        ),
        Target::Sentinel(resolver) => (
            Source::Sentinel(resolver.clone()),
            subscriber::Source::Sentinel(resolver),
        ),
        Target::ClusterNodes(nodes) => {
            let (client, template) = cluster_client(nodes, &config, Some(0))?;
            return open_cluster(client, template, config);
        }
        Target::Cluster(client) => return open_cluster(client, None, config),
    };
    let shared = Shared::new(
        Commands::new(source, config.command_timeout),
        notifications,
        config,
    );
    check_eviction(&shared.commands)?;
    shared.connected();
    Ok(Locker::from_shared(shared))
}

/// A locker on Redis Cluster: routing is in `connection.rs`, notifications
/// come from the driver's subscriber.
fn open_cluster(
    client: ClusterClient,
    template: Option<redis::ConnectionInfo>,
    config: Config,
) -> Result<Locker, Error> {
    let source = Source::Cluster(client.clone(), template.clone());
    let commands = Commands::new(source, config.command_timeout);
    let notifications = subscriber::Source::Cluster {
        slots: client.clone(),
        template,
    };
    let shared = Shared::new(commands, notifications, config);
    sharded_pubsub_verdict(shared.commands.query_fresh(&sharded_pubsub_cmd()))?;
    shared.connected();
    eviction::report_cluster_reply(client.get_connection().and_then(|mut conn| {
        conn.route_command(&eviction::config_get_cmd(), eviction::every_primary())
    }));
    Ok(Locker::from_shared(shared))
}

/// Reads `maxmemory-policy` on a fresh connection and logs an unsafe one.
fn check_eviction(commands: &Commands) -> Result<(), Error> {
    let policy = match commands.query_fresh(&eviction::config_get_cmd()) {
        Ok(value) => eviction::policy_from_config_reply(value),
        Err(Failure::NotSent(e)) => return Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) if is_auth_failure(&e) => return Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) => {
            eviction::report_refused(&e);
            commands
                .query_fresh(&eviction::info_cmd())
                .ok()
                .and_then(eviction::policy_from_info_reply)
        }
    };
    eviction::report(policy.as_deref());
    Ok(())
}
