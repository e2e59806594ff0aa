//! Validated builders: `Config` for a locker, `AcquireOptions` for one acquire.
//!
//! Builders never fail while chaining; [`Config::validate`] (called by every
//! `Locker` constructor) and each acquire check the values and name the
//! offending option in `InvalidConfig`.

use std::time::Duration;

use crate::cancel::CancelHandle;
use crate::error::Error;

/// Builder methods that each set one field, written
/// `name(arg: Type) => field = value;` under the method's own docs: every
/// such method takes `self` and returns it with the field set.
macro_rules! setters {
    ($($(#[$attr:meta])* $name:ident($($arg:ident: $ty:ty),+) => $($field:ident).+ = $value:expr;)*) => {$(
        $(#[$attr])*
        pub fn $name(mut self, $($arg: $ty),+) -> Self {
            self.$($field).+ = $value;
            self
        }
    )*};
}
pub(crate) use setters;

/// The longest lease Redis' `PX` accepts here: 15 decimal digits of ms.
const MAX_LEASE_MS: u128 = 999_999_999_999_999;

/// How a locker talks to Redis and how its acquires behave.
///
/// ```
/// use std::time::Duration;
/// let config = redlease::Config::new("my-service")
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_secs(5));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) namespace: String,
    pub(crate) lease: Duration,
    pub(crate) wait: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) notify_poll_interval: Duration,
    pub(crate) max_waiters: usize,
    pub(crate) max_tracked_leases: usize,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) max_key_bytes: usize,
    pub(crate) command_timeout: Duration,
    pub(crate) min_replicas: Option<(u32, Duration)>,
    pub(crate) fence_counter_ttl: Option<Duration>,
    /// The `locker` label of the metrics; `None`: the namespace.
    pub(crate) metrics_label: Option<String>,
    pub(crate) handover: bool,
    /// `None`: tied to the round trip measured at connect.
    pub(crate) claim_window: Option<Duration>,
    pub(crate) max_value_bytes: usize,
    pub(crate) key_hash_tags: bool,
}

impl Config {
    /// A configuration for `namespace`, which prefixes every name stored in
    /// Redis. Lockers that share a Redis, a namespace and a key share the lock
    /// and its fence counter. There is no default namespace. A namespace
    /// is not empty and contains none of `{`, `}` (the hash tag of every
    /// name) and the glob characters `*`, `?`, `[`, `]`, `\` (which would
    /// turn the namespace's ACL patterns into wildcards); a locker refuses
    /// one that does with [`Error::InvalidConfig`] when it connects.
    ///
    /// Defaults: lease 10 s, wait 5 s, `poll_interval` 25 ms,
    /// `notify_poll_interval` 250 ms, `max_waiters` 128, `max_tracked_leases`
    /// 10 000, `shutdown_timeout` 5 s, `max_key_bytes` 1024,
    /// `command_timeout` 2 s, `max_value_bytes` 4 KiB.
    pub fn new(namespace: impl Into<String>) -> Self {
        Config {
            namespace: namespace.into(),
            lease: Duration::from_secs(10),
            wait: Duration::from_secs(5),
            poll_interval: Duration::from_millis(25),
            notify_poll_interval: Duration::from_millis(250),
            max_waiters: 128,
            max_tracked_leases: 10_000,
            shutdown_timeout: Duration::from_secs(5),
            max_key_bytes: 1024,
            command_timeout: Duration::from_secs(2),
            min_replicas: None,
            fence_counter_ttl: None,
            metrics_label: None,
            handover: true,
            claim_window: None,
            max_value_bytes: 4096,
            key_hash_tags: false,
        }
    }

    setters! {
        /// Whether a waiting locker registers in the key's queue in Redis, so
        /// that a release hands the lock to the next waiting process in arrival
        /// order (docs/PROTOCOL.md §4). Default on; off: every waiting locker tries
        /// again after a release notification, and whoever lands first wins.
        /// Every kind: a freed permit's slot goes to the
        /// next waiting process, and a read-write lease goes to the writer
        /// first in its queue or lets the readers at its head in together; an
        /// election's candidates do not use it yet (they race as with it off). A
        /// locker whose ACL does not allow the queues' keys
        /// (`~<ns>:lock-queue:{*`, `~<ns>:lock-queued:{*`, `~<ns>:lock-reg:{*`
        /// and their `sem-` and `rw-` twins: the crate docs' ACL table)
        /// turns it off by itself at its first refusal (logged once as
        /// `LOCK_HANDOVER_UNAVAILABLE`).
        handover(on: bool) => handover = on;

        /// Whether a key's Redis hash tag decides where its names are stored
        /// (docs/PROTOCOL.md §2). Default off: every name of a key is hashed by
        /// the key's own digest, `<ns>:lock:{<sha(key)>}`, so keys spread over
        /// a Redis Cluster's slots. On: a key with a hash tag (the text between
        /// its first `{` and the next `}`, when not empty, as Redis defines it)
        /// is stored as `<ns>:lock:{<sha(tag)>}:<sha(key)>` (and likewise for
        /// every kind), so keys of one tag share a slot, and on Redis Cluster
        /// a multi-key lease of them runs as one script
        /// ([`Locker::acquire_all`](crate::Locker::acquire_all)); they also
        /// share a release channel. Keys without a tag are named as with it off.
        ///
        /// It renames tagged keys: every locker of a namespace must use the
        /// same setting, or two of them would lock one tagged key under two
        /// names. So at connect a locker reads the setting the namespace's
        /// lockers recorded in `<ns>:key-names` (one `GET`; the first locker
        /// records it with `SET ... NX GET`) and refuses to connect on a
        /// mismatch. After Redis lost its data the next locker to connect
        /// records it again; lockers already connected do not check again, so
        /// switch the setting with every locker of the namespace stopped.
        /// Lockers of versions before the check neither record nor check it.
        /// `connect` fails with `InvalidConfig` (option `key_hash_tags`) when
        /// the namespace's lockers recorded the other setting, or, with this
        /// on, when Redis refuses the marker (an ACL without
        /// `~<ns>:key-names`; with it off the locker logs `KEY_NAMES_UNCHECKED`
        /// and connects).
        ///
        /// # Examples
        ///
        /// ```
        /// let config = redlease::Config::new("billing").key_hash_tags(true);
        /// // "acct:{7}:in" and "acct:{7}:out" now share a slot.
        /// # let _ = config;
        /// ```
        key_hash_tags(on: bool) => key_hash_tags = on;

        /// How long a lease handed over to this locker lasts before its claim
        /// (one round trip) or its extension (sent an eighth of the way, for a
        /// lock's grant taken from its notice: docs/PROTOCOL.md §4.3) makes
        /// it the full lease, at most the lease; after it, the next waiting
        /// process may have it. It must cover the release notification's
        /// delivery and one round trip; a paused or dead grantee costs the
        /// others this long. Default: four times what the locker's first
        /// command took at connect (a connect and a round trip), and at least
        /// 100 ms.
        claim_window(window: Duration) => claim_window = Some(window);

        /// Default lease length for acquires: 1 ms to 999 999 999 999 999 ms,
        /// counted in whole milliseconds (any sub-millisecond part is dropped).
        lease(lease: Duration) => lease = lease;

        /// Default time an acquire waits for a busy lock. `Duration::ZERO` tries
        /// once; `Duration::MAX` waits without a deadline.
        wait(wait: Duration) => wait = wait;

        /// Safety poll interval while release notifications are unavailable.
        poll_interval(interval: Duration) => poll_interval = interval;

        /// Safety poll interval while release notifications are subscribed; it
        /// covers notifications lost in transit.
        notify_poll_interval(interval: Duration) => notify_poll_interval = interval;

        /// Most acquires in progress at once on one locker (waiting or trying).
        max_waiters(max: usize) => max_waiters = max;

        /// Most leases one locker tracks for cleanup at shutdown.
        max_tracked_leases(max: usize) => max_tracked_leases = max;

        /// Bound on the whole of [`shutdown`](crate::blocking::Locker::shutdown).
        shutdown_timeout(timeout: Duration) => shutdown_timeout = timeout;

        /// Longest key accepted, in UTF-8 bytes.
        max_key_bytes(max: usize) => max_key_bytes = max;

        /// Longest leader value accepted by an election's `campaign` and
        /// `proclaim`, in bytes: default 4 KiB, at most 1 MiB. A larger value
        /// is refused with [`Error::ValueTooLarge`] before anything is sent.
        ///
        /// ```
        /// let config = redlease::Config::new("my-service").max_value_bytes(512);
        /// assert!(config.validate().is_ok());
        /// assert!(redlease::Config::new("s").max_value_bytes(2 << 20).validate().is_err());
        /// ```
        max_value_bytes(max: usize) => max_value_bytes = max;

        /// Bound on connecting and on each command; past it the command's outcome
        /// is unknown.
        command_timeout(timeout: Duration) => command_timeout = timeout;

        /// After every acquire and renew, waits (`WAIT n timeout`) until `n`
        /// replicas acknowledged the write. Fewer acknowledgements release the
        /// lease and fail with [`Error::ReplicationFailed`]. Every lease must be at
        /// least 1.5 × `timeout`. The wait holds the connection it runs on, so
        /// keep `timeout` short.
        min_replicas(n: u32, timeout: Duration) => min_replicas = Some((n, timeout));

        /// Lets a key's fence counter expire after it was unused for `ttl`
        /// (default: counters never expire, one stays per key ever locked).
        ///
        /// This stays safe because a missing counter is seeded from Redis `TIME`
        /// in ms × 1000: a re-created counter starts above every fence handed out
        /// before, as long as the key averaged fewer than 1000 acquires per
        /// millisecond since its counter was first seeded and the server clock
        /// never went back. It would not be safe on a server whose clock can be
        /// set backwards by more than `ttl`.
        fence_counter_ttl(ttl: Duration) => fence_counter_ttl = Some(ttl);

        /// The value of the `locker` label on every metric this locker records
        /// with feature `metrics` (default: the namespace), so that several
        /// lockers of one process can be told apart. Without the feature it is
        /// validated and otherwise unused.
        ///
        /// The label is shown to whoever reads the metrics: never put a key or
        /// a secret in it. Keys never appear in a metric's name or labels.
        ///
        /// # Errors
        ///
        /// [`validate`](Self::validate) (and so `connect`) fails with
        /// [`Error::InvalidConfig`] for an empty label, one longer than
        /// [`MAX_METRICS_LABEL_BYTES`](Self::MAX_METRICS_LABEL_BYTES) bytes, or
        /// one with a control character.
        ///
        /// # Examples
        ///
        /// ```
        /// let config = redlease::Config::new("billing").metrics_label("billing-eu");
        /// assert_eq!(config.metrics_label_value(), "billing-eu");
        /// # config.validate().unwrap();
        /// ```
        metrics_label(label: impl Into<String>) => metrics_label = Some(label.into());
    }

    /// The longest [`metrics_label`](Self::metrics_label), in bytes.
    pub const MAX_METRICS_LABEL_BYTES: usize = 128;

    /// The `locker` label this configuration gives its metrics: the
    /// [`metrics_label`](Self::metrics_label), or the namespace.
    pub fn metrics_label_value(&self) -> &str {
        self.metrics_label.as_deref().unwrap_or(&self.namespace)
    }

    /// The namespace this configuration was made with.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Checks every option.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the first option that is out of bounds.
    pub fn validate(&self) -> Result<(), Error> {
        let ns = &self.namespace;
        ensure(!ns.is_empty(), "namespace", "must not be empty")?;
        ensure(
            !ns.contains(['{', '}']),
            "namespace",
            "must not contain '{' or '}' (they would change the Redis Cluster hash tag)",
        )?;
        // An ACL pattern for the namespace's names (README, "Least privilege")
        // would read them as wildcards and match other namespaces' names.
        ensure(
            !ns.contains(['*', '?', '[', ']', '\\']),
            "namespace",
            "must not contain the glob characters '*', '?', '[', ']' or '\\' \
             (the ACL patterns of the namespace would match other namespaces' names)",
        )?;
        if let Some(label) = &self.metrics_label {
            ensure(!label.is_empty(), "metrics_label", "must not be empty")?;
            let max = Config::MAX_METRICS_LABEL_BYTES;
            ensure(
                label.len() <= max,
                "metrics_label",
                format!("must be at most {max} bytes, got {}", label.len()),
            )?;
            ensure(
                !label.chars().any(char::is_control),
                "metrics_label",
                "must not contain control characters",
            )?;
        }
        lease_ms(self.lease, "lease")?;
        for (interval, option) in [
            (self.poll_interval, "poll_interval"),
            (self.notify_poll_interval, "notify_poll_interval"),
            (self.shutdown_timeout, "shutdown_timeout"),
            (self.command_timeout, "command_timeout"),
        ] {
            ensure(!interval.is_zero(), option, "must be greater than zero")?;
        }
        for (n, option) in [
            (self.max_waiters, "max_waiters"),
            (self.max_tracked_leases, "max_tracked_leases"),
            (self.max_key_bytes, "max_key_bytes"),
        ] {
            ensure(n > 0, option, "must be at least 1")?;
        }
        ensure(
            self.max_value_bytes <= MAX_VALUE_BYTES,
            "max_value_bytes",
            format!("must be at most {MAX_VALUE_BYTES} (1 MiB)"),
        )?;
        if let Some(ttl) = self.fence_counter_ttl {
            lease_ms(ttl, "fence_counter_ttl")?;
        }
        if let Some(window) = self.claim_window {
            lease_ms(window, "claim_window")?;
        }
        if let Some((n, timeout)) = self.min_replicas {
            let option = "min_replicas";
            ensure(n > 0, option, "must ask for at least 1 replica")?;
            ensure(!timeout.is_zero(), option, "must be greater than zero")?;
            ensure(
                timeout < self.command_timeout,
                option,
                "the replication timeout must be shorter than command_timeout",
            )?;
            check_lease_covers_replication(self.lease, timeout)?;
        }
        Ok(())
    }
}

/// `InvalidConfig` for `option` with `why` unless `ok`.
pub(crate) fn ensure(ok: bool, option: &'static str, why: impl Into<String>) -> Result<(), Error> {
    ok.then_some(())
        .ok_or_else(|| Error::invalid_config(option, why))
}

/// The largest `max_value_bytes` (1 MiB).
const MAX_VALUE_BYTES: usize = 1 << 20;

/// The lease in whole milliseconds, checked against Redis' bounds.
fn lease_ms(lease: Duration, option: &'static str) -> Result<u64, Error> {
    let ms = lease.as_millis();
    if ms == 0 || ms > MAX_LEASE_MS {
        return Err(Error::invalid_config(
            option,
            format!("must be between 1 ms and {MAX_LEASE_MS} ms"),
        ));
    }
    // Bounded by MAX_LEASE_MS above, so it fits.
    Ok(ms as u64)
}

/// A lease must last at least 1.5 × the replication timeout (the crate docs' "Replication check"), or
/// the wait for replicas could eat the lease.
fn check_lease_covers_replication(lease: Duration, timeout: Duration) -> Result<(), Error> {
    // In integers: 1.5 in floating point would refuse 300 ms against 200 ms.
    ensure(
        lease.as_nanos() * 2 >= timeout.as_nanos() * 3,
        "min_replicas",
        "the lease must be at least 1.5 times the replication timeout",
    )
}

/// Per-acquire overrides of the locker's defaults.
///
/// ```
/// use std::time::Duration;
/// let options = redlease::AcquireOptions::new()
///     .wait(Duration::ZERO)
///     .lease(Duration::from_secs(30));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) cancel: Option<CancelHandle>,
}

impl AcquireOptions {
    /// Options that keep every default of the locker's [`Config`].
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// How long this acquire may wait; `Duration::ZERO` tries once.
        wait(wait: Duration) => wait = Some(wait);

        /// The lease length of this acquire.
        lease(lease: Duration) => lease = Some(lease);

        /// Lets another thread end this acquire's wait with
        /// [`Error::Cancelled`].
        cancel(handle: CancelHandle) => cancel = Some(handle);
    }

    /// Fills in the locker's defaults and checks the lease.
    pub(crate) fn resolve(&self, config: &Config) -> Result<ResolvedOptions, Error> {
        let lease = self.lease.unwrap_or(config.lease);
        let lease_ms = lease_ms(lease, "lease")?;
        if let Some((_, timeout)) = config.min_replicas {
            check_lease_covers_replication(lease, timeout)?;
        }
        Ok(ResolvedOptions {
            wait: self.wait.unwrap_or(config.wait),
            lease_ms,
        })
    }
}

/// An acquire's effective wait and lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResolvedOptions {
    pub(crate) wait: Duration,
    pub(crate) lease_ms: u64,
}

/// Options of `with_lock`: how long to wait, the lease, and whether to keep
/// the lease alive while the closure runs.
///
/// ```
/// use std::time::Duration;
/// let options = redlease::WithLock::new()
///     .wait(Duration::from_secs(10))
///     .lease(Duration::from_secs(30))
///     .extend(true);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct WithLock {
    pub(crate) acquire: AcquireOptions,
    pub(crate) extend: bool,
}

impl WithLock {
    /// The locker's default wait and lease, no extension.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// How long to wait for the lock; `Duration::ZERO` tries once.
        wait(wait: Duration) => acquire.wait = Some(wait);

        /// The lease length.
        lease(lease: Duration) => acquire.lease = Some(lease);

        /// Renew the lease to its full length every lease/2 while the closure
        /// runs, and signal [`LockLost`](crate::Error::LockLost) through the
        /// closure's loss signal if a renewal fails or the lease runs out.
        extend(extend: bool) => extend = extend;

        /// Lets another thread cancel the wait (blocking front end).
        cancel(handle: CancelHandle) => acquire.cancel = Some(handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option_of(e: Error) -> &'static str {
        match e {
            Error::InvalidConfig { option, .. } => option,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        Config::new("ns").validate().unwrap();
    }

    #[test]
    fn metrics_label_defaults_to_the_namespace_and_is_bounded() {
        assert_eq!(Config::new("ns").metrics_label_value(), "ns");
        assert_eq!(
            Config::new("ns").metrics_label("x").metrics_label_value(),
            "x"
        );
        let longest = "a".repeat(Config::MAX_METRICS_LABEL_BYTES);
        assert!(Config::new("ns").metrics_label(longest).validate().is_ok());
        let too_long = "a".repeat(Config::MAX_METRICS_LABEL_BYTES + 1);
        for label in [String::new(), too_long, "a\nb".to_string()] {
            assert_eq!(
                option_of(
                    Config::new("ns")
                        .metrics_label(label)
                        .validate()
                        .unwrap_err()
                ),
                "metrics_label"
            );
        }
    }

    #[test]
    fn empty_namespace_is_refused() {
        assert_eq!(
            option_of(Config::new("").validate().unwrap_err()),
            "namespace"
        );
    }

    #[test]
    fn namespace_with_a_brace_is_refused() {
        for ns in ["a{b", "a}b"] {
            assert_eq!(
                option_of(Config::new(ns).validate().unwrap_err()),
                "namespace"
            );
        }
    }

    #[test]
    fn lease_bounds_are_one_ms_to_fifteen_nines() {
        let ok = |d| Config::new("ns").lease(d).validate().is_ok();
        assert!(!ok(Duration::ZERO));
        assert!(!ok(Duration::from_micros(999)));
        assert!(ok(Duration::from_millis(1)));
        assert!(ok(Duration::from_millis(999_999_999_999_999)));
        assert!(!ok(Duration::from_millis(1_000_000_000_000_000)));
        assert!(!ok(Duration::MAX));
    }

    #[test]
    fn zero_intervals_and_limits_name_their_option() {
        let cases: [(Config, &str); 6] = [
            (
                Config::new("n").poll_interval(Duration::ZERO),
                "poll_interval",
            ),
            (
                Config::new("n").notify_poll_interval(Duration::ZERO),
                "notify_poll_interval",
            ),
            (
                Config::new("n").command_timeout(Duration::ZERO),
                "command_timeout",
            ),
            (Config::new("n").max_waiters(0), "max_waiters"),
            (Config::new("n").max_tracked_leases(0), "max_tracked_leases"),
            (Config::new("n").max_key_bytes(0), "max_key_bytes"),
        ];
        for (config, option) in cases {
            assert_eq!(option_of(config.validate().unwrap_err()), option);
        }
    }

    #[test]
    fn replication_needs_a_lease_of_one_and_a_half_timeouts() {
        let base = Config::new("n").lease(Duration::from_millis(1500));
        assert!(base
            .clone()
            .min_replicas(1, Duration::from_secs(1))
            .validate()
            .is_ok());
        let e = base
            .clone()
            .min_replicas(1, Duration::from_millis(1001))
            .validate()
            .unwrap_err();
        assert_eq!(option_of(e), "min_replicas");
        assert!(base
            .min_replicas(0, Duration::from_millis(10))
            .validate()
            .is_err());
        let config = Config::new("n").min_replicas(1, Duration::from_secs(1));
        assert!(AcquireOptions::new()
            .lease(Duration::from_secs(1))
            .resolve(&config)
            .is_err());
    }

    #[test]
    fn acquire_options_fall_back_to_the_config() {
        let config = Config::new("n").wait(Duration::from_secs(3));
        let r = AcquireOptions::new().resolve(&config).unwrap();
        assert_eq!(r.wait, Duration::from_secs(3));
        assert_eq!(r.lease_ms, 10_000);
        let r = AcquireOptions::new()
            .lease(Duration::from_millis(1500))
            .resolve(&config)
            .unwrap();
        assert_eq!(r.lease_ms, 1500);
        assert!(AcquireOptions::new()
            .lease(Duration::ZERO)
            .resolve(&config)
            .is_err());
    }
}
