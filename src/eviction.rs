//! The connect-time check of Redis' eviction policy (the crate docs' "Errors"): a Redis that
//! may evict keys can drop a held lock, so anything but `noeviction` is
//! logged as `REDIS_EVICTION_UNSAFE`.

use std::collections::HashMap;

use crate::error::{describe, is_auth_failure, Error, Failure};

/// `CONFIG GET maxmemory-policy`, decodable from RESP2 and RESP3 alike.
pub(crate) fn config_get_cmd() -> redis::Cmd {
    redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .take()
}

/// `INFO memory`, the fallback where `CONFIG` is disabled.
pub(crate) fn info_cmd() -> redis::Cmd {
    redis::cmd("INFO").arg("memory").take()
}

/// The policy in a `CONFIG GET maxmemory-policy` reply (RESP2 or RESP3).
fn policy_from_config_reply(reply: redis::Value) -> Option<String> {
    redis::from_redis_value::<HashMap<String, String>>(reply)
        .ok()?
        .remove("maxmemory-policy")
}

fn policy_from_info(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|l| l.strip_prefix("maxmemory_policy:"))
        .map(str::trim)
}

/// The policies in a `CONFIG GET maxmemory-policy` sent to every primary of
/// a cluster (a map of node to reply), or in one node's reply.
fn policies_from_cluster_reply(reply: redis::Value) -> Vec<Option<String>> {
    match reply {
        redis::Value::Map(entries) => entries
            .into_iter()
            .map(|(_, v)| policy_from_config_reply(v))
            .collect(),
        other => vec![policy_from_config_reply(other)],
    }
}

/// `CONFIG GET maxmemory-policy` routed to every primary of a cluster,
/// where each node has its own configuration.
pub(crate) fn every_primary() -> redis::cluster_routing::RoutingInfo {
    use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None))
}

/// Logs the verdict on a `CONFIG GET maxmemory-policy` sent to every
/// primary ([`every_primary`]), or that it was refused: the first unsafe
/// policy, else unchecked if any primary did not say.
pub(crate) fn report_cluster_reply(reply: Result<redis::Value, Failure>) {
    let policies = match reply {
        Ok(reply) => policies_from_cluster_reply(reply),
        Err(Failure::NotSent(e) | Failure::Sent(e)) => return report_refused(&e),
    };
    let unsafe_one = policies
        .iter()
        .flatten()
        .find(|p| p.as_str() != "noeviction");
    match unsafe_one {
        Some(policy) => report(Some(policy)),
        None if policies.is_empty() || policies.iter().any(Option::is_none) => report(None),
        None => report(Some("noeviction")),
    }
}

/// Logs the verdict on a policy read from the server.
fn report(policy: Option<&str>) {
    match policy {
        Some("noeviction") => {}
        Some(policy) => log::error!(
            target: "redlease",
            "REDIS_EVICTION_UNSAFE: maxmemory-policy is {policy}; Redis may evict lock keys \
             and break mutual exclusion; set maxmemory-policy to noeviction"
        ),
        None => log::debug!(
            target: "redlease",
            "REDIS_EVICTION_UNCHECKED: the server did not report its maxmemory-policy"
        ),
    }
}

fn report_refused(e: &redis::RedisError) {
    log::debug!(
        target: "redlease",
        "REDIS_EVICTION_UNCHECKED: CONFIG GET maxmemory-policy was refused ({}); trying INFO memory",
        describe(e)
    );
}

/// Checks the reply to a connect's [`config_get_cmd`]: reports the policy
/// and says `false`, or says `true` where `CONFIG` was refused (logged) and
/// [`info_cmd`] is to be asked next ([`report_info_reply`]). A command
/// never sent, or refused for want of credentials, fails the connect.
pub(crate) fn check_config_reply(reply: Result<redis::Value, Failure>) -> Result<bool, Error> {
    match reply {
        Ok(value) => report(policy_from_config_reply(value).as_deref()),
        Err(Failure::Sent(e)) if !is_auth_failure(&e) => {
            report_refused(&e);
            return Ok(true);
        }
        Err(Failure::NotSent(e) | Failure::Sent(e)) => return Err(Error::from_connect(e)),
    }
    Ok(false)
}

/// Reports the policy in the reply to [`info_cmd`], or that none came.
pub(crate) fn report_info_reply(reply: Result<redis::Value, Failure>) {
    let info = reply
        .ok()
        .and_then(|r| redis::from_redis_value::<String>(r).ok());
    report(info.as_deref().and_then(policy_from_info));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_primarys_policy_is_read_from_a_cluster_reply() {
        let reply = |p: &str| {
            redis::Value::Array(vec![
                redis::Value::BulkString(b"maxmemory-policy".to_vec()),
                redis::Value::BulkString(p.as_bytes().to_vec()),
            ])
        };
        let map = redis::Value::Map(vec![
            (
                redis::Value::SimpleString("a:1".into()),
                reply("noeviction"),
            ),
            (
                redis::Value::SimpleString("b:2".into()),
                reply("allkeys-lru"),
            ),
        ]);
        assert_eq!(
            policies_from_cluster_reply(map),
            vec![
                Some("noeviction".to_owned()),
                Some("allkeys-lru".to_owned())
            ]
        );
        assert_eq!(
            policies_from_cluster_reply(reply("noeviction")),
            vec![Some("noeviction".to_owned())]
        );
    }

    #[test]
    fn the_policy_is_read_from_info_memory() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\n";
        assert_eq!(policy_from_info(info), Some("allkeys-lru"));
        assert_eq!(policy_from_info("# Memory\r\n"), None);
    }
}
