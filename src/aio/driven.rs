//! The command connection to one server over plain TCP or a unix socket:
//! requests pipelined on one socket, driven by the futures that wait for
//! their replies. Nothing is spawned.
//!
//! The redis crate's multiplexed connection passes each command through a
//! channel to its driver and each reply back through a oneshot, its codec
//! behind a compat layer: a sixth of the async cycle's CPU (`perf`, issue
//! 22, BENCHMARKS "Async vs blocking"). Here a request is packed straight
//! into the write buffer and written by the future that sends it; replies
//! are parsed by the redis crate's [`redis::Parser`] (as on its sync
//! connection) and handed in order to the reply slots
//! ([`Replies`](crate::driver::replies)), all under one lock, by whichever
//! waiting future is polled.
//!
//! **Waking.** The socket's readiness wakes the last request that polled;
//! one that got its reply, or was dropped, while others wait wakes the
//! oldest of them, which reads for them. Under `smol::block_on` or
//! async-std a round trip costs one context switch, elsewhere
//! (`futures::executor`, tokio) two: readiness comes from async-io's thread.
//! With feature `tokio`, a socket opened inside a tokio runtime is on
//! that runtime's reactor instead (`tokio_reactor.rs`): one switch there.
//!
//! **Reads.** A read that fills less than its buffer has drained the
//! socket: the next waits for the reactor's wake, so a reply costs one
//! `recv`. While no request waits nothing reads the socket; a close by the
//! server meanwhile is seen by [`DrivenConnection::is_open`]. TLS keeps the
//! redis crate's connection (its TLS stream is not public).

use std::future::Future;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::{ArcWake, AtomicWaker};
use parking_lot::Mutex;
use redis::{ConnectionInfo, RedisResult, Value};

use crate::clock::now;
use crate::driver::replies::{dropped, Outgoing, Replies};
use crate::driver::wire::set_up;
use crate::error::timed_out;

/// One connection; clones share it.
#[derive(Clone)]
pub(crate) struct DrivenConnection {
    inner: Arc<Inner>,
    db: i64,
}

struct Inner {
    socket: Socket,
    state: Mutex<State>,
    readiness: Arc<Readiness>,
}

/// The socket, TCP or unix.
pub(super) type Socket = Arc<dyn Wire>;

/// What the connection does with its socket.
pub(super) trait Wire: Send + Sync {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write(&self, buf: &[u8]) -> io::Result<usize>;
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Its reactor turns for a request polled here (a tokio runtime's may
    /// not): else reopen, do not send.
    fn usable_here(&self) -> bool {
        true
    }
    /// Its reactor ended (a tokio runtime shut down). Replaces the waker.
    fn gone(&self) -> bool {
        false
    }
}

impl<S: Send + Sync> Wire for async_io::Async<S>
where
    for<'a> &'a S: Read + Write,
{
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.get_ref().read(buf)
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.get_ref().write(buf)
    }

    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        async_io::Async::poll_readable(self, cx)
    }

    fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        async_io::Async::poll_writable(self, cx)
    }
}

/// The waker registered with the reactor: notes the socket ready,
/// then wakes the driver.
#[derive(Default)]
struct Readiness {
    woken: AtomicBool,
    driver: AtomicWaker,
}

impl ArcWake for Readiness {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.woken.store(true, Ordering::Release);
        arc_self.driver.wake();
    }
}

/// Requests not yet written, the parser and the reply slots.
#[derive(Default)]
struct State {
    out: Vec<u8>,
    parser: redis::Parser,
    /// The last read found the socket empty: read again after a wake.
    drained: bool,
    replies: Replies,
}

/// The most replies parsed in one poll before letting other tasks run.
const REPLIES_PER_POLL: usize = 64;

/// The socket as the parser reads it: after a read that drained it, says
/// `WouldBlock` without a syscall until the reactor woke the connection.
struct Reader<'a> {
    socket: &'a Socket,
    readiness: &'a Readiness,
    drained: &'a mut bool,
    blocked: bool,
}

impl Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if *self.drained && !self.readiness.woken.swap(false, Ordering::AcqRel) {
            self.blocked = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        loop {
            match self.socket.read(buf) {
                Ok(n) => {
                    *self.drained = n < buf.len();
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.kind() == io::ErrorKind::WouldBlock {
                        (*self.drained, self.blocked) = (true, true);
                    }
                    return Err(e);
                }
            }
        }
    }
}

impl Inner {
    /// Writes what is queued and reads the replies that came, until `me`
    /// has its reply or the socket has nothing more; `wait`: then register
    /// with the reactor for the next (else only look).
    fn drive(&self, state: &mut State, me: u64, wait: bool) {
        let waker = futures::task::waker_ref(&self.readiness);
        let mut cx = Context::from_waker(&waker);
        if let Err(e) = self.flush(state, &mut cx) {
            return state.replies.fail(e.into(), me);
        }
        for _ in 0..REPLIES_PER_POLL {
            let State {
                parser, drained, ..
            } = state;
            let mut reader = Reader {
                socket: &self.socket,
                readiness: &self.readiness,
                drained,
                blocked: false,
            };
            match parser.parse_value(&mut reader) {
                Ok(value) => {
                    state.replies.handle_reply(value, me);
                    if state.replies.is_answered(me) {
                        return;
                    }
                }
                Err(_) if reader.blocked && !wait => return,
                // Registered with the reactor; a wake that came meanwhile
                // (noted by `woken`) lets the next read through.
                Err(_) if reader.blocked => match self.register(&mut cx) {
                    Poll::Ready(Ok(())) => state.drained = false,
                    Poll::Ready(Err(e)) => return state.replies.fail(e.into(), me),
                    Poll::Pending if self.readiness.woken.load(Ordering::Acquire) => {}
                    Poll::Pending => return,
                },
                Err(e) => return state.replies.fail(e, me),
            }
        }
        // Replies keep coming: the rest on the next poll.
        self.readiness.driver.wake();
    }

    /// Asks the reactor to wake the connection when the socket is readable.
    /// `Ready` without a wake is the event whose data was read already
    /// (async-io keeps it until the next registration): registers again
    /// rather than read for an `EAGAIN`.
    fn register(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.socket.poll_readable(cx) {
            Poll::Ready(Ok(())) if !self.readiness.woken.load(Ordering::Acquire) => {
                self.socket.poll_readable(cx)
            }
            other => other,
        }
    }

    /// Writes the queued requests, or registers for the socket to be
    /// writable again.
    fn flush(&self, state: &mut State, cx: &mut Context<'_>) -> io::Result<()> {
        while !state.out.is_empty() {
            match self.socket.write(&state.out) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => drop(state.out.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.socket.poll_writable(cx)?.is_pending() {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl DrivenConnection {
    /// Connects to `info`'s address, over plain TCP or a unix socket, and
    /// sets the connection up as the redis crate does (`HELLO`, `AUTH`,
    /// `SELECT`, `CLIENT SETINFO`; `TCP_NODELAY`), within `timeout`.
    pub(crate) async fn connect(info: &ConnectionInfo, timeout: Duration) -> RedisResult<Self> {
        let settings = info.redis_settings();
        let open = async {
            Ok::<_, redis::RedisError>(match info.addr() {
                redis::ConnectionAddr::Tcp(host, port) => {
                    let tcp = Arc::new(connect_tcp(host, *port).await?);
                    tcp.get_ref().set_nodelay(info.tcp_settings().nodelay())?;
                    // The set-up owns its stream: a second handle to the socket.
                    let second = async_io::Async::new(tcp.get_ref().try_clone()?)?;
                    set_up(settings, second).await?;
                    on_reactor(tcp)
                }
                #[cfg(unix)]
                redis::ConnectionAddr::Unix(path) => {
                    let unix = async_io::Async::<std::os::unix::net::UnixStream>::connect(path);
                    let unix = Arc::new(unix.await?);
                    set_up(settings, async_io::Async::new(unix.get_ref().try_clone()?)?).await?;
                    on_reactor(unix)
                }
                _ => {
                    return Err((redis::ErrorKind::Client, "not a plain TCP or unix socket").into())
                }
            })
        };
        let opened = super::within(now().checked_add(timeout), open).await;
        let socket = opened.unwrap_or_else(|| Err(timed_out()))?;
        Ok(DrivenConnection {
            inner: Arc::new(Inner {
                socket,
                state: Mutex::default(),
                readiness: Arc::default(),
            }),
            db: settings.db(),
        })
    }

    /// Whether the connection is still open, after reading what came in
    /// while no command waited (the server closing it): the socket says a
    /// close at once, async-io's reactor may not have passed it on yet.
    pub(crate) fn is_open(&self) -> bool {
        if !self.inner.socket.usable_here() {
            return false;
        }
        // Locked: a command is driving it now.
        let Some(mut state) = self.inner.state.try_lock() else {
            return true;
        };
        if !state.replies.ended() && !state.replies.any_waiting() {
            // Not while a request waits: looking replaces its waker.
            if self.inner.socket.gone() {
                return false;
            }
            state.drained = false;
            self.inner.drive(&mut state, u64::MAX, false);
        }
        !state.replies.ended()
    }

    fn request<'a>(&'a self, send: Outgoing<'a>) -> Request<'a> {
        Request {
            inner: &self.inner,
            send: Some(send),
            id: None,
        }
    }
}

/// The socket, once set up, on the reactor of the tokio runtime it is
/// opened in (feature `tokio`): a reply then wakes that runtime's thread
/// itself, not async-io's thread first, one context switch fewer per round
/// trip (BENCHMARKS "Async vs blocking"). Elsewhere on async-io's.
fn on_reactor<S: Registrable>(socket: Arc<async_io::Async<S>>) -> Socket
where
    async_io::Async<S>: Wire + 'static,
{
    socket.get_ref().on_tokio().unwrap_or(socket)
}

/// A socket that a tokio runtime's reactor can take over (feature `tokio`,
/// `tokio_reactor.rs`); without it, none.
pub(super) trait Registrable {
    fn on_tokio(&self) -> Option<Socket> {
        None
    }
}

#[cfg(not(all(feature = "tokio", panic = "unwind")))]
impl Registrable for std::net::TcpStream {}
#[cfg(all(unix, not(all(feature = "tokio", panic = "unwind"))))]
impl Registrable for std::os::unix::net::UnixStream {}

/// The first address of `host` that accepts a connection. Resolving a
/// name blocks (the standard library has no asynchronous resolver), once
/// per connection; an IP address resolves at once.
async fn connect_tcp(host: &str, port: u16) -> io::Result<async_io::Async<std::net::TcpStream>> {
    let addrs = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))?;
    let mut last = None;
    for addr in addrs {
        match async_io::Async::<std::net::TcpStream>::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("the host name resolves to no address")))
}

/// A request: queued at its first poll, then driving the connection until
/// its reply came.
struct Request<'a> {
    inner: &'a Inner,
    /// Until queued.
    send: Option<Outgoing<'a>>,
    /// Queued, not yet answered.
    id: Option<u64>,
}

impl Future for Request<'_> {
    type Output = RedisResult<Value>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let inner = this.inner;
        let mut state = inner.state.lock();
        let id = match (this.id, this.send.take()) {
            (Some(id), _) => id,
            (None, Some(send)) if !state.replies.ended() => {
                let State { out, replies, .. } = &mut *state;
                *this.id.insert(replies.queue(send, out))
            }
            (None, _) => return Poll::Ready(Err(dropped())),
        };
        let waiting = state.replies.waits(id, cx.waker());
        if waiting {
            inner.readiness.driver.register(cx.waker());
            inner.drive(&mut state, id, true);
        }
        match state.replies.take(id) {
            Some(result) => {
                this.id = None;
                state.replies.wake_next();
                Poll::Ready(result)
            }
            None if waiting => Poll::Pending,
            None => Poll::Ready(Err(dropped())),
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut state = self.inner.state.lock();
            state.replies.abandon(id);
            // It may have been the one reading.
            state.replies.wake_next();
        }
    }
}

impl redis::aio::ConnectionLike for DrivenConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        Box::pin(self.request(Outgoing::Cmd(cmd)))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        if pipeline.is_transaction() {
            let refused = (redis::ErrorKind::Client, "no transactions here").into();
            return Box::pin(std::future::ready(Err(refused)));
        }
        let request = self.request(Outgoing::Pipeline(pipeline, offset, count));
        Box::pin(async move {
            match request.await? {
                Value::Array(values) => Ok(values),
                other => Ok(vec![other]),
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}
