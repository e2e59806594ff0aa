//! The constructors of `Locker<F>`, written once: each validates its input
//! and names a [`Source`]; the front end opens the connections and runs the
//! connect-time checks (`Front::open`).

use super::locker::Locker;
use crate::cluster::cluster_client;
use crate::config::{ensure, Config};
use crate::driver::target::Source;
use crate::error::{url_error, Error};
use crate::front::{Call, Front};
use crate::sentinel::{Resolver, SentinelOptions};
use crate::url::IntoConnectionInfo;

impl<F: Front> Locker<F> {
    /// Connects to the Redis server at `url` (e.g. `redis://127.0.0.1:6379/0`
    /// as a `&str`, `String` or `&String`; also a `url::Url`, a
    /// `(host, port)` or the redis crate's `ConnectionInfo`; see
    /// [`IntoConnectionInfo`]).
    ///
    /// Opens one connection at once and reads `maxmemory-policy`; a policy
    /// that may evict keys is logged as `REDIS_EVICTION_UNSAFE`. Then it
    /// reads the naming scheme the namespace's lockers recorded (and
    /// records its own if none did; see
    /// [`Config::key_hash_tags`](crate::Config::key_hash_tags)). Every
    /// constructor runs the same checks.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or URL, or a `key_hash_tags`
    /// setting other than the one the namespace's lockers recorded;
    /// `ProviderFailed` when the first connection cannot be opened.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use redlease::{blocking::Locker, Config};
    ///
    /// let locker = Locker::connect("redis://127.0.0.1:6379/0", Config::new("my-service"))?;
    /// // aio: redlease::aio::Locker::connect(url, config).await?
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn connect(
        url: impl IntoConnectionInfo,
        config: Config,
    ) -> Call<'static, F, Result<Self, Error>> {
        Self::open(config, |_| {
            // The redis error would echo the URL, which may carry a password.
            url.into_connection_info()
                .and_then(redis::Client::open)
                .map(Source::Standalone)
                .map_err(|e| url_error("url", "not a valid Redis connection URL", &e))
        })
    }

    /// A locker over an existing client. The locker opens its own
    /// connections from it (commands, and notifications while anyone
    /// waits) and closes them at shutdown.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub fn new(client: redis::Client, config: Config) -> Call<'static, F, Result<Self, Error>> {
        Self::open(config, |_| Ok(Source::Standalone(client)))
    }

    /// Connects to the primary that Redis Sentinel names `master_name`,
    /// asking the sentinels at `sentinel_urls` (e.g.
    /// `redis://127.0.0.1:26379`, or `redis://:sentinel-password@host:26379`
    /// where the sentinels want a password). The primary is connected to
    /// without credentials, db 0; see
    /// [`connect_sentinel_with_options`](Self::connect_sentinel_with_options)
    /// for those.
    ///
    /// The locker asks the sentinels for the primary at connect and again
    /// whenever it opens a new connection: after a connection error, or
    /// after a `READONLY` or `MASTERDOWN` reply (which drops the pooled
    /// connections to that server). The subscriber follows the primary the
    /// same way, and waiters ride out a failover with the usual retry
    /// backoff while their wait lasts.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config, no or bad sentinel URLs, or an
    /// empty master name; `ProviderFailed` when no sentinel names a
    /// reachable primary.
    pub fn connect_sentinel<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        config: Config,
    ) -> Call<'static, F, Result<Self, Error>> {
        Self::connect_sentinel_with(sentinel_urls, master_name, None, config)
    }

    /// As [`connect_sentinel`](Self::connect_sentinel), with how to
    /// connect to the primary: its username and password, db, TLS and
    /// protocol (`node`, the redis crate's `SentinelNodeConnectionInfo`).
    ///
    /// # Errors
    ///
    /// As [`connect_sentinel`](Self::connect_sentinel).
    pub fn connect_sentinel_with<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        node: Option<redis::sentinel::SentinelNodeConnectionInfo>,
        config: Config,
    ) -> Call<'static, F, Result<Self, Error>> {
        Self::open(config, |_| {
            Resolver::new(sentinel_urls, master_name, node).map(Source::Sentinel)
        })
    }

    /// As [`connect_sentinel`](Self::connect_sentinel), with the
    /// primary's credentials, db and TLS mode and (feature `tls-rustls`)
    /// the certificates of a private CA in a [`SentinelOptions`]; the
    /// sentinels' own password stays in their URLs.
    ///
    /// # Errors
    ///
    /// As [`connect_sentinel`](Self::connect_sentinel); a wrong sentinel or
    /// primary password is `ProviderFailed` with
    /// `could not connect to redis: authentication failed`, a
    /// certificate or key whose PEM does not parse is `InvalidConfig`
    /// (option `certificates`). With
    /// certificates for the primary, every sentinel URL must carry the
    /// same username and password (`InvalidConfig` otherwise).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use redlease::{blocking::Locker, Config, SentinelOptions};
    ///
    /// let locker = Locker::connect_sentinel_with_options(
    ///     ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"],
    ///     "mymaster",
    ///     SentinelOptions::new().primary_password("primary-secret"),
    ///     Config::new("my-service"),
    /// )?;
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn connect_sentinel_with_options<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        options: SentinelOptions,
        config: Config,
    ) -> Call<'static, F, Result<Self, Error>> {
        Self::open(config, |_| {
            Resolver::with_options(sentinel_urls, master_name, options).map(Source::Sentinel)
        })
    }

    /// Connects to a Redis Cluster through any of its `nodes` (URLs like
    /// `redis://127.0.0.1:7000/`).
    ///
    /// On the blocking front end commands go through a cluster connection
    /// built with `retries(0)`, so a timed-out write is never re-sent
    /// behind the locker's back; a redirect (the command did not run) is
    /// followed by reading the new slot map and sending once more, `ASK`
    /// with `ASKING` on the named node. The async front end uses the redis
    /// crate's async cluster connection, which routes and follows
    /// redirects itself. Release notifications use sharded pub/sub on the
    /// node that owns each waited-for key (Redis ≥ 7; checked here), and
    /// every primary's `maxmemory-policy` is checked. `min_replicas` is
    /// not supported on a cluster.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or node URLs, `min_replicas`, or a
    /// cluster without sharded pub/sub; `ProviderFailed` when no node can
    /// be reached.
    pub fn connect_cluster<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
        config: Config,
    ) -> Call<'static, F, Result<Self, Error>> {
        Self::open(config, |config| {
            let nodes = (nodes.into_iter().map(|node| node.into_connection_info()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| url_error("nodes", "not valid Redis Cluster node URLs", &e))?;
            no_replicas_on_cluster(config)?;
            let (client, template) = cluster_client(nodes, config, F::CLUSTER_RETRIES)?;
            Ok(Source::Cluster(client, template))
        })
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
    pub fn new_cluster(
        client: redis::cluster::ClusterClient,
        config: Config,
    ) -> Call<'static, F, Result<Self, Error>> {
        Self::open(config, |config| {
            no_replicas_on_cluster(config).map(|()| Source::Cluster(client, None))
        })
    }

    /// Validates `config`, then the source, then lets the front end open
    /// the connections.
    fn open(
        config: Config,
        source: impl FnOnce(&Config) -> Result<Source, Error>,
    ) -> Call<'static, F, Result<Self, Error>> {
        match config.validate().and_then(|()| source(&config)) {
            Ok(source) => F::open(source, config),
            Err(e) => F::ready(Err(e)),
        }
    }
}

/// A cluster refuses `min_replicas`, before its client is built.
fn no_replicas_on_cluster(config: &Config) -> Result<(), Error> {
    let why = "not supported on Redis Cluster (WAIT must run on the node of each key)";
    ensure(config.min_replicas.is_none(), "min_replicas", why)
}
