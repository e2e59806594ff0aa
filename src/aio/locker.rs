//! `aio::Locker` (`Locker<Async>`) and how it opens its connection: the
//! shared multiplexed connection and the connect-time checks (eviction
//! policy; on a cluster, sharded pub/sub and every primary's policy). The
//! constructors themselves are written once in `src/handle/connect.rs`.

use redis::cluster::ClusterClient;

use super::connection::{AnyConnection, Commands, Source};
use crate::cluster::{cluster_client, sharded_pubsub_cmd, sharded_pubsub_verdict};
use crate::config::Config;
use crate::driver::subscriber;
use crate::driver::target::Target;
use crate::error::{is_auth_failure, url_error, Error, Failure, Transport};
use crate::eviction;
use crate::front::Async;

/// The locker's and its leases' shared state, over the shared connection.
pub(crate) type Shared = crate::driver::state::Shared<Commands>;

/// A lease client for async code on any executor: `Locker<Async>` (see
/// [`Locker`](crate::Locker) for what every locker does). Each call returns
/// a `Send` future, which does nothing until polled.
///
/// It needs no tokio runtime: timers come from `async-io`, wake-ups from
/// `event-listener`. On one server over TCP the command connection is
/// driven by the futures waiting on it; over TLS, a unix socket or a
/// Cluster the redis crate drives it on smol's global executor (one
/// `smol-1` thread, `SMOL_THREADS` sets how many). While anyone waits, a
/// thread of this crate holds the release-notification subscription.
/// Cancelling an acquire is dropping its future; dropping a held lease
/// never blocks (see [`Lease`](crate::Lease)).
///
/// ```no_run
/// # async fn run() -> Result<(), redlease::Error> {
/// use redlease::{aio::Locker, Config};
///
/// let locker = Locker::connect("redis://127.0.0.1:6379/0", Config::new("my-service")).await?;
/// let lease = locker.acquire("job:42").await?;
/// println!("fence {}", lease.fence());
/// lease.release().await?;
/// locker.shutdown().await?;
/// # Ok(()) }
/// ```
pub type Locker = crate::Locker<Async>;

/// Opens an async locker's connection to `target` (`Front::open`).
pub(super) async fn open(target: Target, config: Config) -> Result<Locker, Error> {
    let (source, notifications) = match target {
        Target::Standalone(client) => (
            Source::Standalone(resp3(&client)?),
            subscriber::Source::Standalone(client),
        ),
        Target::Sentinel(resolver) => (
            Source::Sentinel(resolver.clone()),
            subscriber::Source::Sentinel(resolver),
        ),
        Target::ClusterNodes(nodes) => {
            let (client, template) = cluster_client(nodes, &config, None)?;
            return open_cluster(client, template, config).await;
        }
        Target::Cluster(client) => return open_cluster(client, None, config).await,
    };
    let shared = Shared::new(
        Commands::new(source, config.command_timeout),
        notifications,
        config,
    );
    check_eviction(&shared.commands).await?;
    shared.connected();
    Ok(Locker::from_shared(shared))
}

/// The client of the command connection: RESP3, so that it reports a
/// server-side close at once (a `Disconnection` push) instead of failing
/// the next call.
fn resp3(client: &redis::Client) -> Result<redis::Client, Error> {
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(resp3))
        .map_err(|e| url_error("url", "not a valid Redis connection URL", &e))
}

/// A locker on Redis Cluster: the redis crate's async cluster connection
/// routes every command, the scripts included (all names of a key share
/// its hash tag), follows redirects and reconnects its nodes;
/// notifications come from the driver's subscriber.
async fn open_cluster(
    client: ClusterClient,
    template: Option<redis::ConnectionInfo>,
    config: Config,
) -> Result<Locker, Error> {
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
    shared.connected();
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

fn unreachable_standalone() -> redis::RedisResult<redis::Value> {
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "a cluster locker holds a standalone connection",
    )))
}

async fn check_eviction(commands: &Commands) -> Result<(), Error> {
    commands.connection().await.map_err(Error::from_connect)?;
    let policy = match commands.query(&eviction::config_get_cmd()).await {
        Ok(value) => eviction::policy_from_config_reply(value),
        Err(Failure::Sent(e) | Failure::NotSent(e)) if is_auth_failure(&e) => {
            return Err(Error::from_connect(e));
        }
        Err(Failure::Sent(e) | Failure::NotSent(e)) => {
            eviction::report_refused(&e);
            match commands.query(&eviction::info_cmd()).await {
                Ok(value) => eviction::policy_from_info_reply(value),
                Err(_) => None,
            }
        }
    };
    eviction::report(policy.as_deref());
    Ok(())
}
