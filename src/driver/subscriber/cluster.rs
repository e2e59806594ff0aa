//! The subscriber on Redis Cluster: one sharded subscription (`SSUBSCRIBE`)
//! per waited-for key, on a RESP3 connection to the primary that owns the
//! key's slot, read from the slot map.
//!
//! A key counts as subscribed only once its `ssubscribe` push arrived; one
//! that stays unconfirmed for the command timeout (its node answered with a
//! redirect, or the reply was lost) makes the thread drop that node's
//! connection and read the slot map again. A `sunsubscribe` the thread did
//! not ask for means the slot moved: the key's head checks at once and the
//! key is subscribed on its new owner, from a map that no longer names the
//! node that ended it (one read from a node that has not learned of the
//! failover yet is read again).
//!
//! What may block for long (connecting to a node, reading the slot map:
//! either can wait for a paused or unreachable node) runs on short-lived
//! helper threads, so that one bad node never holds up the notifications of
//! the others; a node that cannot be reached is tried again after a backoff.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::Listener;
use redis::cluster::ClusterClient;
use redis::{ConnectionInfo, RedisResult, Value};

use super::{
    backoff, fail, handle_push, is_refusal, listen_slice, open_resp3, pause_after_loss,
    send_pass_ons,
};
use crate::clock::now;
use crate::cluster::{node_info, slot_of, slots_cmd, NodeAddr, SlotMap};
use crate::core::lease::deadline_after;
use crate::core::names::{Channel, KeyId};
use crate::core::notice::Notice;
use crate::driver::state::LockerState;
use crate::error::describe;

/// How long one loop may block reading all node connections: bounds how
/// late the thread notices new waiters, the linger or a shutdown.
const SLICE: Duration = Duration::from_millis(60);

struct Subscribed {
    node: NodeAddr,
    sent_at: Instant,
    confirmed: bool,
}

struct Subscriber<'a> {
    state: &'a Arc<LockerState>,
    slots_client: &'a ClusterClient,
    template: Option<&'a ConnectionInfo>,
    slots: SlotMap,
    slots_stale: bool,
    /// A slot map being read on a helper thread, and its number.
    refreshing: Option<(u64, Receiver<RedisResult<SlotMap>>)>,
    /// How many slot-map reads were started.
    reads_started: u64,
    /// Connections being opened on helper threads.
    connecting: HashMap<NodeAddr, Receiver<RedisResult<redis::Connection>>>,
    nodes: HashMap<NodeAddr, redis::Connection>,
    channels: HashMap<KeyId, Subscribed>,
    /// Keys whose node ended their subscription (the slot moved): see
    /// [`Moved`].
    moved: HashMap<KeyId, Moved>,
    /// Nodes that could not be reached: when to try again, and how often
    /// they failed in a row.
    down: HashMap<NodeAddr, (Instant, usize)>,
}

/// How many slot maps that still name the node which ended a key's
/// subscription are read again before the key is subscribed where the
/// map says (a node that ended it and still owns the slot).
const STALE_REREADS: u8 = 20;

/// A key whose node ended its subscription.
struct Moved {
    /// The number of the first slot-map read started after that: only a
    /// map that new tells where to subscribe it again.
    first_read: u64,
    /// The node that ended it. Nodes learn a failover at slightly
    /// different times: a map read from one that has not yet still names
    /// this node, now a replica, where the key's notifications do not
    /// arrive; such a map is read again.
    ended_by: NodeAddr,
    /// Maps read again for the key so far.
    rereads: u8,
}

pub(super) fn run(
    state: &Arc<LockerState>,
    slots_client: &ClusterClient,
    template: Option<&ConnectionInfo>,
) {
    let mut subscriber = Subscriber {
        state,
        slots_client,
        template,
        slots: SlotMap::default(),
        slots_stale: true,
        refreshing: None,
        reads_started: 0,
        connecting: HashMap::new(),
        nodes: HashMap::new(),
        channels: HashMap::new(),
        moved: HashMap::new(),
        down: HashMap::new(),
    };
    let mut attempt = 0;
    while listen_slice(state, SLICE).is_some() {
        match subscriber.poll_slots() {
            Ok(true) => attempt = 0,
            Ok(false) => {}
            Err(e) if is_refusal(&e) => return fail(state, &describe(&e)),
            // No node answered with the slot map: try again later.
            Err(_) if pause_after_loss(state, &mut attempt) => continue,
            Err(_) => return,
        }
        if let Err(e) = subscriber.serve_once() {
            return fail(state, &describe(&e));
        }
    }
}

impl Subscriber<'_> {
    /// One round: take the connections opened meanwhile, (un)subscribe
    /// what the core wants, read what arrived. Errors are refusals only;
    /// everything else is retried.
    fn serve_once(&mut self) -> RedisResult<()> {
        let now = now();
        self.poll_connects(now)?;
        let wanted = self.state.with_core(|core| core.wanted_keys(now));
        let wanted: HashSet<KeyId> = wanted.into_iter().collect();
        let unwanted = self.keys_where(|key, _| !wanted.contains(&key));
        self.forget(unwanted, false);
        for key in wanted {
            if !self.channels.contains_key(&key) && !self.moved.contains_key(&key) {
                self.subscribe(now, key)?;
            }
        }
        self.drop_unused_nodes();
        self.drop_unconfirmed(now);
        self.read_pushes()
    }

    fn channel(&self, key: KeyId) -> String {
        Channel::Sharded.name(&self.state.config.namespace, key)
    }

    /// Starts reading the slot map when it is stale, and takes a map that
    /// arrived. `Ok(true)` when a new map was taken.
    fn poll_slots(&mut self) -> RedisResult<bool> {
        if let Some((read, rx)) = &self.refreshing {
            let read = *read;
            let Some(taken) = helper_result(rx) else {
                return Ok(false);
            };
            self.refreshing = None;
            self.slots = taken.inspect_err(|_| self.slots_stale = true)?;
            let (slots, namespace) = (&self.slots, &self.state.config.namespace);
            self.moved.retain(|key, moved| {
                if moved.first_read > read {
                    return true;
                }
                let owner = slots.owner(slot_of(&Channel::Sharded.name(namespace, *key)));
                let stale = owner == Some(&moved.ended_by) && moved.rereads < STALE_REREADS;
                if stale {
                    moved.first_read = self.reads_started + 1;
                    moved.rereads += 1;
                    self.slots_stale = true;
                }
                stale
            });
            self.move_to_new_owners();
            return Ok(true);
        }
        if self.slots_stale {
            self.slots_stale = false;
            self.reads_started += 1;
            let client = self.slots_client.clone();
            let read = on_helper_thread(move || {
                let reply: Value = slots_cmd().query(&mut client.get_connection()?)?;
                Ok(SlotMap::parse(&reply))
            });
            self.refreshing = Some((self.reads_started, read));
        }
        Ok(false)
    }

    /// Channels subscribed on a node that no longer owns their slot (a
    /// failover or a migration the node did not announce) move to the new
    /// owner; their heads check at once, since a release may have gone
    /// unseen.
    fn move_to_new_owners(&mut self) {
        let stale = self.keys_where(|key, ch| {
            let owner = self.slots.owner(slot_of(&self.channel(key)));
            owner.is_some_and(|owner| *owner != ch.node)
        });
        self.forget(stale, true);
    }

    /// The keys of the channels `pick` chooses.
    fn keys_where(&self, pick: impl Fn(KeyId, &Subscribed) -> bool) -> Vec<KeyId> {
        let picked = self.channels.iter().filter(|(key, ch)| pick(**key, ch));
        picked.map(|(key, _)| *key).collect()
    }

    /// Forgets the channels of `keys`, unsubscribing them on their node if
    /// it is still connected (best effort: a lost unsubscribe only costs a
    /// message); when `lost`, their heads check at once (a release may
    /// have gone unseen).
    fn forget(&mut self, keys: Vec<KeyId>, lost: bool) {
        for key in keys {
            let Some(ch) = self.channels.remove(&key) else {
                continue;
            };
            let channel = self.channel(key);
            if let Some(conn) = self.nodes.get_mut(&ch.node) {
                let mut unsubscribe = redis::cmd("SUNSUBSCRIBE");
                let _ = unsubscribe.arg(&channel).set_no_response(true).exec(conn);
            }
            if lost {
                self.state.with_core(|core| core.handle_channel_lost(key));
            }
        }
    }

    /// Takes the node connections that were opened meanwhile.
    fn poll_connects(&mut self, now: Instant) -> RedisResult<()> {
        let done: Vec<_> = self
            .connecting
            .iter()
            .filter_map(|(node, rx)| Some((node.clone(), helper_result(rx)?)))
            .collect();
        for (node, result) in done {
            self.connecting.remove(&node);
            match result {
                Ok(conn) => {
                    self.down.remove(&node);
                    self.nodes.insert(node, conn);
                }
                Err(e) if is_refusal(&e) => return Err(e),
                Err(_) => self.mark_down(now, &node),
            }
        }
        Ok(())
    }

    fn subscribe(&mut self, now: Instant, key: KeyId) -> RedisResult<()> {
        let channel = self.channel(key);
        let Some(owner) = self.slots.owner(slot_of(&channel)).cloned() else {
            self.slots_stale = true;
            return Ok(());
        };
        if self.down.get(&owner).is_some_and(|(at, _)| now < *at) {
            return Ok(());
        }
        let Some(conn) = self.nodes.get_mut(&owner) else {
            if !self.connecting.contains_key(&owner) {
                let info = node_info(self.template, owner.host.clone(), owner.port)?;
                let timeout = self.state.config.command_timeout;
                let rx = on_helper_thread(move || open_resp3(info, timeout));
                self.connecting.insert(owner, rx);
            }
            return Ok(());
        };
        let mut subscribe = redis::cmd("SSUBSCRIBE");
        let sent = subscribe.arg(&channel).set_no_response(true).exec(conn);
        if sent.is_err() {
            self.drop_node(&owner);
            return Ok(());
        }
        let unconfirmed = Subscribed {
            node: owner,
            sent_at: now,
            confirmed: false,
        };
        self.channels.insert(key, unconfirmed);
        Ok(())
    }

    /// A node could not be reached: tried again after a backoff. Its keys'
    /// heads keep their safety polls; the other nodes' keys are not
    /// affected.
    fn mark_down(&mut self, now: Instant, node: &NodeAddr) {
        let failures = self.down.get(node).map_or(0, |(_, n)| *n);
        let retry_at = deadline_after(now, backoff(failures)).unwrap_or(now);
        self.down.insert(node.clone(), (retry_at, failures + 1));
        // The map may be out of date (a failover): read it again.
        self.slots_stale = true;
    }

    /// Closes the connections of nodes no channel is subscribed on.
    fn drop_unused_nodes(&mut self) {
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

    /// Forgets a node's connection; its keys' heads check at once (a
    /// release may have gone unseen) and the keys are subscribed again.
    fn drop_node(&mut self, node: &NodeAddr) {
        self.nodes.remove(node);
        let keys = self.keys_where(|_, ch| ch.node == *node);
        self.forget(keys, true);
    }

    /// Sends what the core passes on (`core/linger.rs`) on the connection
    /// of the node that holds the key's channel, so its slot's; a broken
    /// connection shows at the read.
    fn pass_on(&mut self) {
        let (channels, nodes) = (&self.channels, &mut self.nodes);
        send_pass_ons(self.state, |key, packed, _| {
            if let Some(conn) = channels.get(&key).and_then(|ch| nodes.get_mut(&ch.node)) {
                drop(conn.send_packed_command(packed));
            }
        });
    }

    /// Reads what the nodes pushed, sharing one slice among them.
    fn read_pushes(&mut self) -> RedisResult<()> {
        if self.nodes.is_empty() {
            let listener = self.state.cell.listen_changed();
            if let Some(until) = deadline_after(now(), SLICE) {
                listener.wait_deadline(until);
            }
            return Ok(());
        }
        self.pass_on();
        let per_node = (SLICE / self.nodes.len() as u32).max(Duration::from_millis(1));
        let mut lost = Vec::new();
        let mut moved = Vec::new();
        let addrs: Vec<NodeAddr> = self.nodes.keys().cloned().collect();
        for node in addrs {
            let mut timeout = per_node;
            while let Some(conn) = self.nodes.get_mut(&node) {
                let read = conn.set_read_timeout(Some(timeout));
                match read.and_then(|()| conn.recv_response()) {
                    Ok(Value::Push { kind, data }) => {
                        match handle_push(self.state, &kind, &data) {
                            Some(Notice::Subscribed(Some(key))) => {
                                if let Some(ch) = self.channels.get_mut(&key) {
                                    ch.confirmed = true;
                                }
                            }
                            Some(Notice::Unsubscribed(key)) => moved.push((key, node.clone())),
                            _ => {}
                        }
                        self.pass_on();
                        // Drain what is already there without waiting long.
                        timeout = Duration::from_millis(1);
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
        for (key, ended_by) in moved {
            // Ours are forgotten before we unsubscribe them: this one the
            // node ended (its slot moved). Check now, subscribe again.
            if self.channels.remove(&key).is_some() {
                self.state.with_core(|core| core.handle_channel_lost(key));
                let moved = Moved {
                    first_read: self.reads_started + 1,
                    ended_by,
                    rereads: 0,
                };
                self.moved.insert(key, moved);
                self.slots_stale = true;
            }
        }
        if !lost.is_empty() {
            for node in &lost {
                self.drop_node(node);
            }
            // Their keys' heads check at once (`drop_node`) and poll at
            // `poll_interval` until the keys are subscribed again, on a
            // fresh map (the next confirmation makes the locker subscribed).
            self.slots_stale = true;
            self.state
                .with_core(|core| core.handle_subscriber_lost(now()));
        }
        Ok(())
    }
}

/// Runs `work` on a short-lived thread and hands back where its result
/// will arrive ([`helper_result`]).
fn on_helper_thread<T: Send + 'static>(
    work: impl FnOnce() -> RedisResult<T> + Send + 'static,
) -> Receiver<RedisResult<T>> {
    let (tx, rx) = channel();
    // The subscriber may have stopped meanwhile: nobody to tell. Without a
    // thread, `tx` is dropped with `work`.
    let spawned = std::thread::Builder::new().name("redlease-subscriber-io".into());
    let _ = spawned.spawn(move || drop(tx.send(work())));
    rx
}

/// A helper thread's result once it came; a thread that could not start,
/// or died, is an I/O error.
fn helper_result<T>(rx: &Receiver<RedisResult<T>>) -> Option<RedisResult<T>> {
    match rx.try_recv() {
        Err(TryRecvError::Empty) => None,
        Ok(result) => Some(result),
        Err(TryRecvError::Disconnected) => {
            Some(Err((redis::ErrorKind::Io, "a helper thread stopped").into()))
        }
    }
}
