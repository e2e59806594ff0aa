//! The connect-time checks, written once: which plain commands a new
//! locker sends and what their replies mean. A front end only sends each
//! [`Ask`] and hands the reply back:
//!
//! ```text
//! let (shared, mut checks) = prepare(source, config, Commands::new);
//! while let Some(ask) = checks.next() {
//!     let reply = send(ask);             // one command, or every primary
//!     checks.settle(&shared, reply)?;    // the first reply times the connect
//! }
//! ```
//!
//! One server: its version (Redis ≥ 7.0, `INFO server`), the eviction
//! policy (`CONFIG GET`, `INFO memory` where `CONFIG` is refused), then
//! the key-names marker.
//! Cluster: sharded pub/sub (Redis ≥ 7), the marker (routed to its own
//! slot), then every primary's eviction policy.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::cluster::{sharded_pubsub_cmd, sharded_pubsub_verdict};
use crate::config::Config;
use crate::driver::state::Shared;
use crate::driver::target::Source;
use crate::error::{Error, Failure};
use crate::eviction;
use crate::key_names::Marker;
use crate::server_version;

/// A new locker's shared state, over the command connections `commands`
/// opens to `source`, and the checks it runs before use.
pub(crate) fn prepare<C>(
    source: Source,
    config: Config,
    commands: impl FnOnce(Source, Duration) -> C,
) -> (Arc<Shared<C>>, Checks) {
    let checks = Checks::new(source.is_cluster(), &config);
    let commands = commands(source.clone(), config.command_timeout);
    (Shared::new(commands, source, config), checks)
}

/// A command to send for the checks.
pub(crate) enum Ask {
    /// To the server (on a cluster: routed by its key, or any node).
    One(redis::Cmd),
    /// To every primary of a cluster.
    EveryPrimary(redis::Cmd),
}

use Step::*;

#[derive(Debug, Clone, Copy)]
enum Step {
    ServerVersion,
    ShardedPubsub,
    EvictionConfig,
    EvictionInfo,
    EvictionEveryPrimary,
    KeyNamesGet,
    KeyNamesSet,
}

/// The checks still to run, and the one whose reply is awaited.
pub(crate) struct Checks {
    steps: VecDeque<Step>,
    current: Option<Step>,
    answered: bool,
    marker: Marker,
}

impl Checks {
    pub(crate) fn new(cluster: bool, config: &Config) -> Self {
        let steps = if cluster {
            vec![ShardedPubsub, KeyNamesGet, EvictionEveryPrimary]
        } else {
            vec![ServerVersion, EvictionConfig, KeyNamesGet]
        };
        Checks {
            steps: steps.into(),
            current: None,
            answered: false,
            marker: Marker::new(&config.namespace, config.key_hash_tags),
        }
    }

    /// The next command to send, or `None` when every check passed.
    pub(crate) fn next(&mut self) -> Option<Ask> {
        let step = self.steps.pop_front()?;
        self.current = Some(step);
        Some(match step {
            ServerVersion => Ask::One(server_version::info_cmd()),
            ShardedPubsub => Ask::One(sharded_pubsub_cmd()),
            EvictionConfig => Ask::One(eviction::config_get_cmd()),
            EvictionInfo => Ask::One(eviction::info_cmd()),
            EvictionEveryPrimary => Ask::EveryPrimary(eviction::config_get_cmd()),
            KeyNamesGet => Ask::One(self.marker.get_cmd()),
            KeyNamesSet => Ask::One(self.marker.set_cmd()),
        })
    }

    /// Takes the reply to the last [`next`](Self::next); the first reply
    /// marks `shared` connected (the connection is open: it times the
    /// connect).
    ///
    /// # Errors
    ///
    /// The connect fails: `ProviderFailed` when the server could not be
    /// reached or refused the credentials, `InvalidConfig` for a server
    /// older than Redis 7.0, a cluster without sharded pub/sub or a
    /// key-names mismatch.
    pub(crate) fn settle<C>(
        &mut self,
        shared: &Shared<C>,
        reply: Result<Value, Failure>,
    ) -> Result<(), Error> {
        if self.handle(reply)? {
            shared.connected();
        }
        Ok(())
    }

    /// As [`settle`](Self::settle); says whether it was the first reply.
    fn handle(&mut self, reply: Result<Value, Failure>) -> Result<bool, Error> {
        let then = match self.current.take() {
            Some(ServerVersion) => server_version::check_info_reply(reply).map(|()| None)?,
            Some(ShardedPubsub) => sharded_pubsub_verdict(reply).map(|()| None)?,
            Some(EvictionConfig) => eviction::check_config_reply(reply)?.then_some(EvictionInfo),
            Some(EvictionInfo) => {
                eviction::report_info_reply(reply);
                None
            }
            Some(EvictionEveryPrimary) => {
                eviction::report_cluster_reply(reply);
                None
            }
            Some(KeyNamesGet) => self.marker.check_get(reply)?.then_some(KeyNamesSet),
            Some(KeyNamesSet) => self.marker.check_set(reply).map(|()| None)?,
            // A reply without a question: nothing to check.
            None => None,
        };
        if let Some(step) = then {
            self.steps.push_front(step);
        }
        Ok(!std::mem::replace(&mut self.answered, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first word (and subcommand) of each command the checks send,
    /// answering each with the reply `answer` gives for it.
    fn run(cluster: bool, answer: impl Fn(&str) -> Result<Value, Failure>) -> Vec<String> {
        let mut checks = Checks::new(cluster, &Config::new("ns"));
        let mut sent = Vec::new();
        let mut first = Vec::new();
        while let Some(ask) = checks.next() {
            let (cmd, every) = match ask {
                Ask::One(cmd) => (cmd, ""),
                Ask::EveryPrimary(cmd) => (cmd, "every primary: "),
            };
            let packed = String::from_utf8_lossy(&cmd.get_packed_command()).into_owned();
            let words: Vec<&str> = packed.lines().skip(2).step_by(2).take(2).collect();
            let name = format!("{every}{}", words.join(" "));
            first.push(checks.handle(answer(&name)).unwrap());
            sent.push(name);
        }
        assert_eq!(first.iter().filter(|f| **f).count(), 1, "one first reply");
        assert!(first[0]);
        sent
    }

    fn refused() -> Result<Value, Failure> {
        Err(Failure::Sent(redis::RedisError::from((
            redis::ErrorKind::Extension,
            "NOPERM",
            "refused".to_owned(),
        ))))
    }

    #[test]
    fn one_server_checks_its_version_eviction_then_reads_and_records_the_marker() {
        let plain = || Ok(Value::BulkString(b"plain".to_vec()));
        assert_eq!(
            run(false, |_| plain()),
            [VERSION, "CONFIG GET", "GET ns:key-names"]
        );
        let fresh = run(false, |c| {
            if c.starts_with("CONFIG") {
                refused()
            } else if c.starts_with("GET") {
                Ok(Value::Nil)
            } else {
                plain()
            }
        });
        assert_eq!(
            fresh,
            [
                VERSION,
                "CONFIG GET",
                "INFO memory",
                "GET ns:key-names",
                "SET ns:key-names"
            ]
        );
    }

    const VERSION: &str = "INFO server";

    #[test]
    fn a_server_older_than_seven_is_refused_naming_its_version() {
        let mut checks = Checks::new(false, &Config::new("ns"));
        let Some(Ask::One(info)) = checks.next() else {
            panic!("the version is asked first");
        };
        assert!(String::from_utf8_lossy(&info.get_packed_command()).contains("INFO"));
        let info = Value::BulkString(b"redis_version:6.2.14\r\n".to_vec());
        let e = checks.handle(Ok(info)).unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
        assert!(e.to_string().contains("Redis 6.2;"), "{e}");
    }

    #[test]
    fn a_cluster_checks_sharded_pubsub_the_marker_then_every_primary() {
        let sent = run(true, |c| {
            Ok(match c {
                "COMMAND INFO" => Value::Array(vec![Value::Int(1)]),
                "GET ns:key-names" => Value::BulkString(b"plain".to_vec()),
                _ => Value::Nil,
            })
        });
        assert_eq!(
            sent,
            [
                "COMMAND INFO",
                "GET ns:key-names",
                "every primary: CONFIG GET"
            ]
        );
    }
}
