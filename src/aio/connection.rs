//! The async command connection: one multiplexed connection shared by every
//! task of a locker (opened on demand, replaced after it dropped), and the
//! one place scripts are sent (EVALSHA, reloading the script on `NOSCRIPT`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, OptionFuture};
use futures::FutureExt;
use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncConnectionConfig, PushInfo, PushKind, Value};

use super::deadline::{Deadlines, TimedConnection};
use super::driven::DrivenConnection;
use crate::cluster::{slots_cmd, SlotMap};
use crate::core::script::{pipeline_loading, ScriptCall};
use crate::driver::connect::Ask;
use crate::driver::ops::{resend_as_eval, then_after, ReleaseReplies, Reply, Request};
use crate::driver::state::Connections;
use crate::driver::target::{resp3, Source};
use crate::error::{connect_failed, is_noscript, is_server_reply, Failure, Transport};
use crate::sentinel::is_failover_reply;
use crate::stats::Counters;

/// A script's reply, or the reply of `EVAL` sent after it said `NOSCRIPT`.
async fn eval_again_on_noscript(
    call: &ScriptCall,
    conn: &mut Timed,
    reply: redis::RedisResult<Value>,
) -> redis::RedisResult<Value> {
    match reply {
        Err(e) if is_noscript(&e) => call.eval().query_async::<Value>(conn).await,
        other => other,
    }
}

/// The slot map a cluster connection reads through `routing`, if it
/// answers (bounded by the connection's own timeout).
async fn read_slots(conn: &mut ClusterConnection, routing: RoutingInfo) -> Option<Arc<SlotMap>> {
    let reply = conn.route_command(slots_cmd(), routing).await.ok()?;
    Some(Arc::new(SlotMap::parse(&reply)))
}

/// The shared connection with the command timeout applied.
type Timed = TimedConnection<AnyConnection>;

pub struct Commands {
    source: Source,
    timeout: Duration,
    conn: Arc<Mutex<Current>>,
    deadlines: Deadlines,
}

/// A command connection of either kind; clones share one connection.
#[derive(Clone)]
pub(crate) enum AnyConnection {
    Driven(DrivenConnection),
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// `$body` on the connection inside `$any`, whichever kind it is.
macro_rules! on_any {
    ($any:expr, $conn:ident => $body:expr) => {
        match $any {
            AnyConnection::Driven($conn) => $body,
            AnyConnection::Standalone($conn) => $body,
            AnyConnection::Cluster($conn) => $body,
        }
    };
}

impl redis::aio::ConnectionLike for AnyConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        on_any!(self, c => c.req_packed_command(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        on_any!(self, c => c.req_packed_commands(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        on_any!(self, c => c.get_db())
    }
}

/// The shared connection and a generation, so that a disconnection report
/// from an old connection cannot discard its replacement.
#[derive(Default)]
struct Current {
    conn: Option<AnyConnection>,
    generation: u64,
    /// A cluster connection's slot map, as read when it was opened.
    slots: Option<Arc<SlotMap>>,
    /// A slot whose script timed out on the cluster connection: the next
    /// operation first asks whether it moved.
    suspect: Option<u16>,
}

impl Current {
    /// Forgets the connection and starts the generation of its
    /// replacement.
    fn replace(&mut self) -> u64 {
        self.conn = None;
        self.generation += 1;
        self.generation
    }

    /// Forgets the connection of `generation`, not a replacement.
    fn forget(&mut self, generation: u64) {
        if self.generation == generation {
            self.conn = None;
        }
    }
}

impl std::fmt::Debug for Commands {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commands").finish_non_exhaustive()
    }
}

impl Commands {
    pub(crate) fn new(source: Source, timeout: Duration) -> Self {
        Commands {
            source,
            timeout,
            conn: Arc::new(Mutex::new(Current::default())),
            deadlines: Deadlines::default(),
        }
    }

    /// The shared connection, opened when there is none.
    ///
    /// A server-side close (`CLIENT KILL`, restart) is seen before the
    /// connection is reused (a driven one reads it, the redis crate's TLS
    /// connection reports a `Disconnection` push as soon as it sees it),
    /// and the connection is forgotten then: the next operation opens a
    /// new one instead of failing on a dead socket.
    pub(crate) async fn connection(&self) -> Result<AnyConnection, redis::RedisError> {
        // A driven connection learns of its end only when read.
        self.forget_if_ended();
        // Boxed: both are rare, and their futures (opening's about 2.7 KB)
        // would otherwise be part of every operation's future.
        let next: BoxFuture<'_, _> = {
            let mut guard = self.conn.lock();
            let current = &mut *guard;
            match (&current.conn, current.suspect.take(), &current.slots) {
                // Asks first whether the slot moved away from the map.
                (Some(AnyConnection::Cluster(conn)), Some(slot), Some(slots)) => self
                    .checked(conn.clone(), slot, slots.clone(), current.generation)
                    .boxed(),
                (Some(conn), ..) => return Ok(conn.clone()),
                (None, ..) => self.open(current.replace()).boxed(),
            }
        };
        next.await
    }

    /// The cluster connection if `slot` is still served by the primary
    /// that served it when the connection opened: that node is paused or
    /// slow, and only its slots fail, while a new connection would stall
    /// every slot (the redis crate connects to each node, the silent one
    /// until its timeout, and refreshes its map under a lock whenever a
    /// command for the silent node's slots is redirected). If the slot
    /// moved (a failover), or no other primary answered, a new connection,
    /// which reads the new map: the crate learns of a new owner only from
    /// a redirect, which a silent node never sends.
    async fn checked(
        &self,
        mut conn: ClusterConnection,
        slot: u16,
        slots: Arc<SlotMap>,
        generation: u64,
    ) -> Result<AnyConnection, redis::RedisError> {
        if let Some(owner) = slots.owner(slot) {
            if let Some(away) = slots.slot_away_from(owner) {
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(away, SlotAddr::Master));
                let now = read_slots(&mut conn, RoutingInfo::SingleNode(route)).await;
                if now.as_ref().and_then(|now| now.owner(slot)) == Some(owner) {
                    return Ok(AnyConnection::Cluster(conn));
                }
            }
        }
        let generation = {
            let mut current = self.conn.lock();
            match &current.conn {
                Some(conn) if current.generation != generation => return Ok(conn.clone()),
                _ => current.replace(),
            }
        };
        self.open(generation).await
    }

    /// A connection to one server over RESP3 (its disconnection report
    /// needs pushes): over plain TCP or a unix socket driven by the
    /// commands themselves (driven.rs), over TLS with the redis crate's
    /// driver on smol's executor. A failure says where the scheme may not
    /// match the port ([`connect_failed`]).
    async fn open_one(
        &self,
        info: &redis::ConnectionInfo,
        config: AsyncConnectionConfig,
    ) -> Result<AnyConnection, redis::RedisError> {
        let client = resp3(info.clone())?;
        let info = client.get_connection_info();
        let opened = match info.addr() {
            redis::ConnectionAddr::TcpTls { .. } => {
                let conn = client.get_multiplexed_async_connection_with_config(&config);
                conn.await.map(AnyConnection::Standalone)
            }
            _ => (DrivenConnection::connect(info, self.timeout).await).map(AnyConnection::Driven),
        };
        opened.map_err(|e| connect_failed(Transport::of(info.addr()), e))
    }

    /// Opens a connection as generation `generation`.
    async fn open(&self, generation: u64) -> Result<AnyConnection, redis::RedisError> {
        let shared = Arc::downgrade(&self.conn);
        let on_push = move |push: PushInfo| -> Result<(), Infallible> {
            if push.kind == PushKind::Disconnection {
                if let Some(current) = shared.upgrade() {
                    current.lock().forget(generation);
                }
            }
            Ok(())
        };
        // The command timeout is applied by `timed`, without a timer per
        // command (deadline.rs).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None)
            .set_push_sender(on_push);
        let mut slots = None;
        let conn = match &self.source {
            Source::Standalone(client) => {
                self.open_one(client.get_connection_info(), config).await?
            }
            Source::Sentinel(resolver) => {
                let primary = resolver.primary_async(self.timeout).await?;
                self.open_one(primary.get_connection_info(), config).await?
            }
            // The cluster connection reconnects to its nodes by itself.
            Source::Cluster(client, template) => {
                let transport = Source::cluster_transport(template.as_ref());
                let mut cluster = (client.get_async_connection().await)
                    .map_err(|e| connect_failed(transport, e))?;
                let any = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
                slots = read_slots(&mut cluster, any).await;
                AnyConnection::Cluster(cluster)
            }
        };
        let mut current = self.conn.lock();
        if current.generation == generation {
            current.conn = Some(conn.clone());
            current.slots = slots;
            current.suspect = None;
        }
        Ok(conn)
    }

    /// `conn` with the command timeout: on one server, bounded here; the
    /// cluster connection has its own (`crate::cluster`).
    fn timed(&self, conn: AnyConnection) -> Timed {
        let timeout = (!matches!(conn, AnyConnection::Cluster(_))).then_some(self.timeout);
        TimedConnection {
            conn,
            deadlines: self.deadlines.clone(),
            timeout,
        }
    }

    /// Forgets a connection that failed, or whose server says it is no
    /// longer a writable primary (`READONLY`, `MASTERDOWN`), so the next
    /// operation opens anew (through Sentinel: to the primary it names now).
    /// On a cluster a timeout too, unless the connection's slot map is
    /// known and the command's `slot` is: then the next operation first
    /// asks whether the slot moved ([`Commands::checked`]).
    fn discard_if_broken(&self, result: &redis::RedisResult<Value>, slot: Option<u16>) {
        let Err(e) = result else { return };
        let (timed_out, cluster) = (e.is_timeout(), matches!(self.source, Source::Cluster(..)));
        if cluster && timed_out {
            let mut current = self.conn.lock();
            if let (Some(slot), Some(_), Some(_)) = (slot, &current.conn, &current.slots) {
                current.suspect = Some(slot);
                return;
            }
        }
        if is_failover_reply(e) || (!is_server_reply(e) && (!timed_out || cluster)) {
            self.close();
        }
    }

    /// Sends a script call: EVALSHA, and on `NOSCRIPT` the script once more as
    /// `EVAL`, which also caches it. Then, if the script granted or renewed
    /// the lease, `then` on the same connection (the replication `WAIT`, which
    /// only counts the writes of its own connection; it holds up the
    /// commands queued behind it for at most its timeout).
    async fn run_then(
        &self,
        call: &ScriptCall,
        counters: &Counters,
        then: Option<&redis::Cmd>,
    ) -> (Result<Value, Failure>, Option<redis::RedisResult<Value>>) {
        let mut conn = match self.connection().await {
            Ok(conn) => self.timed(conn),
            Err(e) => return (Err(Failure::NotSent(e)), None),
        };
        counters.script_sent();
        let mut result = call.evalsha().query_async::<Value>(&mut conn).await;
        if resend_as_eval(&result, counters) {
            result = call.eval().query_async::<Value>(&mut conn).await;
        }
        let then_sent = then_after(call, &result, then).map(|cmd| cmd.query_async(&mut conn));
        let then_reply = OptionFuture::from(then_sent).await;
        self.discard_if_broken(&result, call.slot());
        (result.map_err(Failure::Sent), then_reply)
    }

    /// Sends a request of an operation.
    pub(crate) async fn send(&self, request: &Request, counters: &Counters) -> Reply {
        match request {
            Request::Script { call, then } => {
                let (reply, then) = self.run_then(call, counters, then.as_ref()).await;
                Reply::Script { reply, then }
            }
            Request::Releases { calls, until } => {
                Reply::Releases(self.run_releases(calls, *until).await)
            }
        }
    }

    /// Sends many releases, each answered on its own: one pipeline after
    /// `SCRIPT LOAD` on one server, all at once on a cluster (a pipeline
    /// goes to one node; the keys live on many), bounded by `until` as a
    /// whole. A reply that says `NOSCRIPT` is sent again as `EVAL`.
    async fn run_releases(
        &self,
        calls: &[ScriptCall],
        until: Option<Instant>,
    ) -> Result<ReleaseReplies, Failure> {
        let replies: Mutex<ReleaseReplies> = Mutex::new(calls.iter().map(|_| None).collect());
        let work = async {
            let conn = self.connection().await.map_err(Failure::NotSent)?;
            if let AnyConnection::Cluster(_) = conn {
                futures::future::join_all(calls.iter().enumerate().map(|(i, call)| {
                    let (mut conn, replies) = (self.timed(conn.clone()), &replies);
                    async move {
                        let first = call.evalsha().query_async::<Value>(&mut conn).await;
                        let reply = eval_again_on_noscript(call, &mut conn, first).await;
                        replies.lock()[i] = Some(reply.map_err(Failure::Sent));
                    }
                }))
                .await;
                return Ok(());
            }
            let mut conn = self.timed(conn);
            let results = pipeline_loading(calls)
                .query_async::<Vec<redis::RedisResult<Value>>>(&mut conn)
                .await
                .map_err(Failure::Sent)?;
            for (i, (result, call)) in results.into_iter().zip(calls).enumerate() {
                let reply = eval_again_on_noscript(call, &mut conn, result).await;
                replies.lock()[i] = Some(reply.map_err(Failure::Sent));
            }
            Ok::<(), Failure>(())
        };
        super::within(until, work).await.unwrap_or(Ok(()))?;
        Ok(replies.into_inner())
    }

    /// Sends a connect-time check on the shared connection.
    pub(crate) async fn ask(&self, ask: Ask) -> Result<Value, Failure> {
        match (ask, self.connection().await.map_err(Failure::NotSent)?) {
            (Ask::EveryPrimary(cmd), AnyConnection::Cluster(mut conn)) => conn
                .route_command(cmd, crate::eviction::every_primary())
                .await
                .map_err(Failure::Sent),
            (Ask::EveryPrimary(_), _) => Err(Failure::not_a_cluster()),
            (Ask::One(cmd), conn) => {
                let result = cmd.query_async::<Value>(&mut self.timed(conn)).await;
                self.discard_if_broken(&result, None);
                result.map_err(Failure::Sent)
            }
        }
    }

    /// Forgets a driven connection found ended (read once: the server may
    /// have closed it while idle). Read outside the lock.
    fn forget_if_ended(&self) {
        let (driven, generation) = {
            let current = self.conn.lock();
            match &current.conn {
                Some(AnyConnection::Driven(conn)) => (conn.clone(), current.generation),
                _ => return,
            }
        };
        if !driven.is_open() {
            self.conn.lock().forget(generation);
        }
    }
}

impl Connections for Commands {
    /// Whether the shared connection is open (as far as it knows; a driven
    /// connection reads what came in first).
    fn is_connected(&self) -> bool {
        self.forget_if_ended();
        self.conn.lock().conn.is_some()
    }

    /// Drops the shared connection; its driver ends with the last clone.
    fn close(&self) {
        self.conn.lock().replace();
    }
}
