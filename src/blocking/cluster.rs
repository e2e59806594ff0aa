//! The blocking locker on Redis Cluster: construction, and the subscriber
//! thread that holds one sharded subscription (`SSUBSCRIBE`) per waited-for
//! key on the node that owns its slot.
//!
//! The sync pub/sub API has no `SSUBSCRIBE`, so the thread keeps one RESP3
//! connection per primary it needs, sends the commands itself and reads the
//! `ssubscribe` / `smessage` / `sunsubscribe` pushes. A `sunsubscribe` it did
//! not ask for means the slot moved (failover): it reads the slot map again,
//! subscribes on the new owner, and the key's head retries at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{PushKind, Value};

use super::connection::Source;
use super::locker::{Locker, Shared};
use crate::clock::now;
use crate::cluster::{key_of_channel, slot_of, NodeAddr, SlotMap};
use crate::config::Config;
use crate::core::core::SubscriberStep;
use crate::core::names::{Channel, KeyId};
use crate::error::{describe, Error, Failure, Operation};

/// How long one loop may block reading all node connections: bounds how
/// late the thread notices new waiters, the linger or a shutdown.
const SLICE: Duration = Duration::from_millis(60);

impl Locker {
    /// Connects to a Redis Cluster through any of its `nodes` (URLs like
    /// `redis://127.0.0.1:7000/`).
    ///
    /// Commands go through a cluster connection built with `retries(0)`, so
    /// a timed-out write is never re-sent behind the locker's back; a
    /// redirect (the command did not run) is followed by reading the new
    /// slot map and sending once more. Release notifications use sharded
    /// pub/sub on the node that owns each waited-for key (Redis ≥ 7; checked
    /// here). `min_replicas` is not supported on a cluster.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or node URLs, `min_replicas`, or a
    /// cluster without sharded pub/sub; `ProviderFailed` when no node can
    /// be reached.
    pub fn connect_cluster<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        let infos = nodes
            .into_iter()
            .map(|n| n.into_connection_info())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs"))?;
        let template = infos.first().cloned();
        let client = ClusterClient::builder(infos)
            .retries(0)
            .connection_timeout(config.command_timeout)
            .response_timeout(config.command_timeout)
            .build()
            .map_err(|_| Error::invalid_config("nodes", "not valid Redis Cluster node URLs"))?;
        Self::cluster(client, template, config)
    }

    /// A locker over an existing cluster client.
    ///
    /// The locker cannot read the client's credentials, so its per-node
    /// notification connections connect without them; where the nodes need
    /// a password, waiters fall back to safety polls. If the client has
    /// `retries > 0`, it may re-send a timed-out acquire, which the
    /// replay-safe script answers with the same fence. Prefer
    /// [`connect_cluster`](Self::connect_cluster).
    ///
    /// # Errors
    ///
    /// As [`connect_cluster`](Self::connect_cluster).
    pub fn new_cluster(client: ClusterClient, config: Config) -> Result<Self, Error> {
        config.validate()?;
        Self::cluster(client, None, config)
    }

    fn cluster(
        client: ClusterClient,
        template: Option<redis::ConnectionInfo>,
        config: Config,
    ) -> Result<Self, Error> {
        if config.min_replicas.is_some() {
            return Err(Error::invalid_config(
                "min_replicas",
                "not supported on Redis Cluster (WAIT must run on the node of each key)",
            ));
        }
        let shared = Arc::new(Shared::new(Source::Cluster(client), template, config));
        check_sharded_pubsub(&shared)?;
        Ok(Locker::from_shared(shared))
    }
}

/// Connects and checks that the cluster knows `SPUBLISH` (Redis ≥ 7).
fn check_sharded_pubsub(shared: &Shared) -> Result<(), Error> {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg("SPUBLISH");
    match shared.commands.query_fresh(&cmd) {
        Ok(Value::Array(items)) if items.first().is_some_and(|v| *v != Value::Nil) => Ok(()),
        Ok(_) => Err(Error::invalid_config(
            "nodes",
            "the cluster has no sharded pub/sub (SPUBLISH); redlease needs Redis 7 or newer",
        )),
        Err(Failure::NotSent(e)) => Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) => Err(Error::from_command(Operation::Connect, e)),
    }
}

/// Starts the subscriber thread; the caller already counted it as running.
pub(crate) fn spawn_subscriber(shared: Arc<Shared>) {
    let for_thread = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("redlease-cluster-subscriber".into())
        .spawn(move || Subscriber::new(for_thread).run());
    if spawned.is_err() {
        fail(&shared, "could not start the subscriber thread");
        shared.subscriber_exited();
    }
}

fn fail(shared: &Arc<Shared>, cause: &str) {
    if shared.with_core(|core| core.handle_subscription_failed(now())) {
        log::warn!(
            target: "redlease",
            "LOCK_NOTIFY_UNAVAILABLE: sharded release notifications unavailable ({cause}); \
             waiters poll every poll_interval"
        );
    }
}

struct Subscriber {
    shared: Arc<Shared>,
    slots: SlotMap,
    nodes: HashMap<NodeAddr, redis::Connection>,
    /// Each subscribed key and the node it is subscribed on.
    subscribed: HashMap<KeyId, NodeAddr>,
}

impl Subscriber {
    fn new(shared: Arc<Shared>) -> Self {
        Subscriber {
            shared,
            slots: SlotMap::default(),
            nodes: HashMap::new(),
            subscribed: HashMap::new(),
        }
    }

    fn run(mut self) {
        if let Err(cause) = self.serve() {
            fail(&self.shared, &cause);
        }
        self.nodes.clear();
        self.shared.subscriber_exited();
    }

    /// Loops until the core says stop; an error ends the subscription.
    fn serve(&mut self) -> Result<(), String> {
        self.refresh_slots()?;
        loop {
            if self.shared.with_core(|core| core.poll_subscriber(now())) == SubscriberStep::Stop {
                return Ok(());
            }
            let wanted: HashSet<KeyId> = self
                .shared
                .cell()
                .read_mut(|core| core.wanted_keys(now()))
                .into_iter()
                .collect();
            self.unsubscribe_unwanted(&wanted);
            for key in wanted {
                if !self.subscribed.contains_key(&key) {
                    self.subscribe(key)?;
                }
            }
            self.read_pushes()?;
        }
    }

    fn channel(&self, key: KeyId) -> String {
        Channel::Sharded.name(&self.shared.config.namespace, key)
    }

    fn refresh_slots(&mut self) -> Result<(), String> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply = self
            .shared
            .commands
            .query_fresh(&cmd)
            .map_err(|f| match f {
                Failure::NotSent(e) | Failure::Sent(e) => describe(&e),
            })?;
        self.slots = SlotMap::parse(&reply);
        Ok(())
    }

    fn subscribe(&mut self, key: KeyId) -> Result<(), String> {
        let channel = self.channel(key);
        let slot = slot_of(&channel);
        if self.slots.owner(slot).is_none() {
            self.refresh_slots()?;
        }
        let owner = self
            .slots
            .owner(slot)
            .cloned()
            .ok_or_else(|| "no node serves the key's slot".to_owned())?;
        if !self.nodes.contains_key(&owner) {
            let conn = self.connect(&owner).map_err(|e| describe(&e))?;
            self.nodes.insert(owner.clone(), conn);
        }
        let conn = self
            .nodes
            .get_mut(&owner)
            .ok_or("node connection missing")?;
        let sent = redis::cmd("SSUBSCRIBE")
            .arg(&channel)
            .set_no_response(true)
            .exec(conn);
        match sent {
            Ok(()) => {
                self.subscribed.insert(key, owner);
                Ok(())
            }
            Err(_) => {
                // The node went away: forget it and read the map again.
                self.drop_node(&owner);
                self.refresh_slots()
            }
        }
    }

    fn unsubscribe_unwanted(&mut self, wanted: &HashSet<KeyId>) {
        let stale: Vec<(KeyId, NodeAddr)> = self
            .subscribed
            .iter()
            .filter(|(key, _)| !wanted.contains(key))
            .map(|(key, node)| (*key, node.clone()))
            .collect();
        for (key, node) in stale {
            self.subscribed.remove(&key);
            let channel = self.channel(key);
            if let Some(conn) = self.nodes.get_mut(&node) {
                // Best effort: a lost unsubscribe only costs a message.
                let _ = redis::cmd("SUNSUBSCRIBE")
                    .arg(&channel)
                    .set_no_response(true)
                    .exec(conn);
            }
        }
        let used: HashSet<&NodeAddr> = self.subscribed.values().collect();
        self.nodes.retain(|node, _| used.contains(node));
    }

    fn connect(&self, node: &NodeAddr) -> redis::RedisResult<redis::Connection> {
        let addr = redis::ConnectionAddr::Tcp(node.host.clone(), node.port);
        let info = match &self.shared.node_template {
            Some(base) => base.clone().set_addr(addr),
            None => redis::IntoConnectionInfo::into_connection_info(addr)?,
        };
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let timeout = self.shared.commands.timeout();
        let client = redis::Client::open(info)?;
        let conn = client.get_connection_with_timeout(timeout)?;
        conn.set_write_timeout(Some(timeout))?;
        Ok(conn)
    }

    fn drop_node(&mut self, node: &NodeAddr) {
        self.nodes.remove(node);
        self.subscribed.retain(|_, n| n != node);
    }

    /// Reads what the nodes pushed, sharing one slice among them.
    fn read_pushes(&mut self) -> Result<(), String> {
        if self.nodes.is_empty() {
            let listener = self.shared.cell().listen_changed();
            #[expect(clippy::disallowed_methods, reason = "driver call site")]
            let until = std::time::Instant::now() + SLICE;
            event_listener::Listener::wait_deadline(listener, until);
            return Ok(());
        }
        let per_node = (SLICE / self.nodes.len() as u32).max(Duration::from_millis(1));
        let mut lost = Vec::new();
        let mut moved = Vec::new();
        let (shared, subscribed) = (&self.shared, &self.subscribed);
        for (node, conn) in &mut self.nodes {
            if conn.set_read_timeout(Some(per_node)).is_err() {
                lost.push(node.clone());
                continue;
            }
            loop {
                match conn.recv_response() {
                    Ok(Value::Push { kind, data }) => {
                        if let Some(key) = handle_push(shared, subscribed, &kind, &data) {
                            moved.push(key);
                        }
                        // Drain what is already there without waiting long.
                        let _ = conn.set_read_timeout(Some(Duration::from_millis(1)));
                    }
                    Ok(Value::ServerError(e)) => {
                        return Err(format!("{:?} ({})", e.kind(), e.code()));
                    }
                    Ok(_) => {}
                    Err(e) if e.is_timeout() => break,
                    Err(_) => {
                        lost.push(node.clone());
                        break;
                    }
                }
            }
        }
        for key in &moved {
            self.subscribed.remove(key);
        }
        for node in &lost {
            self.drop_node(node);
        }
        if !lost.is_empty() {
            self.shared
                .with_core(|core| core.handle_subscriber_lost(now()));
        }
        if !lost.is_empty() || !moved.is_empty() {
            self.refresh_slots()?;
        }
        Ok(())
    }
}

/// Feeds one push into the core; returns a key whose subscription the node
/// ended on its own (its slot moved).
fn handle_push(
    shared: &Arc<Shared>,
    subscribed: &HashMap<KeyId, NodeAddr>,
    kind: &PushKind,
    data: &[Value],
) -> Option<KeyId> {
    {
        let prefix = format!("{}:lock-released:{{", shared.config.namespace);
        let key = match data.first() {
            Some(Value::BulkString(channel)) if channel.starts_with(prefix.as_bytes()) => {
                key_of_channel(channel)?
            }
            _ => return None,
        };
        match kind {
            PushKind::SSubscribe => {
                shared.with_core(|core| core.handle_channel_subscribed(key));
                None
            }
            PushKind::SMessage => {
                if let Some(Value::BulkString(payload)) = data.get(1) {
                    shared.counters.notification();
                    shared.with_core(|core| core.handle_notification(payload));
                }
                None
            }
            PushKind::SUnsubscribe if subscribed.contains_key(&key) => {
                // Not ours (we forget a key before unsubscribing it): the
                // slot moved. The head retries now; we subscribe again.
                let sha = key.to_hex();
                shared.with_core(|core| core.handle_notification(sha.as_bytes()));
                Some(key)
            }
            _ => None,
        }
    }
}
