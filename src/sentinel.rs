//! Redis Sentinel: where the current primary is. Both front ends and the
//! subscriber ask a [`Resolver`] for the primary each time they open a
//! connection (at connect, and after a connection error, `READONLY` or
//! `MASTERDOWN` made them drop the old one), through the redis crate's
//! `SentinelClient` (which also checks with `ROLE` that the address it
//! got answers as a primary).

use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::IntoConnectionInfo;

use crate::config::ensure;
use crate::error::{connect_failed, timed_out, url_error, Error, Transport};

/// How a locker behind Redis Sentinel connects to the primary, and which
/// certificates it trusts: the options of
/// [`blocking::Locker::connect_sentinel_with_options`](crate::blocking::Locker::connect_sentinel_with_options)
/// (and its async twin).
///
/// The sentinels' own password goes in their URLs
/// (`redis://:sentinel-secret@10.0.0.1:26379`, `rediss://` for TLS); the
/// primary's credentials, db and TLS mode are set here, since the primary's
/// address comes from the sentinels. With feature `tls-rustls`,
/// `certificates` (feature `tls-rustls`) gives the roots (and a client
/// certificate) for a private CA: they are used for every `rediss://`
/// sentinel URL and, with [`primary_tls`](Self::primary_tls), for the
/// primary.
///
/// `Debug` shows whether a password and certificates are set, never the
/// username, the password or the certificates.
///
/// # Examples
///
/// ```no_run
/// use redlease::{blocking::Locker, Config, SentinelOptions};
///
/// let sentinels = ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"];
/// let options = SentinelOptions::new()
///     .primary_password("primary-secret")
///     .primary_db(2);
/// let locker = Locker::connect_sentinel_with_options(sentinels, "mymaster", options, Config::new("my-service"))?;
/// # Ok::<(), redlease::Error>(())
/// ```
///
/// Over TLS with a private CA (feature `tls-rustls`):
///
/// ```ignore
/// let options = SentinelOptions::new()
///     .primary_password("primary-secret")
///     .primary_tls(redis::TlsMode::Secure)
///     .certificates(redis::TlsCertificates {
///         client_tls: None,
///         root_cert: Some(std::fs::read("ca.pem")?),
///     });
/// let sentinels = ["rediss://:sentinel-secret@10.0.0.1:26380", "rediss://:sentinel-secret@10.0.0.2:26380"];
/// let locker = Locker::connect_sentinel_with_options(sentinels, "mymaster", options, config)?;
/// ```
#[derive(Clone, Default)]
pub struct SentinelOptions {
    username: Option<String>,
    password: Option<String>,
    db: i64,
    tls: Option<redis::TlsMode>,
    #[cfg(feature = "tls-rustls")]
    certificates: Option<redis::TlsCertificates>,
}

// Hand-written: the derived one would print the credentials.
impl std::fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("SentinelOptions");
        d.field("primary_username", &self.username.is_some())
            .field("primary_password", &self.password.is_some())
            .field("primary_db", &self.db)
            .field("primary_tls", &self.tls);
        #[cfg(feature = "tls-rustls")]
        d.field("certificates", &self.certificates.is_some());
        d.finish()
    }
}

impl SentinelOptions {
    /// No credentials, db 0, plain TCP to the primary, the platform's
    /// roots for `rediss://` sentinel URLs.
    pub fn new() -> Self {
        Self::default()
    }

    crate::config::setters! {
        /// The username the primary (and, after a failover, the replica that
        /// replaces it) wants (ACL users); see
        /// [`primary_password`](Self::primary_password).
        primary_username(username: impl Into<String>) => username = Some(username.into());

        /// The password the primary wants (its `requirepass`, or the ACL
        /// user's password); the one `sentinel auth-pass` gives the sentinels.
        primary_password(password: impl Into<String>) => password = Some(password.into());

        /// The database on the primary (default 0).
        primary_db(db: i64) => db = db;

        /// Connects to the primary with TLS: `Secure` checks its certificate
        /// against the platform's roots, or the
        /// `certificates` (feature `tls-rustls`) given; `Insecure` checks
        /// nothing and needs the redis crate's `tls-rustls-insecure`. Without
        /// TLS support compiled in, connecting fails.
        primary_tls(mode: redis::TlsMode) => tls = Some(mode);

        /// Roots (and a client certificate and key for servers that ask for
        /// one) for a private CA, trusted on every `rediss://` sentinel URL
        /// and, with [`primary_tls`](Self::primary_tls)`(Secure)`, on the
        /// primary (the redis crate's `SentinelClientBuilder` certificates).
        #[cfg(feature = "tls-rustls")]
        certificates(certificates: redis::TlsCertificates) => certificates = Some(certificates);
    }

    fn node(&self) -> SentinelNodeConnectionInfo {
        let mut info = redis::RedisConnectionInfo::default().set_db(self.db);
        if let Some(username) = &self.username {
            info = info.set_username(username);
        }
        if let Some(password) = &self.password {
            info = info.set_password(password);
        }
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info);
        match self.tls {
            Some(mode) => node.set_tls_mode(mode),
            None => node,
        }
    }

    /// Whether the primary's connections need the certificates, which only
    /// the redis crate's `SentinelClientBuilder` passes on.
    #[cfg(feature = "tls-rustls")]
    fn primary_certificates(&self) -> Option<&redis::TlsCertificates> {
        match self.tls {
            Some(redis::TlsMode::Secure) => self.certificates.as_ref(),
            _ => None,
        }
    }
}

/// How to find the primary: the sentinels, the master name, and how to
/// connect to the primary (credentials, db, TLS). Cheap to clone; each
/// resolution builds a fresh `SentinelClient` (no state shared between
/// threads or tasks, no lock held across a wait).
#[derive(Clone)]
pub(crate) struct Resolver {
    /// With feature `tls-rustls` and certificates given, every `rediss://`
    /// one carries them (the redis crate's `Client::build_with_tls`).
    sentinels: Vec<redis::ConnectionInfo>,
    master: String,
    primary: Primary,
}

/// How the primary is connected to.
#[derive(Clone)]
enum Primary {
    /// As the redis crate's `SentinelClient::build` takes it.
    Node(SentinelNodeConnectionInfo),
    /// TLS with certificates: only the redis crate's
    /// `SentinelClientBuilder` passes them to the primary's connections.
    #[cfg(feature = "tls-rustls")]
    WithCertificates(SentinelOptions),
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
        // The redis error is not kept: it would echo the URL, which may
        // carry a password.
        let sentinels = sentinels
            .into_iter()
            .map(|s| s.into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| url_error("sentinel_urls", "not a valid Redis connection URL", &e))?;
        ensure(
            !sentinels.is_empty(),
            "sentinel_urls",
            "at least one sentinel is required",
        )?;
        ensure(!master.is_empty(), "master_name", "must not be empty")?;
        Ok(Resolver {
            sentinels,
            master: master.to_owned(),
            primary: Primary::Node(node.unwrap_or_default()),
        })
    }

    pub(crate) fn with_options<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        master: &str,
        options: SentinelOptions,
    ) -> Result<Self, Error> {
        #[allow(unused_mut, reason = "only with feature tls-rustls")]
        let mut resolver = Resolver::new(sentinels, master, Some(options.node()))?;
        #[cfg(feature = "tls-rustls")]
        if let Some(certificates) = &options.certificates {
            resolver.sentinels = with_certificates(resolver.sentinels, certificates)?;
        }
        #[cfg(feature = "tls-rustls")]
        if options.primary_certificates().is_some() {
            // The builder takes one set of sentinel credentials.
            let first = resolver.sentinels[0].redis_settings();
            let same = |s: &redis::ConnectionInfo| {
                let r = s.redis_settings();
                r.username() == first.username() && r.password() == first.password()
            };
            ensure(
                resolver.sentinels.iter().all(same),
                "sentinel_urls",
                "with certificates for the primary, every sentinel URL must carry the same username and password",
            )?;
            resolver.primary = Primary::WithCertificates(options);
            // Parses the certificates now rather than at every lookup.
            resolver.client().map_err(|_| {
                Error::invalid_config("certificates", "a PEM block that does not parse")
            })?;
        }
        Ok(resolver)
    }

    fn client(&self) -> redis::RedisResult<SentinelClient> {
        match &self.primary {
            Primary::Node(node) => SentinelClient::build(
                self.sentinels.clone(),
                self.master.clone(),
                Some(node.clone()),
                SentinelServerType::Master,
            ),
            #[cfg(feature = "tls-rustls")]
            Primary::WithCertificates(options) => self.client_with_certificates(options),
        }
    }

    /// The redis crate's `SentinelClientBuilder`: the sentinels' addresses
    /// (their TLS parameters included), credentials and protocol, and the
    /// primary's settings with the certificates.
    #[cfg(feature = "tls-rustls")]
    fn client_with_certificates(
        &self,
        options: &SentinelOptions,
    ) -> redis::RedisResult<SentinelClient> {
        use redis::sentinel::SentinelClientBuilder;
        let mut builder = SentinelClientBuilder::new(
            self.sentinels.iter().map(|s| s.addr().clone()),
            &self.master,
            SentinelServerType::Master,
        )?;
        let sentinel = self.sentinels[0].redis_settings();
        if let Some(username) = sentinel.username() {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = sentinel.password() {
            builder = builder.set_client_to_sentinel_password(password);
        }
        builder = builder
            .set_client_to_sentinel_protocol(sentinel.protocol())
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
            .set_client_to_redis_db(options.db);
        if let Some(username) = &options.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &options.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(certificates) = options.primary_certificates() {
            builder = builder.set_client_to_redis_certificates(certificates.clone());
        }
        builder.build()
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
            .map_err(|e| self.lookup_failed(e))
    }

    /// A failed lookup, with a hint where the sentinels' scheme may not
    /// match their ports ([`connect_failed`]; over TLS if any sentinel is).
    fn lookup_failed(&self, e: redis::RedisError) -> redis::RedisError {
        let each = self.sentinels.iter().map(|s| Transport::of(s.addr()));
        connect_failed(each.max().unwrap_or(Transport::Plain), e)
    }

    /// As [`primary`](Self::primary), without blocking the executor, and
    /// bounded by `timeout`.
    #[cfg(feature = "aio")]
    pub(crate) async fn primary_async(
        &self,
        timeout: Duration,
    ) -> redis::RedisResult<redis::Client> {
        let mut client = self.client()?;
        let until = crate::clock::now().checked_add(timeout);
        let resolved = crate::aio::within(until, client.async_get_client()).await;
        resolved
            .unwrap_or_else(|| Err(timed_out()))
            .map_err(|e| self.lookup_failed(e))
    }
}

/// Every `rediss://` sentinel with the certificates (the redis crate's
/// `Client::build_with_tls`); plain `redis://` ones as they are.
#[cfg(feature = "tls-rustls")]
fn with_certificates(
    sentinels: Vec<redis::ConnectionInfo>,
    certificates: &redis::TlsCertificates,
) -> Result<Vec<redis::ConnectionInfo>, Error> {
    sentinels
        .into_iter()
        .map(|info| match info.addr() {
            redis::ConnectionAddr::TcpTls { .. } => {
                redis::Client::build_with_tls(info, certificates.clone())
                    .map(|client| client.get_connection_info().clone())
                    .map_err(|_| {
                        Error::invalid_config("certificates", "a PEM block that does not parse")
                    })
            }
            _ => Ok(info),
        })
        .collect()
}

/// Whether a reply says this server is no longer (or not yet) a writable
/// primary: its connections are dropped, so the next one asks the
/// sentinels anew.
pub(crate) fn is_failover_reply(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("READONLY" | "MASTERDOWN"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_debug_shows_no_credentials() {
        let options = SentinelOptions::new()
            .primary_username("app-user-91")
            .primary_password("primary-secret-17")
            .primary_db(3);
        #[cfg(feature = "tls-rustls")]
        let options = options.certificates(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
        });
        let shown = format!("{options:?}");
        for secret in ["app-user-91", "primary-secret-17", "BEGIN"] {
            assert!(!shown.contains(secret), "{shown} shows {secret}");
        }
        assert!(shown.contains("primary_password: true"), "{shown}");
    }

    #[test]
    fn resolver_debug_shows_no_address_or_password() {
        let resolver = Resolver::with_options(
            ["redis://:sentinel-secret-5@10.1.2.3:26379"],
            "mymaster",
            SentinelOptions::new().primary_password("primary-secret-17"),
        )
        .expect("valid options");
        let shown = format!("{resolver:?}");
        for secret in [
            "sentinel-secret-5",
            "10.1.2.3",
            "26379",
            "primary-secret-17",
        ] {
            assert!(!shown.contains(secret), "{shown} shows {secret}");
        }
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn certificates_for_the_primary_need_one_sentinel_password() {
        let options = SentinelOptions::new()
            .primary_tls(redis::TlsMode::Secure)
            .certificates(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(Vec::new()),
            });
        let e = Resolver::with_options(
            [
                "rediss://:one@127.0.0.1:26379",
                "rediss://:two@127.0.0.1:26380",
            ],
            "mymaster",
            options,
        )
        .unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("one") && !shown.contains("two"), "{shown}");
    }

    #[test]
    fn no_sentinels_or_no_master_name_is_invalid_config() {
        let none: [&str; 0] = [];
        let e = Resolver::with_options(none, "mymaster", SentinelOptions::new()).unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
        let e = Resolver::with_options(["redis://127.0.0.1:26379"], "", SentinelOptions::new())
            .unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
    }
}
