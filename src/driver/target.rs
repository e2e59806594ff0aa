//! Where a locker connects, as its constructors name it; each front end
//! opens its connections and runs the connect-time checks from this.

use redis::cluster::ClusterClient;

use crate::cluster::cluster_client;
use crate::config::Config;
use crate::error::{Error, Transport};
use crate::sentinel::Resolver;

/// A locker's server(s).
#[allow(clippy::large_enum_variant, reason = "one per locker, built once")]
pub(crate) enum Target {
    /// One server.
    Standalone(redis::Client),
    /// The primary Sentinel names, asked for at every new connection.
    Sentinel(Resolver),
    /// A cluster reached through these nodes; the front end builds the
    /// client, and the first node is the template for direct connections
    /// (credentials, TLS).
    ClusterNodes(Vec<redis::ConnectionInfo>),
    /// A cluster client the caller built.
    Cluster(ClusterClient),
}

/// Where a locker's command connections and its subscriber's come from.
#[derive(Clone)]
#[allow(clippy::large_enum_variant, reason = "one per locker, built once")]
pub(crate) enum Source {
    Standalone(redis::Client),
    /// A cluster client (built with the front end's `retries`), and how
    /// to reach a node directly (credentials, protocol, TLS) when known.
    Cluster(ClusterClient, Option<redis::ConnectionInfo>),
    /// The primary Sentinel names, asked for at every new connection.
    Sentinel(Resolver),
}

impl Target {
    /// Where the connections come from; a cluster client built here gets
    /// `retries` when given (the blocking front end's `0`, so that a
    /// timed-out write is never re-sent behind the locker's back).
    pub(crate) fn source(self, config: &Config, retries: Option<u32>) -> Result<Source, Error> {
        Ok(match self {
            Target::Standalone(client) => Source::Standalone(client),
            Target::Sentinel(resolver) => Source::Sentinel(resolver),
            Target::ClusterNodes(nodes) => {
                let (client, template) = cluster_client(nodes, config, retries)?;
                Source::Cluster(client, template)
            }
            Target::Cluster(client) => Source::Cluster(client, None),
        })
    }
}

impl Source {
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Source::Cluster(..))
    }

    /// Whether a cluster's nodes are reached over TLS, as far as known.
    pub(crate) fn cluster_transport(template: Option<&redis::ConnectionInfo>) -> Transport {
        template.map_or(Transport::Unknown, |t| Transport::of(t.addr()))
    }
}

/// The client for `info` over RESP3: a server-side close is then reported
/// at once (a `Disconnection` push), and notifications are pushes.
pub(crate) fn resp3(info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
    let resp3 = redis::ProtocolVersion::RESP3;
    let settings = info.redis_settings().clone().set_protocol(resp3);
    redis::Client::open(info.set_redis_settings(settings))
}
