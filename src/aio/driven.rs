//! The command connection to one server over plain TCP or a unix socket:
//! requests pipelined on one socket, driven by the futures that wait for
//! their replies. Nothing is spawned.
//!
//! The redis crate's multiplexed connection passes each command through a
//! channel to its driver and each reply back through a oneshot, its codec
//! behind a compat layer: a sixth of the async cycle's CPU, more than
//! anything but the reactor (`perf`, issue 22, BENCHMARKS "Async vs
//! blocking"). Here a command is packed straight into the write buffer
//! (`Cmd::write_packed_command`) and written by the future that sends it;
//! replies are parsed by the redis crate's [`redis::Parser`] (the one its
//! sync connection uses) and handed, in order, to a queue of reply slots.
//! All of it happens under one lock, by whichever waiting future is polled.
//!
//! **Waking.** The socket's readiness wakes the last command that polled
//! (the driver); a command that got its reply, or was dropped, while
//! others wait wakes the oldest of them, which takes the role. Under
//! `smol::block_on` or async-std a round trip costs one context switch,
//! elsewhere (`futures::executor`, tokio) two, as readiness comes from
//! async-io's reactor thread.
//!
//! **Reads.** A read that fills less than its buffer has drained the
//! socket: the next one waits for the reactor's wake instead of asking the
//! socket (an `EAGAIN` per reply otherwise), so a reply costs one `recv`.
//!
//! **Failures.** The end of the stream, a read or write error or garbage
//! ends the connection: the oldest waiting command gets the error, the
//! others and every later one a broken pipe (`is_connection_dropped`). A
//! dropped command's reply is still read, and discarded, so replies never
//! shift. While no command waits nothing reads the socket; a close by the
//! server meanwhile is seen by [`DrivenConnection::is_open`].
//!
//! TLS keeps the redis crate's connection: it does not make its TLS stream
//! public.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::{select, Either};
use futures::task::{ArcWake, AtomicWaker};
use parking_lot::Mutex;
use redis::{ConnectionInfo, RedisConnectionInfo, RedisResult, Value};

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

enum Socket {
    Tcp(Arc<async_io::Async<std::net::TcpStream>>),
    #[cfg(unix)]
    Unix(Arc<async_io::Async<std::os::unix::net::UnixStream>>),
}

/// The waker registered with async-io's reactor: notes the socket ready,
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

/// Requests not yet written, the parser, and the reply slots by request
/// order: `slots[..answered]` have their reply (or were taken), the rest
/// wait, the first of them for the next reply.
struct State {
    out: Vec<u8>,
    parser: redis::Parser,
    /// The last read found the socket empty: read again after a wake.
    drained: bool,
    slots: VecDeque<Slot>,
    /// The id of `slots[0]`; ids follow request order.
    first: u64,
    answered: usize,
    ended: bool,
}

enum Slot {
    Waiting {
        /// Replies to pass over first (a pipeline's `offset`).
        skip: usize,
        /// `None`: one command; `Some(n)`: a pipeline's `n` replies.
        count: Option<usize>,
        got: Vec<Value>,
        waker: Option<Waker>,
        /// Its future was dropped: the reply is read and discarded.
        dropped: bool,
    },
    Answered(RedisResult<Value>),
    Gone,
}

/// What a request sends.
#[derive(Clone, Copy)]
enum Outgoing<'a> {
    Cmd(&'a redis::Cmd),
    Pipeline(&'a redis::Pipeline, usize, usize),
}

/// The most replies parsed in one poll before letting other tasks run.
const REPLIES_PER_POLL: usize = 64;

fn dropped() -> redis::RedisError {
    io::Error::from(io::ErrorKind::BrokenPipe).into()
}

impl State {
    fn queue(&mut self, send: Outgoing<'_>) -> u64 {
        let (skip, count) = match send {
            Outgoing::Cmd(cmd) => {
                cmd.write_packed_command(&mut self.out);
                (0, None)
            }
            Outgoing::Pipeline(pipeline, offset, count) => {
                self.out.extend_from_slice(&pipeline.get_packed_pipeline());
                (offset, Some(count))
            }
        };
        self.slots.push_back(Slot::Waiting {
            skip,
            count,
            got: Vec::new(),
            waker: None,
            dropped: false,
        });
        self.first + self.slots.len() as u64 - 1
    }

    fn slot(&mut self, id: u64) -> Option<&mut Slot> {
        let index = usize::try_from(id.checked_sub(self.first)?).ok()?;
        self.slots.get_mut(index)
    }

    /// The reply of `id`, once it came.
    fn take(&mut self, id: u64) -> Option<RedisResult<Value>> {
        let slot = self.slot(id)?;
        if !matches!(slot, Slot::Answered(_)) {
            return None;
        }
        let Slot::Answered(result) = std::mem::replace(slot, Slot::Gone) else {
            return None;
        };
        self.trim();
        Some(result)
    }

    fn trim(&mut self) {
        while self.answered > 0 && matches!(self.slots.front(), Some(Slot::Gone)) {
            self.slots.pop_front();
            self.first += 1;
            self.answered -= 1;
        }
    }

    /// Hands a reply to the oldest waiting slot (`me` is the polling
    /// command: not woken). Pushes are out of band (no subscriptions here).
    fn dispatch(&mut self, value: Value, me: u64) {
        if let Value::Push { .. } = value {
            return;
        }
        let Some(Slot::Waiting {
            skip, count, got, ..
        }) = self.slots.get_mut(self.answered)
        else {
            return;
        };
        if *skip > 0 {
            *skip -= 1;
            return;
        }
        let result = match count {
            None => value,
            Some(n) => {
                got.push(value);
                if got.len() < *n {
                    return;
                }
                Value::Array(std::mem::take(got))
            }
        };
        self.answer(Ok(result), me);
    }

    fn answer(&mut self, result: RedisResult<Value>, me: u64) {
        let id = self.first + self.answered as u64;
        let Some(slot) = self.slots.get_mut(self.answered) else {
            return;
        };
        self.answered += 1;
        match std::mem::replace(slot, Slot::Gone) {
            Slot::Waiting { dropped: true, .. } => self.trim(),
            Slot::Waiting { waker, .. } => {
                *slot = Slot::Answered(result);
                match waker {
                    Some(waker) if id != me => waker.wake(),
                    _ => {}
                }
            }
            other => *slot = other,
        }
    }

    /// Ends the connection: the oldest waiting command gets `error`, the
    /// rest a broken pipe.
    fn fail(&mut self, error: redis::RedisError, me: u64) {
        self.ended = true;
        let mut error = Some(error);
        while self.answered < self.slots.len() {
            let live = matches!(
                self.slots[self.answered],
                Slot::Waiting { dropped: false, .. }
            );
            let this = if live { error.take() } else { None };
            self.answer(Err(this.unwrap_or_else(dropped)), me);
        }
    }

    /// Wakes the oldest waiting command, to take the driver's role.
    fn wake_next(&self) {
        let waiting = self.slots.iter().skip(self.answered);
        for slot in waiting {
            if let Slot::Waiting {
                dropped: false,
                waker: Some(waker),
                ..
            } = slot
            {
                waker.wake_by_ref();
                return;
            }
        }
    }
}

impl Socket {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.get_ref().read(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.get_ref().read(buf),
        }
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.get_ref().write(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.get_ref().write(buf),
        }
    }

    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tcp(s) => s.poll_readable(cx),
            #[cfg(unix)]
            Socket::Unix(s) => s.poll_readable(cx),
        }
    }

    fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tcp(s) => s.poll_writable(cx),
            #[cfg(unix)]
            Socket::Unix(s) => s.poll_writable(cx),
        }
    }
}

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
            return state.fail(e.into(), me);
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
                    state.dispatch(value, me);
                    if matches!(state.slot(me), Some(Slot::Answered(_))) {
                        return;
                    }
                }
                Err(_) if reader.blocked && !wait => return,
                // Registered with the reactor; a wake that came meanwhile
                // (noted by `woken`) lets the next read through.
                Err(_) if reader.blocked => match self.socket.poll_readable(&mut cx) {
                    Poll::Ready(Ok(())) => state.drained = false,
                    Poll::Ready(Err(e)) => return state.fail(e.into(), me),
                    Poll::Pending if self.readiness.woken.load(Ordering::Acquire) => {}
                    Poll::Pending => return,
                },
                Err(e) => return state.fail(e, me),
            }
        }
        // Replies keep coming: the rest on the next poll.
        self.readiness.driver.wake();
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
                    set_up(settings, &tcp).await?;
                    Socket::Tcp(tcp)
                }
                #[cfg(unix)]
                redis::ConnectionAddr::Unix(path) => {
                    let unix = async_io::Async::<std::os::unix::net::UnixStream>::connect(path);
                    let unix = Arc::new(unix.await?);
                    set_up(settings, &unix).await?;
                    Socket::Unix(unix)
                }
                _ => {
                    return Err((redis::ErrorKind::Client, "not a plain TCP or unix socket").into())
                }
            })
        };
        let socket = match select(Box::pin(open), async_io::Timer::after(timeout)).await {
            Either::Left((opened, _)) => opened?,
            Either::Right(_) => return Err(io::Error::from(io::ErrorKind::TimedOut).into()),
        };
        let state = State {
            out: Vec::new(),
            parser: redis::Parser::new(),
            drained: false,
            slots: VecDeque::new(),
            first: 0,
            answered: 0,
            ended: false,
        };
        Ok(DrivenConnection {
            inner: Arc::new(Inner {
                socket,
                state: Mutex::new(state),
                readiness: Arc::default(),
            }),
            db: settings.db(),
        })
    }

    /// Whether the connection is still open, after reading what came in
    /// while no command waited (the server closing it): the socket says a
    /// close at once, async-io's reactor may not have passed it on yet.
    pub(crate) fn is_open(&self) -> bool {
        // Locked: a command is driving it now.
        let Some(mut state) = self.inner.state.try_lock() else {
            return true;
        };
        if !state.ended && state.answered == state.slots.len() {
            state.drained = false;
            self.inner.drive(&mut state, u64::MAX, false);
        }
        !state.ended
    }

    fn request<'a>(&'a self, send: Outgoing<'a>) -> Request<'a> {
        Request {
            inner: &self.inner,
            send: Some(send),
            id: None,
        }
    }
}

/// Sets the connection up exactly as the redis crate does, by opening its
/// multiplexed connection over a second handle to the socket and dropping
/// it unpolled: the set-up has read every reply it asked for by then, and
/// nothing else is sent.
async fn set_up<S>(settings: &RedisConnectionInfo, io: &Arc<async_io::Async<S>>) -> RedisResult<()>
where
    S: Send + Sync + 'static,
    for<'a> &'a S: Read + Write,
{
    let stream = tokio_util::compat::FuturesAsyncReadCompatExt::compat(SetUp(io.clone()));
    let config = redis::AsyncConnectionConfig::new();
    let set_up = redis::aio::MultiplexedConnection::new_with_config(settings, stream, config);
    drop(set_up.await?);
    Ok(())
}

/// A second handle to a socket, for the set-up.
struct SetUp<S>(Arc<async_io::Async<S>>);

impl<S> futures::io::AsyncRead for SetUp<S>
where
    for<'a> &'a S: Read,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.0).poll_read(cx, buf)
    }
}

impl<S> futures::io::AsyncWrite for SetUp<S>
where
    for<'a> &'a S: Write,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self.0).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self.0).poll_close(cx)
    }
}

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
    /// Once queued.
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
            (None, Some(send)) if !state.ended => *this.id.insert(state.queue(send)),
            (None, _) => return Poll::Ready(Err(dropped())),
        };
        match state.slot(id) {
            Some(Slot::Waiting { waker, .. }) => {
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
                inner.readiness.driver.register(cx.waker());
                inner.drive(&mut state, id, true);
            }
            Some(_) => {}
            None => return Poll::Ready(Err(dropped())),
        }
        match state.take(id) {
            Some(result) => {
                state.wake_next();
                Poll::Ready(result)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut state = self.inner.state.lock();
        match state.slot(id) {
            Some(Slot::Waiting { dropped, waker, .. }) => {
                *dropped = true;
                *waker = None;
            }
            Some(slot @ Slot::Answered(_)) => *slot = Slot::Gone,
            _ => return,
        }
        state.trim();
        // It may have been the driver.
        state.wake_next();
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
            let refused = (
                redis::ErrorKind::Client,
                "no transactions on this connection",
            );
            return Box::pin(std::future::ready(Err(refused.into())));
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
