//! Redis Cluster routing helpers: the slot of a name (CRC16 of its hash
//! tag) and the slot map read from `CLUSTER SLOTS`. The redis crate routes
//! commands; these only serve the per-key notification subscriptions it
//! cannot route.

use redis::cluster::ClusterClient;
use redis::Value;

use crate::config::Config;
use crate::error::{Error, Failure, Operation};

/// The cluster client a locker builds for `nodes` (the command timeout on
/// connects and replies, `retries` when given), and the first node's info
/// (credentials, protocol) for the per-node notification connections.
pub(crate) fn cluster_client(
    infos: Vec<redis::ConnectionInfo>,
    config: &Config,
    retries: Option<u32>,
) -> Result<(ClusterClient, Option<redis::ConnectionInfo>), Error> {
    let template = infos.first().cloned();
    // `TRYAGAIN` and the like are waited out within a tenth of the command
    // timeout over the 16 retries rather than the crate's default of
    // seconds: a release then still has the time to go again without the
    // hand-over's keys (a slot migration that split them).
    let step_ms = u64::try_from(config.command_timeout.as_millis() / 80)
        .unwrap_or(u64::MAX)
        .max(2);
    let mut builder = ClusterClient::builder(infos)
        .connection_timeout(config.command_timeout)
        .response_timeout(config.command_timeout)
        .min_retry_wait(1)
        .max_retry_wait(step_ms);
    if let Some(retries) = retries {
        builder = builder.retries(retries);
    }
    let bad = |_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs");
    Ok((builder.build().map_err(bad)?, template))
}

/// Whether a cluster error means the command was not executed because the
/// slot is served elsewhere now (the connection must learn the new map).
pub(crate) fn is_redirect(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::Moved
                | redis::ServerErrorKind::TryAgain
                | redis::ServerErrorKind::ClusterDown
        )
    )
}

/// Whether a cluster error is an `ASK` redirect (a slot being migrated).
pub(crate) fn is_ask(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask)
}

/// How to reach the node an `ASK` redirect names: as the `template` node
/// is reached (credentials, TLS) when known; `ask` itself where it names
/// no node.
pub(crate) fn ask_node_info(
    ask: &redis::RedisError,
    template: Option<&redis::ConnectionInfo>,
) -> redis::RedisResult<redis::ConnectionInfo> {
    let (host, port) = ask
        .redirect_node()
        .and_then(|(addr, _slot)| addr.rsplit_once(':'))
        .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| ask.clone())?;
    node_info(template, host, port)
}

/// How to reach the node at `host:port` (from `CLUSTER SLOTS` or a
/// redirect): as the `template` node is reached (credentials, settings,
/// and over TLS its TLS parameters: custom roots, client certificate,
/// `#insecure`) when known.
pub(crate) fn node_info(
    template: Option<&redis::ConnectionInfo>,
    host: String,
    port: u16,
) -> redis::RedisResult<redis::ConnectionInfo> {
    use redis::ConnectionAddr::{Tcp, TcpTls};
    let Some(template) = template else {
        return redis::IntoConnectionInfo::into_connection_info(Tcp(host, port));
    };
    let addr = match template.addr() {
        TcpTls {
            insecure,
            tls_params,
            ..
        } => TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => Tcp(host, port),
    };
    Ok(template.clone().set_addr(addr))
}

/// `COMMAND INFO SPUBLISH`: whether the cluster has sharded pub/sub.
pub(crate) fn sharded_pubsub_cmd() -> redis::Cmd {
    redis::cmd("COMMAND").arg("INFO").arg("SPUBLISH").take()
}

/// The verdict on [`sharded_pubsub_cmd`]'s reply: Redis 7 or newer.
pub(crate) fn sharded_pubsub_verdict(reply: Result<Value, Failure>) -> Result<(), Error> {
    match reply {
        Ok(Value::Array(items)) if items.first().is_some_and(|v| *v != Value::Nil) => Ok(()),
        Ok(_) => Err(Error::invalid_config(
            "nodes",
            "the cluster has no sharded pub/sub (SPUBLISH); redlease needs Redis 7 or newer",
        )),
        Err(failure) => Err(failure.into_error(Operation::Connect)),
    }
}

/// Number of hash slots in a Redis Cluster.
const SLOTS: u16 = 16384;

/// The slot of a key name: CRC16/XMODEM of its hash tag (`{...}`, when
/// non-empty), or of the whole name.
pub(crate) fn slot_of(name: &str) -> u16 {
    let hashed = crate::core::names::hash_tag(name).unwrap_or(name);
    crc16::State::<crc16::XMODEM>::calculate(hashed.as_bytes()) % SLOTS
}

/// A node's address as `CLUSTER SLOTS` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct NodeAddr {
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// Which primary serves which slots.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotMap {
    ranges: Vec<(u16, u16, NodeAddr)>,
}

impl SlotMap {
    /// Parses a `CLUSTER SLOTS` reply; entries it cannot read are skipped.
    pub(crate) fn parse(reply: &Value) -> SlotMap {
        let ranges = match reply {
            Value::Array(entries) => entries.iter().filter_map(parse_range).collect(),
            _ => Vec::new(),
        };
        SlotMap { ranges }
    }

    pub(crate) fn owner(&self, slot: u16) -> Option<&NodeAddr> {
        self.ranges
            .iter()
            .find_map(|(start, end, node)| (*start..=*end).contains(&slot).then_some(node))
    }

    /// A slot served by a primary other than `node`: where to ask about
    /// `node`'s slots without asking `node` (the async locker does).
    #[cfg(any(feature = "aio", test))]
    pub(crate) fn slot_away_from(&self, node: &NodeAddr) -> Option<u16> {
        self.ranges
            .iter()
            .find_map(|(start, _, owner)| (owner != node).then_some(*start))
    }
}

/// `CLUSTER SLOTS`: which primary serves which slots.
pub(crate) fn slots_cmd() -> redis::Cmd {
    redis::cmd("CLUSTER").arg("SLOTS").take()
}

fn parse_range(entry: &Value) -> Option<(u16, u16, NodeAddr)> {
    let Value::Array(items) = entry else {
        return None;
    };
    let start = as_u16(items.first()?)?;
    let end = as_u16(items.get(1)?)?;
    let Value::Array(primary) = items.get(2)? else {
        return None;
    };
    let host = match primary.first()? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let port = as_u16(primary.get(1)?)?;
    Some((start, end, NodeAddr { host, port }))
}

fn as_u16(v: &Value) -> Option<u16> {
    match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::names::KeyId;

    #[test]
    fn slots_match_redis_cluster_hashing() {
        // Reference values from the Redis Cluster specification and
        // `CLUSTER KEYSLOT`.
        assert_eq!(
            crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
            0x31C3
        );
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(
            slot_of("{user1000}.following"),
            slot_of("{user1000}.followers")
        );
        assert_eq!(slot_of("foo{}{bar}"), slot_of("foo{}{bar}"));
        let whole = crc16::State::<crc16::XMODEM>::calculate(b"foo{}{bar}");
        assert_eq!(slot_of("foo{}{bar}"), whole % SLOTS);
    }

    #[test]
    fn a_lock_its_counter_and_its_channel_share_a_slot() {
        let id = KeyId::of("job:42");
        let names = crate::core::names::LockNames::new("ns", id);
        let channel = crate::core::names::Channel::Sharded.name("ns", id);
        assert_eq!(slot_of(&names.lock), slot_of(&names.fence));
        assert_eq!(slot_of(&names.lock), slot_of(&channel));
    }

    #[test]
    fn cluster_slots_replies_are_parsed_and_bad_entries_skipped() {
        let node = |port| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(5460), node(7000)]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node(7001)]),
            Value::Nil,
        ]);
        let map = SlotMap::parse(&reply);
        assert_eq!(map.owner(0).map(|n| n.port), Some(7000));
        assert_eq!(map.owner(5461).map(|n| n.port), Some(7001));
        assert_eq!(SlotMap::parse(&Value::Nil).owner(1), None);

        // Where to ask about a node's slots without asking that node.
        let first = map.owner(0).unwrap().clone();
        let second = map.owner(5461).unwrap().clone();
        assert_eq!(map.slot_away_from(&first), Some(5461));
        assert_eq!(map.slot_away_from(&second), Some(0));
        let alone = SlotMap::parse(&Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16383),
            node(7000),
        ])]));
        assert_eq!(alone.slot_away_from(&first), None);
    }
}
