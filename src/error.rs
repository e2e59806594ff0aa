//! The one public error type, its stable codes, and how a `redis::RedisError`
//! is sorted into "certainly not applied" and "outcome unknown".

use std::fmt;
use std::time::Duration;

use crate::core::ReplyError;

/// Which operation an error came from.
///
/// Errors say which phase failed so that a caller can tell an acquire that
/// never started from a release whose result is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Opening a connection to Redis.
    Connect,
    /// The acquire script.
    Acquire,
    /// The release script.
    Release,
    /// The renew script.
    Renew,
    /// Loading a script after `NOSCRIPT`.
    LoadScript,
    /// Waiting for replicas to acknowledge (`WAIT`).
    Replication,
    /// Releasing tracked leases at shutdown.
    Shutdown,
    /// An election leader's proclaim script (a new value).
    Proclaim,
    /// The election read script (`leader`).
    Read,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Connect => "connect",
            Operation::Acquire => "acquire",
            Operation::Release => "release",
            Operation::Renew => "renew",
            Operation::LoadScript => "script load",
            Operation::Replication => "replication wait",
            Operation::Shutdown => "shutdown cleanup",
            Operation::Proclaim => "proclaim",
            Operation::Read => "leader read",
        })
    }
}

/// Everything that can go wrong with a lease.
///
/// Match on [`Error::code`] for a stable string, or on the variant. The
/// `Display` and `Debug` forms never contain a key, an owner token or a
/// server address; a Redis error stays reachable through
/// [`std::error::Error::source`].
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Someone else holds the lock and the acquire was not allowed to wait
    /// (or this locker already has a waiter for the key).
    #[error("lock is held by another owner{}", fmt_remaining(*.remaining))]
    Busy {
        /// The holder's remaining lease time, when Redis reported it.
        remaining: Option<Duration>,
    },
    /// The wait ran out before the lock became free.
    #[error("gave up waiting for the lock after {waited:?}{}", fmt_remaining(*.remaining))]
    WaitTimeout {
        /// How long the acquire waited.
        waited: Duration,
        /// The holder's remaining lease time at the last attempt, when known.
        remaining: Option<Duration>,
    },
    /// The locker already has `max_waiters` acquires in progress.
    #[error("too many acquires in progress on this locker (max_waiters = {limit})")]
    QueueFull {
        /// The configured `max_waiters`.
        limit: usize,
    },
    /// The locker already tracks `max_tracked_leases` leases.
    #[error("too many leases held through this locker (max_tracked_leases = {limit})")]
    TooManyLeases {
        /// The configured `max_tracked_leases`.
        limit: usize,
    },
    /// The acquire was cancelled through its [`CancelHandle`](crate::CancelHandle).
    #[error("the acquire was cancelled")]
    Cancelled,
    /// The locker is shutting down or has shut down.
    #[error("the locker is shutting down")]
    ShuttingDown,
    /// The command was certainly not applied: the connection could not be
    /// opened, or Redis answered with an error. When connecting failed, the
    /// message says why in words (`connection refused`, `no such host`,
    /// `authentication failed`, `not a Redis server`, `no such database`,
    /// and where the URL's scheme may not match the port `the TLS handshake
    /// did not complete: is the server speaking TLS?` or `the server closed
    /// the connection: it may expect TLS (rediss://)`, ...), never naming
    /// the address, the user or the password.
    #[error("{}", provider_failed_message(*op, source))]
    ProviderFailed {
        /// The operation that failed.
        op: Operation,
        /// The error reported by the redis crate.
        #[source]
        source: redis::RedisError,
    },
    /// The command may or may not have been applied (timeout, dropped
    /// connection after sending). Never retried automatically.
    #[error("the outcome of the {op} command is unknown")]
    OutcomeUnknown {
        /// The operation whose outcome is unknown.
        op: Operation,
        /// The error reported by the redis crate.
        #[source]
        source: redis::RedisError,
    },
    /// Redis answered with a reply this crate does not understand; the
    /// command may have been applied. Its code is `OUTCOME_UNKNOWN`.
    #[error("the outcome of the {op} command is unknown")]
    UnexpectedReply {
        /// The operation whose reply was not understood.
        op: Operation,
        /// What was wrong with the reply.
        #[source]
        source: ReplyError,
    },
    /// Shutdown could not confirm every cleanup within `shutdown_timeout`.
    #[error("shutdown could not confirm the release of {unconfirmed} lease(s) within {timeout:?}")]
    CleanupTimeout {
        /// Leases whose release was not confirmed.
        unconfirmed: usize,
        /// The configured `shutdown_timeout`.
        timeout: Duration,
    },
    /// Shutdown sent its releases, but Redis refused some of them or failed
    /// while answering (the others were confirmed).
    #[error("shutdown could not confirm the release of {unconfirmed} lease(s): redis refused or failed them")]
    CleanupFailed {
        /// Leases whose release was not confirmed.
        unconfirmed: usize,
        /// The first refusal or failure.
        #[source]
        source: Option<redis::RedisError>,
    },
    /// The key is empty or too long.
    #[error("invalid key: {reason}")]
    InvalidKey {
        /// Why the key was refused (never the key itself).
        reason: String,
    },
    /// Fewer replicas than `min_replicas` acknowledged the acquire or renew
    /// in time; an acquired lease was released again.
    #[error("only {acked} of {required} required replica(s) acknowledged the lease")]
    ReplicationFailed {
        /// Replicas that acknowledged.
        acked: u32,
        /// The configured `min_replicas`.
        required: u32,
    },
    /// A lease kept alive by `with_lock(.., extend(true))` was lost.
    #[error("the lease was lost: {cause}")]
    LockLost {
        /// Why.
        #[source]
        cause: LostCause,
    },
    /// A leader value (an election's `campaign` or `proclaim`) is longer
    /// than [`Config::max_value_bytes`](crate::Config::max_value_bytes);
    /// nothing was sent. The message gives the sizes only, never the value.
    #[error("the leader value is {len} bytes long; max_value_bytes is {max}")]
    ValueTooLarge {
        /// The value's length in bytes.
        len: usize,
        /// The configured `max_value_bytes`.
        max: usize,
    },
    /// An option has a value outside its bounds.
    #[error("invalid config: {option}: {reason}")]
    InvalidConfig {
        /// The option's builder method name.
        option: &'static str,
        /// Why the value was refused.
        reason: String,
    },
}

/// Why a lease kept alive by `with_lock` was lost.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LostCause {
    /// A renewal found the lock gone.
    #[error("a renewal found the lock expired")]
    Expired,
    /// A renewal found someone else holding the lock.
    #[error("a renewal found the lock held by another owner")]
    Conflict,
    /// A renewal failed; the error says how.
    #[error("a renewal failed")]
    RenewFailed(#[source] Box<Error>),
    /// The lease's local deadline passed without a confirmed renewal (Redis
    /// did not answer in time).
    #[error("the lease's deadline passed without a confirmed renewal")]
    DeadlinePassed,
}

fn provider_failed_message(op: Operation, source: &redis::RedisError) -> String {
    match op {
        Operation::Connect => match tls_reason(source) {
            Some(reason) => format!("could not connect to redis: TLS handshake failed: {reason}"),
            None => format!("could not connect to redis: {}", connect_cause(source)),
        },
        op => format!("redis did not apply the {op} command"),
    }
}

/// Why opening a connection failed, in words a person reads. Only the
/// redis crate's kind, code and fixed phrases are looked at, and a fixed
/// phrase is returned: the error's own text can name the address.
pub(crate) fn connect_cause(e: &redis::RedisError) -> &'static str {
    if let Some(hint) = hint_of(e) {
        return hint;
    }
    let has = phrases(e);
    if is_auth_failure(e) {
        "authentication failed"
    } else if e.is_connection_refusal() && !has("lookup") {
        "connection refused"
    } else if has("lookup address|name or service not known|name resolution") {
        "no such host"
    } else if has("db index is out of range|invalid db index") {
        "no such database"
    } else if e.is_timeout() {
        "connection timed out"
    } else if has("tls|certificate|handshake") {
        "TLS handshake failed"
    } else if e.kind() == redis::ErrorKind::Parse || has(NOT_RESP) {
        "not a Redis server"
    } else if e.is_connection_dropped() {
        "the server closed the connection"
    } else {
        "the connection failed"
    }
}

/// Whether a connection was to go over TLS, as far as the locker knows:
/// what [`connect_failed`] may add to a failed connect. Ordered so that
/// the largest of several connections' is theirs together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Transport {
    /// `redis://`.
    Plain,
    /// A unix socket, or not known (a cluster client made by the caller).
    Unknown,
    /// `rediss://`.
    Tls,
}

impl Transport {
    pub(crate) fn of(addr: &redis::ConnectionAddr) -> Self {
        match addr {
            redis::ConnectionAddr::TcpTls { .. } => Transport::Tls,
            redis::ConnectionAddr::Tcp(..) => Transport::Plain,
            _ => Transport::Unknown,
        }
    }
}

// The hints: what a failed connect most likely met when its scheme did
// not match the server's port, in the fixed words shown (naming no
// address). Found by experiment: a plain Redis server reads a TLS
// ClientHello as an inline command and waits for its end of line, which
// never comes (a NUL byte comes first), so it never answers and a
// `rediss://` connect can only fail at its timeout; a TLS port resets the
// connection at once when it reads plain RESP.

/// Over TLS, no answer to the handshake within the timeout.
const TLS_STALLED: &str = "the TLS handshake did not complete: is the server speaking TLS?";
/// Without TLS, the server hung up before answering.
const CLOSED_MAY_EXPECT_TLS: &str =
    "the server closed the connection: it may expect TLS (rediss://)";
/// Without TLS, the server answered something that is not RESP.
const GARBAGE_MAY_EXPECT_TLS: &str = "not a Redis server: it may expect TLS (rediss://)";

/// The hint [`connect_failed`] put on `e`. The redis crate's error does
/// not hand out its inner I/O error to downcast, so the hint is known by
/// its fixed text.
fn hint_of(e: &redis::RedisError) -> Option<&'static str> {
    if e.kind() != redis::ErrorKind::Io {
        return None;
    }
    let text = e.to_string();
    let hints = [TLS_STALLED, CLOSED_MAY_EXPECT_TLS, GARBAGE_MAY_EXPECT_TLS];
    hints.into_iter().find(|hint| text == *hint)
}

/// A connect error with its hint; the redis error stays its source.
#[derive(Debug, thiserror::Error)]
#[error("{hint}")]
struct Hinted {
    hint: &'static str,
    source: redis::RedisError,
}

/// A failed connect over `transport`, with a hint where the scheme may not
/// match the server's port: over TLS, a timeout says that the TLS handshake
/// did not complete; without TLS, a connection the server closed (or
/// answered with something other than RESP) says the server may expect
/// TLS. Such an error becomes an I/O error of the same class (a timeout
/// stays a timeout, a closed connection a dropped one) whose text is the
/// hint's fixed words and whose source is `e`. Other errors (refused,
/// unresolved, answered by Redis) are returned as they are. Used wherever
/// a connection is opened, so that `Locker::connect` and later reconnects
/// say the same.
pub(crate) fn connect_failed(transport: Transport, e: redis::RedisError) -> redis::RedisError {
    if hint_of(&e).is_some() || is_server_reply(&e) || is_auth_failure(&e) {
        return e;
    }
    let has = phrases(&e);
    // The cluster client folds its nodes' errors into one general error,
    // hence the phrases beside the kinds.
    let refused_or_unresolved = e.is_connection_refusal()
        || has("refused|lookup|name or service not known|name resolution|resolve");
    let timed_out = e.is_timeout() || has("timed out|resource temporarily unavailable|would block");
    let dropped = e.is_connection_dropped() || has("reset by peer|broken pipe|end of file|closed");
    let (hint, kind) = match transport {
        _ if refused_or_unresolved => return e,
        Transport::Tls if timed_out => (TLS_STALLED, std::io::ErrorKind::TimedOut),
        Transport::Plain if timed_out => return e,
        Transport::Plain if e.kind() == redis::ErrorKind::Parse || has(NOT_RESP) => {
            (GARBAGE_MAY_EXPECT_TLS, std::io::ErrorKind::InvalidData)
        }
        Transport::Plain if dropped => (CLOSED_MAY_EXPECT_TLS, std::io::ErrorKind::ConnectionReset),
        _ => return e,
    };
    redis::RedisError::from(std::io::Error::new(kind, Hinted { hint, source: e }))
}

/// The reason of a failed TLS handshake, when the cause is one
/// ([`connect_cause`] says "TLS handshake failed") and the redis error's
/// detail names no address: a rustls error such as "invalid peer
/// certificate: UnknownIssuer". A detail with a digit-dot-digit, a colon
/// followed by digits, `@`, `//` or a quote may carry a host, port or URL and is
/// left out.
fn tls_reason(e: &redis::RedisError) -> Option<String> {
    if connect_cause(e) != "TLS handshake failed" {
        return None;
    }
    let detail = e.detail().map_or_else(|| e.to_string(), str::to_owned);
    let detail = detail.trim();
    let bytes = detail.as_bytes();
    let dotted = bytes
        .windows(3)
        .any(|w| w[0].is_ascii_digit() && w[1] == b'.' && w[2].is_ascii_digit());
    let port = bytes
        .windows(2)
        .any(|w| w[0] == b':' && w[1].is_ascii_digit());
    let names_address = dotted
        || port
        || detail.contains(['@', '"'])
        || detail.contains("//")
        || detail.to_ascii_lowercase().contains("localhost");
    (!detail.is_empty() && !names_address && detail.len() <= 200).then(|| detail.to_owned())
}

/// The `InvalidConfig` for a URL `redis::Client::open` (or
/// `IntoConnectionInfo`) refused. The redis error is not kept: it would
/// echo the URL, which may carry a password. A `rediss://` URL without TLS
/// support compiled in names the feature to enable.
pub(crate) fn url_error(option: &'static str, what: &'static str, e: &redis::RedisError) -> Error {
    let text = e.to_string().to_ascii_lowercase();
    let no_tls =
        text.contains("can't connect with tls") || text.contains("tls") && text.contains("feature");
    let reason = "rediss:// (TLS) needs the redlease feature `tls-rustls`, which is not enabled";
    Error::invalid_config(option, if no_tls { reason } else { what })
}

/// Whether Redis refused the connection's credentials (or wanted some):
/// connecting fails then, since no command could run.
pub(crate) fn is_auth_failure(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
        || phrases(e)("invalid username-password|invalid password")
}

/// A test of `e`'s text, in lower case, for any of the `|`-separated
/// phrases it is given: the redis crate's fixed words for what went wrong.
fn phrases(e: &redis::RedisError) -> impl Fn(&str) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    move |phrases| phrases.split('|').any(|p| text.contains(p))
}

/// What the redis crate says of a reply that is not RESP (besides
/// `ErrorKind::Parse`).
const NOT_RESP: &str = "invalid response|protocol";

fn fmt_remaining(remaining: Option<Duration>) -> String {
    remaining.map_or_else(String::new, |d| {
        format!(" (holder's lease has {} ms left)", d.as_millis())
    })
}

impl Error {
    /// The stable code of this error, e.g. `"LOCK_BUSY"`.
    ///
    /// ```
    /// let e = redlease::Error::Busy { remaining: None };
    /// assert_eq!(e.code(), "LOCK_BUSY");
    /// ```
    pub fn code(&self) -> &'static str {
        self.class().0
    }

    /// The stable code of each variant, and whether the same call made
    /// again may succeed (but see [`is_retryable`](Self::is_retryable) for
    /// `PROVIDER_FAILED`).
    fn class(&self) -> (&'static str, bool) {
        match self {
            Error::Busy { .. } => ("LOCK_BUSY", true),
            Error::WaitTimeout { .. } => ("WAIT_TIMEOUT", true),
            Error::QueueFull { .. } => ("QUEUE_FULL", true),
            Error::TooManyLeases { .. } => ("TOO_MANY_LEASES", true),
            Error::Cancelled => ("CANCELLED", false),
            Error::ShuttingDown => ("SHUTTING_DOWN", false),
            Error::ProviderFailed { .. } => ("PROVIDER_FAILED", true),
            Error::OutcomeUnknown { .. } | Error::UnexpectedReply { .. } => {
                ("OUTCOME_UNKNOWN", true)
            }
            Error::CleanupTimeout { .. } => ("CLEANUP_TIMEOUT", false),
            Error::CleanupFailed { .. } => ("CLEANUP_FAILED", false),
            Error::InvalidKey { .. } => ("INVALID_KEY", false),
            Error::InvalidConfig { .. } => ("INVALID_CONFIG", false),
            Error::ReplicationFailed { .. } => ("REPLICATION_FAILED", true),
            Error::LockLost { .. } => ("LOCK_LOST", false),
            Error::ValueTooLarge { .. } => ("VALUE_TOO_LARGE", false),
        }
    }

    /// True when the command may have been applied although it reported an
    /// error (`OUTCOME_UNKNOWN`: a timeout, a dropped connection after
    /// sending, an unexpected reply); such commands are never retried by
    /// this crate.
    ///
    /// ```
    /// let e = redlease::Error::Busy { remaining: None };
    /// assert!(!e.is_outcome_unknown());
    /// ```
    pub fn is_outcome_unknown(&self) -> bool {
        self.code() == "OUTCOME_UNKNOWN"
    }

    /// True for `LOCK_BUSY`: someone else holds the lock and the acquire
    /// was not allowed to wait (see
    /// [`holder_remaining`](Self::holder_remaining) for how long).
    ///
    /// ```
    /// let e = redlease::Error::Busy { remaining: None };
    /// assert!(e.is_busy());
    /// ```
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// True when a time bound ran out: the acquire's wait (`WAIT_TIMEOUT`),
    /// shutdown's `shutdown_timeout` (`CLEANUP_TIMEOUT`), or a Redis
    /// command or connect that got no answer within `command_timeout`
    /// (`OUTCOME_UNKNOWN` or `PROVIDER_FAILED` whose
    /// [`redis_error`](Self::redis_error) is a timeout).
    ///
    /// ```
    /// use std::time::Duration;
    /// let e = redlease::Error::WaitTimeout { waited: Duration::from_secs(5), remaining: None };
    /// assert!(e.is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::WaitTimeout { .. } | Error::CleanupTimeout { .. } => true,
            _ => self.redis_error().is_some_and(|e| e.is_timeout()),
        }
    }

    /// True when the same call, made again later without changing anything,
    /// may succeed: `LOCK_BUSY`, `WAIT_TIMEOUT`, `QUEUE_FULL`,
    /// `TOO_MANY_LEASES`, `REPLICATION_FAILED`, `OUTCOME_UNKNOWN` (a new
    /// acquire uses a new token; the unknown one is cleaned up by token) and
    /// `PROVIDER_FAILED` except refused credentials. False for errors that
    /// another try cannot fix: `INVALID_KEY`, `INVALID_CONFIG`,
    /// `VALUE_TOO_LARGE`, `CANCELLED`,
    /// `SHUTTING_DOWN`, `LOCK_LOST` (acquire again instead), and shutdown's
    /// `CLEANUP_TIMEOUT` and `CLEANUP_FAILED`.
    ///
    /// This crate never retries on its own beyond what the docs of each
    /// operation say (a waiting acquire keeps trying while its wait lasts);
    /// the helper is for the caller's own retry loop, which should back off.
    ///
    /// ```
    /// let e = redlease::Error::Busy { remaining: None };
    /// assert!(e.is_retryable());
    /// assert!(!redlease::Error::ShuttingDown.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::ProviderFailed { source, .. } => !is_auth_failure(source),
            _ => self.class().1,
        }
    }

    /// The holder's remaining lease time carried by `Busy` and `WaitTimeout`.
    pub fn holder_remaining(&self) -> Option<Duration> {
        match self {
            Error::Busy { remaining } | Error::WaitTimeout { remaining, .. } => *remaining,
            _ => None,
        }
    }

    /// The Redis error behind a `ProviderFailed` or `OutcomeUnknown`.
    pub fn redis_error(&self) -> Option<&redis::RedisError> {
        match self {
            Error::ProviderFailed { source, .. } | Error::OutcomeUnknown { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }

    pub(crate) fn invalid_config(option: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            option,
            reason: reason.into(),
        }
    }

    /// A failure to open a connection: nothing was sent.
    pub(crate) fn from_connect(source: redis::RedisError) -> Self {
        Failure::NotSent(source).into_error(Operation::Connect)
    }
}

/// A failed command, sorted by whether it reached Redis.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The connection could not be opened: nothing was sent.
    NotSent(redis::RedisError),
    /// Sent (or possibly sent) on an established connection.
    Sent(redis::RedisError),
}

impl From<redis::RedisError> for Failure {
    fn from(e: redis::RedisError) -> Self {
        Failure::Sent(e)
    }
}

impl Failure {
    /// Whether Redis answered with an error: it processed the command.
    pub(crate) fn is_server_reply(&self) -> bool {
        matches!(self, Failure::Sent(e) if is_server_reply(e))
    }

    /// Whether it leaves the command's outcome unknown (it became
    /// [`Error::OutcomeUnknown`]).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn is_outcome_unknown(&self) -> bool {
        matches!(self, Failure::Sent(e) if !is_server_reply(e))
    }

    /// The error of `op`. A server error reply means Redis processed and
    /// rejected the command; every other failure of a sent command
    /// (timeout, dropped connection, parse error) leaves the outcome
    /// unknown, because the command may have been applied.
    pub(crate) fn into_error(self, op: Operation) -> Error {
        match self {
            Failure::Sent(source) if !is_server_reply(&source) => {
                Error::OutcomeUnknown { op, source }
            }
            Failure::NotSent(source) | Failure::Sent(source) => {
                Error::ProviderFailed { op, source }
            }
        }
    }

    /// A cluster-only command asked of a connection to one server:
    /// refused before anything is sent.
    pub(crate) fn not_a_cluster() -> Self {
        let e = (redis::ErrorKind::Client, "not a cluster connection");
        Failure::NotSent(redis::RedisError::from(e))
    }
}

/// A description of a redis error for logs: its kind and code only, since
/// the detail can name a server address.
pub(crate) fn describe(e: &redis::RedisError) -> String {
    match e.code() {
        Some(code) => format!("{:?} ({code})", e.kind()),
        None if e.is_timeout() => format!("{:?} (timeout)", e.kind()),
        None if e.is_connection_refusal() => format!("{:?} (connection refused)", e.kind()),
        None if e.is_connection_dropped() => format!("{:?} (connection dropped)", e.kind()),
        None => format!("{:?}", e.kind()),
    }
}

/// Whether Redis itself answered with an error (the command was processed
/// and rejected, so it certainly did not take effect).
pub(crate) fn is_server_reply(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    ) || (e.code().is_some() && !e.is_io_error())
}

/// The error of a command or lookup that got no answer within its bound,
/// like the redis crate's own timeout (`is_timeout()`).
pub(crate) fn timed_out() -> redis::RedisError {
    std::io::Error::from(std::io::ErrorKind::TimedOut).into()
}

/// Whether the error is Redis saying it does not have the script cached.
pub(crate) fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

// A hand-written Debug: the derived one would print the redis error, whose
// detail can name a server address (MOVED replies, connection info).
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("code", &self.code());
        let d = match self {
            Error::Busy { remaining } => d.field("remaining", remaining),
            Error::WaitTimeout { waited, remaining } => {
                d.field("waited", waited).field("remaining", remaining)
            }
            Error::QueueFull { limit } | Error::TooManyLeases { limit } => d.field("limit", limit),
            Error::ProviderFailed { op, source } | Error::OutcomeUnknown { op, source } => d
                .field("op", op)
                .field("redis_kind", &source.kind())
                .field("redis_code", &source.code()),
            Error::UnexpectedReply { op, source } => d.field("op", op).field("reply", source),
            Error::CleanupTimeout {
                unconfirmed,
                timeout,
            } => d
                .field("unconfirmed", unconfirmed)
                .field("timeout", timeout),
            Error::CleanupFailed {
                unconfirmed,
                source,
            } => d
                .field("unconfirmed", unconfirmed)
                .field("redis_kind", &source.as_ref().map(|e| e.kind()))
                .field("redis_code", &source.as_ref().and_then(|e| e.code())),
            Error::InvalidKey { reason } => d.field("reason", reason),
            Error::InvalidConfig { option, reason } => {
                d.field("option", option).field("reason", reason)
            }
            Error::ReplicationFailed { acked, required } => {
                d.field("acked", acked).field("required", required)
            }
            Error::LockLost { cause } => d.field("cause", cause),
            Error::ValueTooLarge { len, max } => d.field("len", len).field("max", max),
            Error::Cancelled | Error::ShuttingDown => &mut d,
        };
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_timeout() -> redis::RedisError {
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out",
        ))
    }

    fn io(kind: std::io::ErrorKind) -> redis::RedisError {
        redis::RedisError::from(std::io::Error::from(kind))
    }

    fn connect_display(transport: Transport, e: redis::RedisError) -> String {
        Error::from_connect(connect_failed(transport, e)).to_string()
    }

    #[test]
    fn a_tls_connect_that_timed_out_says_the_handshake_did_not_complete() {
        let e = connect_failed(Transport::Tls, io(std::io::ErrorKind::WouldBlock));
        assert!(e.is_timeout(), "still a timeout");
        assert!(std::error::Error::source(&e).is_some());
        let e = Error::from_connect(e);
        assert_eq!(
            e.to_string(),
            "could not connect to redis: the TLS handshake did not complete: is the server speaking TLS?"
        );
        assert!(e.is_timeout() && e.is_retryable());
    }

    #[test]
    fn a_plain_connect_the_server_closed_says_it_may_expect_tls() {
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::UnexpectedEof,
            std::io::ErrorKind::BrokenPipe,
        ] {
            let e = connect_failed(Transport::Plain, io(kind));
            assert!(e.is_connection_dropped(), "still a dropped connection");
            assert_eq!(
                connect_display(Transport::Plain, e),
                "could not connect to redis: the server closed the connection: it may expect TLS (rediss://)"
            );
        }
        let garbage = redis::RedisError::from((redis::ErrorKind::Parse, "invalid response"));
        assert_eq!(
            connect_display(Transport::Plain, garbage),
            "could not connect to redis: not a Redis server: it may expect TLS (rediss://)"
        );
    }

    #[test]
    fn other_connect_failures_get_no_tls_hint() {
        let refused = || io(std::io::ErrorKind::ConnectionRefused);
        let expected = "could not connect to redis: connection refused";
        assert_eq!(connect_display(Transport::Tls, refused()), expected);
        assert_eq!(connect_display(Transport::Plain, refused()), expected);
        let timeout = io(std::io::ErrorKind::TimedOut);
        assert_eq!(
            connect_display(Transport::Plain, timeout),
            "could not connect to redis: connection timed out"
        );
        let reset = io(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            connect_display(Transport::Unknown, reset),
            "could not connect to redis: the server closed the connection"
        );
        let wrongpass =
            redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "WRONGPASS"));
        assert_eq!(
            connect_display(Transport::Tls, wrongpass),
            "could not connect to redis: authentication failed"
        );
    }

    #[test]
    fn a_hint_is_put_on_once() {
        let once = connect_failed(Transport::Tls, io_timeout());
        let twice = connect_failed(Transport::Tls, once.clone());
        assert_eq!(once.to_string(), twice.to_string());
        let source = std::error::Error::source(&twice)
            .and_then(std::error::Error::source)
            .map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("timed out"), "the original is kept");
    }

    #[test]
    fn timeout_is_outcome_unknown_and_keeps_the_redis_error_as_source() {
        let e = Failure::Sent(io_timeout()).into_error(Operation::Acquire);
        assert_eq!(e.code(), "OUTCOME_UNKNOWN");
        assert!(e.is_outcome_unknown());
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn server_error_reply_is_provider_failed() {
        let src = redis::RedisError::from((redis::ErrorKind::Extension, "OOM", "oom".into()));
        let e = Failure::Sent(src).into_error(Operation::Acquire);
        assert_eq!(e.code(), "PROVIDER_FAILED");
    }

    #[test]
    fn every_code_is_distinct_per_kind() {
        let all = [
            Error::Busy { remaining: None },
            Error::WaitTimeout {
                waited: Duration::ZERO,
                remaining: None,
            },
            Error::QueueFull { limit: 1 },
            Error::Cancelled,
            Error::ShuttingDown,
            Error::from_connect(io_timeout()),
            Failure::Sent(io_timeout()).into_error(Operation::Release),
            Error::CleanupTimeout {
                unconfirmed: 1,
                timeout: Duration::ZERO,
            },
            Error::InvalidKey { reason: "x".into() },
            Error::invalid_config("lease", "x"),
            Error::ReplicationFailed {
                acked: 0,
                required: 1,
            },
            Error::LockLost {
                cause: LostCause::Expired,
            },
        ];
        let codes: std::collections::HashSet<_> = all.iter().map(Error::code).collect();
        assert_eq!(codes.len(), all.len());
    }

    #[test]
    fn classification_helpers_agree_with_the_codes() {
        let busy = Error::Busy { remaining: None };
        assert!(busy.is_busy() && busy.is_retryable() && !busy.is_timeout());
        let waited = Error::WaitTimeout {
            waited: Duration::ZERO,
            remaining: None,
        };
        assert!(waited.is_timeout() && waited.is_retryable() && !waited.is_busy());
        let unknown = Failure::Sent(io_timeout()).into_error(Operation::Renew);
        assert!(unknown.is_outcome_unknown() && unknown.is_timeout() && unknown.is_retryable());
        let oom = redis::RedisError::from((redis::ErrorKind::Extension, "OOM", "oom".into()));
        let refused = Failure::Sent(oom).into_error(Operation::Acquire);
        assert!(refused.is_retryable() && !refused.is_timeout() && !refused.is_outcome_unknown());
        let auth = Error::from_connect(redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "auth",
        )));
        assert_eq!(auth.code(), "PROVIDER_FAILED");
        assert!(!auth.is_retryable());
        for final_ in [
            Error::Cancelled,
            Error::ShuttingDown,
            Error::InvalidKey { reason: "x".into() },
            Error::invalid_config("lease", "x"),
            Error::LockLost {
                cause: LostCause::Expired,
            },
        ] {
            assert!(!final_.is_retryable(), "{}", final_.code());
            assert!(!final_.is_busy() && !final_.is_timeout() && !final_.is_outcome_unknown());
        }
    }

    fn tls_failure(detail: &str) -> Error {
        Error::from_connect(redis::RedisError::from((
            redis::ErrorKind::Io,
            "TLS handshake failed",
            detail.to_owned(),
        )))
    }

    #[test]
    fn a_tls_failure_keeps_its_reason_only_when_it_names_no_address() {
        assert_eq!(
            tls_failure("invalid peer certificate: UnknownIssuer").to_string(),
            "could not connect to redis: TLS handshake failed: invalid peer certificate: UnknownIssuer"
        );
        for detail in [
            "certificate not valid for name \"redis.internal\"",
            "could not connect to 10.0.0.7",
            "handshake with redis.internal:6380 failed",
            "rediss://user:pw@host/0",
            "certificate for localhost expired",
        ] {
            assert_eq!(
                tls_failure(detail).to_string(),
                "could not connect to redis: TLS handshake failed",
                "{detail}"
            );
        }
    }

    #[test]
    fn rediss_without_tls_support_names_the_feature() {
        let e = url_error(
            "url",
            "not a valid Redis connection URL",
            &redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "can't connect with TLS, the feature is not enabled",
            )),
        );
        assert_eq!(e.code(), "INVALID_CONFIG");
        assert!(e.to_string().contains("`tls-rustls`"), "{e}");
    }
}
