//! `redlease`: run a command while holding a lease on a Redis key, with a
//! fencing token; or show a key's lease status, or an election's leader.
//!
//! ```text
//! redlease run [OPTIONS] KEY [--] COMMAND [ARGS...]
//! redlease status [--json] [--permits N] KEY
//! redlease leader [--json] [--watch] NAME
//! redlease elect [OPTIONS] NAME [--] COMMAND [ARGS...]
//! ```
//!
//! See `redlease --help` and the README's "Command-line tool" section for
//! the options and exit codes.

mod child;
mod cli;
mod connect;
mod duration;
mod held;
mod holder;
mod leader;
mod output;
mod run;
mod signals;
mod status;

use std::process::ExitCode;
use std::time::Instant;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use sha2::{Digest, Sha256};

use crate::cli::{exit, Cli, Command, Global};
use crate::output::Out;

/// Longest key accepted (the library's default `max_key_bytes`).
const MAX_KEY_BYTES: usize = 1024;

fn main() -> ExitCode {
    // The hidden mode in which `run` starts the command (see child.rs):
    // before anything else, so no signal handler or thread exists.
    if let Some(code) = child::exec_if_asked() {
        return ExitCode::from(code);
    }
    // Usage errors exit with 2 here, before anything touches Redis.
    let cli = parse().unwrap_or_else(|e| with_hints(e).exit());
    let out = Out::new(cli.global.quiet, cli.global.verbose);
    out.install_logger();
    let resolve = |sub, keys: &[&str]| {
        Target::resolve(&cli.global, keys, out).map_err(|why| usage_error(sub, why))
    };
    let code = match &cli.command {
        Command::Run(args) => resolve("run", &args.keys()).and_then(|t| run::run(t, args, out)),
        Command::Status(args) => {
            resolve("status", &[&args.key]).and_then(|t| status::status(t, args, out))
        }
        Command::Leader(args) => {
            resolve("leader", &[&args.name]).and_then(|t| leader::leader(t, args, out))
        }
        Command::Elect(args) => resolve("elect", &[&args.name]).and_then(|t| {
            let value = leader::value_of(args).map_err(|why| usage_error("elect", why))?;
            run::run(t, &args.to_run(value), out)
        }),
    };
    ExitCode::from(code.unwrap_or_else(|code| code))
}

/// The command line, as `Cli::try_parse`, and where the URL and the CA
/// came from (the option or its variable), which messages depend on.
fn parse() -> Result<Cli, clap::Error> {
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut Cli::command()))?;
    let from_env = |id| matches.value_source(id) == Some(ValueSource::EnvVariable);
    cli.global.url_from_env = from_env("url");
    cli.global.tls_ca_cert_from_env = from_env("tls_ca_cert");
    Ok(cli)
}

/// Adds a tip to an unknown option after KEY: it may be a command that
/// starts with `-`.
fn with_hints(mut e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // `args_os`: an argument that is not UTF-8 is itself a usage error to
    // report (clap's), which `args` would turn into a panic.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let is_run = args.iter().any(|a| a == "run");
    if e.kind() == ErrorKind::UnknownArgument && is_run && !args.iter().any(|a| a == "--") {
        e.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![
                "a command whose first word starts with '-' goes after `--`: \
                 redlease run [OPTIONS] KEY -- COMMAND [ARGS...]"
                    .into(),
            ]),
        );
    }
    e
}

/// The one clock read of the binary.
#[expect(
    clippy::disallowed_methods,
    reason = "the CLI's driver-side clock read (progress, deadlines)"
)]
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Where the lock lives: a Redis client (not yet connected) and the
/// namespace, both checked.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) client: redis::Client,
    pub(crate) namespace: String,
}

impl Target {
    /// Where the user pointed the tool, as `host:port` (or the socket
    /// path): what error messages may show. Never the user or password.
    pub(crate) fn address(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }

    /// Reports that the `what` could not be read from Redis, and `why`;
    /// the exit code.
    pub(crate) fn unreadable(&self, out: Out, what: &str, why: impl std::fmt::Display) -> u8 {
        let at = self.address();
        out.fatal(format_args!(
            "cannot read the {what} from Redis at {at}: {why}"
        ));
        exit::UNAVAILABLE
    }

    /// Checks the URL, namespace and keys (KEY, then `run`'s `--also`
    /// keys) without any network traffic; `Err` is a usage error's words.
    /// A key set's size and repeats are the library's to check.
    fn resolve(global: &Global, keys: &[&str], out: Out) -> Result<Self, String> {
        let (url, url_from) = connect::url(global)?.ok_or(
            "no Redis URL: pass --url URL or set REDLEASE_URL (or REDIS_URL); there is no default",
        )?;
        let namespace = global.namespace.as_deref().ok_or(
            "no namespace: pass --namespace NAMESPACE or set REDLEASE_NAMESPACE \
             (there is no default)",
        )?;
        redlease::Config::new(namespace)
            .validate()
            .map_err(|e| describe_invalid(&e))?;
        for (i, key) in keys.iter().enumerate() {
            // KEY alone is "key"; with --also keys each is named by position.
            let which = match keys.len() {
                1 => "key".to_owned(),
                _ => format!("key {}", i + 1),
            };
            let why = match key.len() {
                0 => "must not be empty".to_owned(),
                n if n <= MAX_KEY_BYTES => continue,
                n => format!("is {n} bytes long; at most {MAX_KEY_BYTES} are allowed"),
            };
            return Err(format!("invalid {which}: {why}"));
        }
        // Parsing does not connect.
        let client = connect::client(global, &url, url_from, out)?;
        Ok(Target {
            client,
            namespace: namespace.to_owned(),
        })
    }

    /// `<ns>:<kind>:{<sha>}`, the name `kind` of `key` (SHA-256 of the key
    /// inside a hash tag): its `lock`, `lock-fence` counter, `lock-holder`
    /// record (who holds it, as `run` records it, never the owner token;
    /// see `holder.rs`), the `elect` lease of its election or its
    /// semaphore's `sem-permits` count (docs/PROTOCOL.md §5.2).
    pub(crate) fn name(&self, kind: &str, key: &str) -> String {
        let sha = Sha256::digest(key.as_bytes());
        format!("{}:{kind}:{{{sha:x}}}", self.namespace)
    }

    /// `<ns>:<kind>:{<sha>}:<slot>`: a slot of `key`'s semaphore, as its
    /// lease (`sem`), fence counter (`sem-fence`) or holder record
    /// (`sem-holder`); all share the hash tag.
    pub(crate) fn slot_name(&self, kind: &str, key: &str, slot: u32) -> String {
        format!("{}:{slot}", self.name(kind, key))
    }
}

/// Prints a usage error in clap's style and returns exit code 2.
pub(crate) fn usage_error(sub: &str, msg: impl std::fmt::Display) -> u8 {
    eprintln!("error: {msg}\n\nFor more information, try 'redlease {sub} --help'.");
    exit::USAGE
}

/// A configuration error in command-line terms (`invalid --lease: ...`).
pub(crate) fn describe_invalid(e: &redlease::Error) -> String {
    match e {
        redlease::Error::InvalidConfig { option, reason } => {
            format!("invalid --{}: {reason}", option.replace('_', "-"))
        }
        other => other.to_string(),
    }
}

/// A library error with the kind of its Redis cause, never the cause's
/// full text (it can name a server address).
pub(crate) fn describe_error(e: &redlease::Error) -> String {
    match e.redis_error() {
        Some(cause) => format!("{e} ({}; {})", describe_redis(cause), e.code()),
        None => format!("{e} ({})", e.code()),
    }
}

/// Whether Redis refused the credentials (or wanted some).
pub(crate) fn is_auth_failure(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}

/// A Redis error's kind in words, without its detail.
pub(crate) fn describe_redis(e: &redis::RedisError) -> String {
    let kinds = [
        (e.is_connection_refusal(), "connection refused"),
        (is_auth_failure(e), "authentication failed"),
        (e.is_timeout(), "timed out"),
        (e.is_connection_dropped(), "connection dropped"),
    ];
    match (kinds.iter().find(|(is, _)| *is), e.code()) {
        (Some((_, words)), _) => (*words).to_owned(),
        (None, Some(code)) => format!("server error {code}"),
        (None, None) => format!("{:?}", e.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_library_layout() {
        let target = Target {
            client: redis::Client::open("redis://127.0.0.1:1/0").unwrap(),
            namespace: "ns".to_owned(),
        };
        let sha = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(target.name("lock", "abc"), format!("ns:lock:{{{sha}}}"));
        assert_eq!(
            target.name("lock-fence", "abc"),
            format!("ns:lock-fence:{{{sha}}}")
        );
        assert_eq!(
            target.name("lock-holder", "abc"),
            format!("ns:lock-holder:{{{sha}}}")
        );
        assert_eq!(
            target.name("sem-permits", "abc"),
            format!("ns:sem-permits:{{{sha}}}")
        );
        assert_eq!(
            target.slot_name("sem", "abc", 3),
            format!("ns:sem:{{{sha}}}:3")
        );
        assert_eq!(
            target.slot_name("sem-fence", "abc", 0),
            format!("ns:sem-fence:{{{sha}}}:0")
        );
        assert_eq!(
            target.slot_name("sem-holder", "abc", 1023),
            format!("ns:sem-holder:{{{sha}}}:1023")
        );
    }
}
