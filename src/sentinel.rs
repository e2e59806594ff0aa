//! Redis Sentinel: where the current primary is. Both front ends and the
//! subscriber ask a [`Resolver`] for the primary each time they open a
//! connection (at connect, and after a connection error, `READONLY` or
//! `MASTERDOWN` made them drop the old one), through the redis crate's
//! `SentinelClient` (which also checks with `ROLE` that the address it
//! got answers as a primary).

use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::IntoConnectionInfo;

use crate::error::{url_error, Error};

/// How to find the primary: the sentinels, the master name, and how to
/// connect to the primary (credentials, db, TLS). Cheap to clone; each
/// resolution builds a fresh `SentinelClient` (no state shared between
/// threads or tasks, no lock held across a wait).
#[derive(Clone)]
pub(crate) struct Resolver {
    sentinels: Vec<redis::ConnectionInfo>,
    master: String,
    node: SentinelNodeConnectionInfo,
}

// Hand-written: the connection infos carry addresses and passwords.
impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("sentinels", &self.sentinels.len())
            .finish_non_exhaustive()
    }
}

impl Resolver {
    pub(crate) fn new<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        master: &str,
        node: Option<SentinelNodeConnectionInfo>,
    ) -> Result<Self, Error> {
        // The redis error would echo the URL, which may carry a password.
        let sentinels = sentinels
            .into_iter()
            .map(|s| s.into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| url_error("sentinel_urls", "not a valid Redis connection URL", &e))?;
        if sentinels.is_empty() {
            return Err(Error::invalid_config(
                "sentinel_urls",
                "at least one sentinel is required",
            ));
        }
        if master.is_empty() {
            return Err(Error::invalid_config("master_name", "must not be empty"));
        }
        Ok(Resolver {
            sentinels,
            master: master.to_owned(),
            node: node.unwrap_or_default(),
        })
    }

    fn client(&self) -> redis::RedisResult<SentinelClient> {
        SentinelClient::build(
            self.sentinels.clone(),
            self.master.clone(),
            Some(self.node.clone()),
            SentinelServerType::Master,
        )
    }

    /// A client for the current primary (asks the sentinels in turn),
    /// bounded by `timeout`. The redis crate's sync Sentinel connections
    /// take no timeout, so the lookup runs on a helper thread that is left
    /// to finish on its own when it takes longer.
    pub(crate) fn primary(&self, timeout: Duration) -> redis::RedisResult<redis::Client> {
        let (tx, rx) = std::sync::mpsc::channel();
        let resolver = self.clone();
        let spawned = std::thread::Builder::new()
            .name("redlease-sentinel".into())
            .spawn(move || {
                let _ = tx.send(resolver.client().and_then(|mut c| c.get_client()));
            });
        if spawned.is_err() {
            // No thread to be had: look up from here, unbounded.
            return self.client()?.get_client();
        }
        rx.recv_timeout(timeout)
            .unwrap_or_else(|_| Err(timed_out()))
    }

    /// As [`primary`](Self::primary), without blocking the executor, and
    /// bounded by `timeout`.
    #[cfg(feature = "aio")]
    pub(crate) async fn primary_async(
        &self,
        timeout: Duration,
    ) -> redis::RedisResult<redis::Client> {
        use futures::future::{select, Either};
        let mut client = self.client()?;
        let resolve = Box::pin(async move { client.async_get_client().await });
        match select(resolve, async_io::Timer::after(timeout)).await {
            Either::Left((result, _)) => result,
            Either::Right(_) => Err(timed_out()),
        }
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

/// Whether a reply says this server is no longer (or not yet) a writable
/// primary: its connections are dropped, so the next one asks the
/// sentinels anew.
pub(crate) fn is_failover_reply(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("READONLY" | "MASTERDOWN"))
}
