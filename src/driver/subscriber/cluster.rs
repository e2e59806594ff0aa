//! The subscriber on Redis Cluster: one sharded subscription (`SSUBSCRIBE`)
//! per waited-for key, on a RESP3 connection to the primary that owns the
//! key's slot, read from the slot map.
//!
//! A key counts as subscribed only once its `ssubscribe` push arrived; one
//! that stays unconfirmed for the command timeout (its node answered with a
//! redirect, or the reply was lost) makes the thread drop that node's
//! connection and read the slot map again. A node that cannot be reached
//! is tried again after a backoff while the other nodes keep serving. A
//! `sunsubscribe` the thread did not ask for means the slot moved: the
//! key's head checks at once and the key is subscribed on its new owner.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::Listener;
use redis::cluster::ClusterClient;
use redis::Value;

use super::{backoff, fail, handle_push, is_refusal, listen_slice, open_resp3, pause_while_wanted};
use crate::clock::now;
use crate::cluster::{slot_of, NodeAddr, SlotMap};
use crate::core::lease::deadline_after;
use crate::core::names::{Channel, KeyId};
use crate::core::notice::Notice;
use crate::driver::state::LockerState;
use crate::error::describe;

/// How long one loop may block reading all node connections: bounds how
/// late the thread notices new waiters, the linger or a shutdown.
const SLICE: Duration = Duration::from_millis(60);

#[derive(Debug)]
struct Subscribed {
    node: NodeAddr,
    sent_at: Instant,
    confirmed: bool,
}

struct Subscriber<'a> {
    state: &'a Arc<LockerState>,
    slots_client: &'a ClusterClient,
    template: Option<&'a redis::ConnectionInfo>,
    slots: SlotMap,
    slots_stale: bool,
    nodes: HashMap<NodeAddr, redis::Connection>,
    channels: HashMap<KeyId, Subscribed>,
    /// Nodes that could not be reached: when to try again, and how often
    /// they failed in a row.
    down: HashMap<NodeAddr, (Instant, usize)>,
}

pub(super) fn run(
    state: &Arc<LockerState>,
    slots_client: &ClusterClient,
    template: Option<&redis::ConnectionInfo>,
) {
    let mut subscriber = Subscriber {
        state,
        slots_client,
        template,
        slots: SlotMap::default(),
        slots_stale: true,
        nodes: HashMap::new(),
        channels: HashMap::new(),
        down: HashMap::new(),
    };
    let mut attempt = 0;
    while listen_slice(state, SLICE).is_some() {
        if subscriber.slots_stale {
            if let Err(e) = subscriber.refresh_slots() {
                if is_refusal(&e) {
                    return fail(state, &describe(&e));
                }
                state.with_core(|core| core.handle_subscriber_lost(now()));
                if !pause_while_wanted(state, backoff(attempt)) {
                    return;
                }
                attempt += 1;
                continue;
            }
            attempt = 0;
        }
        if let Err(e) = subscriber.serve_once() {
            return fail(state, &describe(&e));
        }
    }
}

impl Subscriber<'_> {
    /// One round: (un)subscribe what the core wants, read what arrived.
    /// Errors are refusals only; everything else is retried.
    fn serve_once(&mut self) -> redis::RedisResult<()> {
        let now = now();
        let wanted: HashSet<KeyId> = self
            .state
            .with_core(|core| core.wanted_keys(now))
            .into_iter()
            .collect();
        self.unsubscribe_unwanted(&wanted);
        for key in wanted {
            if !self.channels.contains_key(&key) {
                self.subscribe(now, key)?;
            }
        }
        self.drop_unconfirmed(now);
        self.read_pushes()
    }

    fn channel(&self, key: KeyId) -> String {
        Channel::Sharded.name(&self.state.config.namespace, key)
    }

    fn refresh_slots(&mut self) -> redis::RedisResult<()> {
        let mut conn = self.slots_client.get_connection()?;
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply: Value = cmd.query(&mut conn)?;
        self.slots = SlotMap::parse(&reply);
        self.slots_stale = false;
        Ok(())
    }

    fn subscribe(&mut self, now: Instant, key: KeyId) -> redis::RedisResult<()> {
        let channel = self.channel(key);
        let Some(owner) = self.slots.owner(slot_of(&channel)).cloned() else {
            self.slots_stale = true;
            return Ok(());
        };
        if self.down.get(&owner).is_some_and(|(at, _)| now < *at) {
            return Ok(());
        }
        if !self.nodes.contains_key(&owner) {
            match self.connect(&owner) {
                Ok(conn) => {
                    self.down.remove(&owner);
                    self.nodes.insert(owner.clone(), conn);
                }
                Err(e) if is_refusal(&e) => return Err(e),
                Err(_) => {
                    self.mark_down(now, &owner);
                    return Ok(());
                }
            }
        }
        let Some(conn) = self.nodes.get_mut(&owner) else {
            return Ok(());
        };
        let sent = redis::cmd("SSUBSCRIBE")
            .arg(&channel)
            .set_no_response(true)
            .exec(conn);
        match sent {
            Ok(()) => {
                self.channels.insert(
                    key,
                    Subscribed {
                        node: owner,
                        sent_at: now,
                        confirmed: false,
                    },
                );
            }
            Err(_) => self.drop_node(&owner),
        }
        Ok(())
    }

    fn mark_down(&mut self, now: Instant, node: &NodeAddr) {
        let failures = self.down.get(node).map_or(0, |(_, n)| *n);
        let retry_at = deadline_after(now, backoff(failures)).unwrap_or(now);
        self.down.insert(node.clone(), (retry_at, failures + 1));
        // The map may be out of date (a failover): read it again.
        self.slots_stale = true;
        self.state
            .with_core(|core| core.handle_subscriber_lost(now));
    }

    fn unsubscribe_unwanted(&mut self, wanted: &HashSet<KeyId>) {
        let stale: Vec<(KeyId, NodeAddr)> = self
            .channels
            .iter()
            .filter(|(key, _)| !wanted.contains(key))
            .map(|(key, ch)| (*key, ch.node.clone()))
            .collect();
        for (key, node) in stale {
            self.channels.remove(&key);
            let channel = self.channel(key);
            if let Some(conn) = self.nodes.get_mut(&node) {
                // Best effort: a lost unsubscribe only costs a message.
                let _ = redis::cmd("SUNSUBSCRIBE")
                    .arg(&channel)
                    .set_no_response(true)
                    .exec(conn);
            }
        }
        let used: HashSet<&NodeAddr> = self.channels.values().map(|ch| &ch.node).collect();
        self.nodes.retain(|node, _| used.contains(node));
    }

    /// A subscription still unconfirmed after the command timeout: its node
    /// redirected or lost the reply. Start over on that node.
    fn drop_unconfirmed(&mut self, now: Instant) {
        let timeout = self.state.config.command_timeout;
        let late: Vec<NodeAddr> = self
            .channels
            .values()
            .filter(|ch| !ch.confirmed && now.saturating_duration_since(ch.sent_at) >= timeout)
            .map(|ch| ch.node.clone())
            .collect();
        for node in late {
            self.drop_node(&node);
            self.slots_stale = true;
        }
    }

    fn connect(&self, node: &NodeAddr) -> redis::RedisResult<redis::Connection> {
        let addr = redis::ConnectionAddr::Tcp(node.host.clone(), node.port);
        let info = match self.template {
            Some(base) => base.clone().set_addr(addr),
            None => redis::IntoConnectionInfo::into_connection_info(addr)?,
        };
        open_resp3(info, self.state.config.command_timeout)
    }

    /// Forgets a node's connection; its keys' heads check at once (a
    /// release may have gone unseen) and the keys are subscribed again.
    fn drop_node(&mut self, node: &NodeAddr) {
        self.nodes.remove(node);
        let keys: Vec<KeyId> = self
            .channels
            .iter()
            .filter(|(_, ch)| ch.node == *node)
            .map(|(key, _)| *key)
            .collect();
        for key in keys {
            self.channels.remove(&key);
            self.state.with_core(|core| core.handle_channel_lost(key));
        }
    }

    /// Reads what the nodes pushed, sharing one slice among them.
    fn read_pushes(&mut self) -> redis::RedisResult<()> {
        if self.nodes.is_empty() {
            let listener = self.state.listen_changed();
            if let Some(until) = deadline_after(now(), SLICE) {
                listener.wait_deadline(until);
            }
            return Ok(());
        }
        let per_node = (SLICE / self.nodes.len() as u32).max(Duration::from_millis(1));
        let mut lost = Vec::new();
        let mut moved = Vec::new();
        let mut confirmed = Vec::new();
        for (node, conn) in &mut self.nodes {
            if conn.set_read_timeout(Some(per_node)).is_err() {
                lost.push(node.clone());
                continue;
            }
            loop {
                match conn.recv_response() {
                    Ok(Value::Push { kind, data }) => {
                        match handle_push(self.state, &kind, &data) {
                            Some(Notice::Subscribed(Some(key))) => confirmed.push(key),
                            Some(Notice::Unsubscribed(key)) => moved.push(key),
                            _ => {}
                        }
                        // Drain what is already there without waiting long.
                        let _ = conn.set_read_timeout(Some(Duration::from_millis(1)));
                    }
                    Ok(_) => {}
                    Err(e) if e.is_timeout() => break,
                    Err(e) if is_refusal(&e) && e.code() == Some("NOPERM") => return Err(e),
                    Err(_) => {
                        // A redirect or a broken connection: start over there.
                        lost.push(node.clone());
                        break;
                    }
                }
            }
        }
        for key in confirmed {
            if let Some(ch) = self.channels.get_mut(&key) {
                ch.confirmed = true;
            }
        }
        for key in moved {
            // Ours are forgotten before we unsubscribe them: this one the
            // node ended (its slot moved). Check now, subscribe again.
            if self.channels.remove(&key).is_some() {
                self.state.with_core(|core| core.handle_channel_lost(key));
                self.slots_stale = true;
            }
        }
        if !lost.is_empty() {
            for node in &lost {
                self.drop_node(node);
            }
            self.slots_stale = true;
            self.state
                .with_core(|core| core.handle_subscriber_lost(now()));
        }
        Ok(())
    }
}
