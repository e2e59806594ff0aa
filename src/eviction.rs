//! The connect-time check of Redis' eviction policy (SPEC §6): a Redis that
//! may evict keys can drop a held lock, so anything but `noeviction` is
//! logged as `REDIS_EVICTION_UNSAFE`.

use std::collections::HashMap;

use crate::error::describe;

/// `CONFIG GET maxmemory-policy`, decodable from RESP2 and RESP3 alike.
pub(crate) fn config_get_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    cmd
}

/// `INFO memory`, the fallback where `CONFIG` is disabled.
pub(crate) fn info_cmd() -> redis::Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("memory");
    cmd
}

pub(crate) fn policy_from_config(reply: &HashMap<String, String>) -> Option<&str> {
    reply.get("maxmemory-policy").map(String::as_str)
}

pub(crate) fn policy_from_info(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|l| l.strip_prefix("maxmemory_policy:"))
        .map(str::trim)
}

/// Logs the verdict on a policy read from the server.
pub(crate) fn report(policy: Option<&str>) {
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

pub(crate) fn report_refused(e: &redis::RedisError) {
    log::debug!(
        target: "redlease",
        "REDIS_EVICTION_UNCHECKED: CONFIG GET maxmemory-policy was refused ({}); trying INFO memory",
        describe(e)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_info_memory() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\n";
        assert_eq!(policy_from_info(info), Some("allkeys-lru"));
        assert_eq!(policy_from_info("# Memory\r\n"), None);
    }
}
