//! Where a locker connects, as its constructors name it; each front end
//! opens its connections and runs the connect-time checks from this.

use redis::cluster::ClusterClient;

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
