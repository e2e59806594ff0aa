//! The optional replication check (the crate docs' "Replication check"): `WAIT n timeout` after an
//! acquire or renew, on the connection that carried the script, and the
//! verdict on its reply.

use std::time::Duration;

use redis::Value;

use crate::config::Config;
use crate::error::{Error, Failure, Operation};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replication {
    required: u32,
    timeout: Duration,
}

impl Replication {
    pub(crate) fn of(config: &Config) -> Option<Self> {
        config
            .min_replicas
            .map(|(required, timeout)| Replication { required, timeout })
    }

    /// `WAIT n timeout-ms`. Never blocks longer than the timeout, which the
    /// config keeps below `command_timeout`.
    pub(crate) fn wait_cmd(&self) -> redis::Cmd {
        redis::cmd("WAIT")
            .arg(self.required)
            .arg(self.timeout.as_millis().max(1) as u64)
            .take()
    }

    /// How many replicas acknowledged, or why that is not enough.
    pub(crate) fn verdict(&self, reply: redis::RedisResult<Value>) -> Result<u32, Error> {
        let acked = match reply {
            Ok(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
            Ok(_) => 0,
            Err(e) => return Err(Failure::Sent(e).into_error(Operation::Replication)),
        };
        let required = self.required;
        if acked < required {
            return Err(Error::ReplicationFailed { acked, required });
        }
        Ok(acked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replication(n: u32) -> Replication {
        Replication::of(&Config::new("n").min_replicas(n, Duration::from_millis(100))).unwrap()
    }

    #[test]
    fn enough_acks_pass_and_too_few_fail_with_the_counts() {
        assert_eq!(replication(1).verdict(Ok(Value::Int(2))).unwrap(), 2);
        match replication(2).verdict(Ok(Value::Int(1))) {
            Err(Error::ReplicationFailed { acked, required }) => {
                assert_eq!((acked, required), (1, 2))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_refused_wait_is_provider_failed() {
        let e = redis::RedisError::from((redis::ErrorKind::Extension, "NOPERM", "x".into()));
        assert_eq!(
            replication(1).verdict(Err(e)).unwrap_err().code(),
            "PROVIDER_FAILED"
        );
    }
}
