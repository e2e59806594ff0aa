//! `blocking::Locker` (`Locker<Blocking>`) and how it opens its
//! connections: the pooled sync connections and the connect-time checks
//! (eviction policy; on a cluster, sharded pub/sub and every primary's
//! policy). The constructors themselves are written once in
//! `src/handle/connect.rs`.

use super::connection::Commands;
use crate::cluster::{sharded_pubsub_cmd, sharded_pubsub_verdict};
use crate::config::Config;
use crate::driver::target::{Source, Target};
use crate::error::Error;
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
    let (source, notifications) = target.sources(&config, Some(0))?;
    let cluster = match &source {
        Source::Cluster(client, _) => Some(client.clone()),
        _ => None,
    };
    let timeout = config.command_timeout;
    let shared = Shared::new(Commands::new(source, timeout), notifications, config);
    let commands = &shared.commands;
    if let Some(client) = cluster {
        sharded_pubsub_verdict(commands.query_fresh(&sharded_pubsub_cmd()))?;
        shared.connected();
        eviction::report_cluster_reply(client.get_connection().and_then(|mut conn| {
            conn.route_command(&eviction::config_get_cmd(), eviction::every_primary())
        }));
    } else {
        if eviction::check_config_reply(commands.query_fresh(&eviction::config_get_cmd()))? {
            eviction::report_info_reply(commands.query_fresh(&eviction::info_cmd()));
        }
        shared.connected();
    }
    Ok(Locker::from_shared(shared))
}
