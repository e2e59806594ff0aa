//! Where a locker connects, as its constructors name it; each front end
//! opens its connections and runs the connect-time checks from this.

use redis::cluster::ClusterClient;

use crate::error::Transport;
use crate::sentinel::Resolver;

/// Where a locker's command connections and its subscriber's come from.
#[derive(Clone)]
#[allow(clippy::large_enum_variant, reason = "one per locker, built once")]
pub(crate) enum Source {
    /// One server.
    Standalone(redis::Client),
    /// A cluster client (one built from node URLs gets the front end's
    /// `Front::CLUSTER_RETRIES`), and how to reach a node directly
    /// (credentials, protocol, TLS) when known: the first node's.
    Cluster(ClusterClient, Option<redis::ConnectionInfo>),
    /// The primary Sentinel names, asked for at every new connection.
    Sentinel(Resolver),
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
