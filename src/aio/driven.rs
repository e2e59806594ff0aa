//! A multiplexed connection driven by the futures that wait on it.
//!
//! The redis crate spawns a multiplexed connection's driver on smol's
//! global executor, so every command crosses to the `smol-1` thread and
//! back: 3–4 context switches per round trip where a blocking connection
//! has one (issue 16, `bench async-hops`). Built with
//! `MultiplexedConnection::new_with_config`, the connection hands its
//! driver to the caller instead, and here the driver is polled by whichever
//! command is waiting for a reply, on the caller's own task: under
//! `smol::block_on` or async-std a round trip then costs one context
//! switch, elsewhere (`futures::executor`, tokio) two, as the socket's
//! readiness comes from async-io's reactor thread. Nothing is spawned.
//!
//! Many commands may wait at once, on many tasks: each registers its waker
//! in a queue, the driver is polled with a waker that wakes the oldest
//! waiting command, and a command that gets its reply (or is dropped)
//! passes that role on by waking the next. While no command waits, nobody
//! polls the driver; an end of the connection that came in meanwhile (the
//! server closed it) is seen by [`DrivenConnection::is_open`], which polls
//! the driver once before the connection is reused.
//!
//! For plain TCP and unix sockets: the redis crate does not make its TLS
//! stream public, so a TLS connection keeps its spawned driver.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::{select, Either};
use futures::task::ArcWake;
use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionInfo, RedisConnectionInfo, Value};

type DriverFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A multiplexed connection and its driver; clones share both.
#[derive(Clone)]
pub(crate) struct DrivenConnection {
    conn: MultiplexedConnection,
    driver: Arc<Driver>,
}

struct Driver {
    /// `None` once the connection ended.
    future: Mutex<Option<DriverFuture>>,
    ended: AtomicBool,
    /// Apart from the driver, because the driver keeps its waker: a waker
    /// holding the `Driver` would keep the connection open forever.
    queue: Arc<Queue>,
}

/// The commands waiting for a reply by arrival (ids only grow, so the
/// first is the oldest); waking the queue marks the driver woken and wakes
/// the oldest.
struct Queue {
    waiting: Mutex<BTreeMap<u64, Waker>>,
    next_id: AtomicU64,
    /// Whether the driver was woken since its last poll (at first: never
    /// polled). A poll without a wake finds nothing new, and costs a
    /// `recv` that says `EAGAIN` (the stream tries to read first), so
    /// commands skip it: `bench async-vs-blocking`, issue 22.
    woken: AtomicBool,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            waiting: Mutex::default(),
            next_id: AtomicU64::new(0),
            woken: AtomicBool::new(true),
        }
    }
}

/// The most polls of the driver in a row by one command: past them a
/// driver still woken is left to the oldest waiting command's next poll.
const POLLS_IN_A_ROW: usize = 16;

impl Driver {
    /// Polls the driver once, unless another command is polling it now
    /// (that poll registers the same waker); `only_if_woken`: only if it
    /// was woken since its last poll. A wake during the poll polls it
    /// again, so that a wake seen by a command that found the driver busy
    /// is not lost.
    fn drive(&self, only_if_woken: bool) {
        let queue = &self.queue;
        let mut force = !only_if_woken;
        for _ in 0..POLLS_IN_A_ROW {
            if !force && !queue.woken.load(Ordering::Acquire) {
                return;
            }
            let Some(mut future) = self.future.try_lock() else {
                return;
            };
            // Cleared before the poll: a wake during it is seen next turn.
            if !queue.woken.swap(false, Ordering::AcqRel) && !force {
                return;
            }
            force = false;
            let Some(driver) = future.as_mut() else {
                return;
            };
            let waker = futures::task::waker(queue.clone());
            if driver
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
            {
                *future = None;
                self.ended.store(true, Ordering::Release);
                return;
            }
        }
        if queue.woken.load(Ordering::Acquire) {
            Queue::wake_oldest(queue);
        }
    }

    fn register(&self, id: &mut Option<u64>, waker: &Waker) {
        let queue = &self.queue;
        let mut waiting = queue.waiting.lock();
        match id {
            Some(id) => {
                if let Some(known) = waiting.get_mut(id) {
                    if !known.will_wake(waker) {
                        *known = waker.clone();
                    }
                }
            }
            None => {
                let new = queue.next_id.fetch_add(1, Ordering::Relaxed);
                waiting.insert(new, waker.clone());
                *id = Some(new);
            }
        }
    }

    /// Takes `id` out of the queue; if it was the one woken for the
    /// driver, the next waiting command takes that role.
    fn leave(&self, id: u64) {
        let mut waiting = self.queue.waiting.lock();
        let was_oldest = waiting
            .first_key_value()
            .is_some_and(|(first, _)| *first == id);
        waiting.remove(&id);
        if was_oldest {
            if let Some((_, next)) = waiting.first_key_value() {
                next.wake_by_ref();
            }
        }
    }
}

impl Queue {
    fn wake_oldest(&self) {
        if let Some((_, oldest)) = self.waiting.lock().first_key_value() {
            oldest.wake_by_ref();
        }
    }
}

impl ArcWake for Queue {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.woken.store(true, Ordering::Release);
        arc_self.wake_oldest();
    }
}

impl DrivenConnection {
    /// Connects to `info`'s address, over plain TCP or a unix socket, and
    /// sets the connection up as the redis crate does (`HELLO`, `AUTH`,
    /// `SELECT`; `TCP_NODELAY`), within `timeout`.
    pub(crate) async fn connect(
        info: &ConnectionInfo,
        config: AsyncConnectionConfig,
        timeout: Duration,
    ) -> redis::RedisResult<Self> {
        let settings = info.redis_settings();
        let open = async {
            match info.addr() {
                redis::ConnectionAddr::Tcp(host, port) => {
                    let tcp = connect_tcp(host, *port).await?;
                    tcp.get_ref().set_nodelay(info.tcp_settings().nodelay())?;
                    set_up(settings, tcp, config).await
                }
                #[cfg(unix)]
                redis::ConnectionAddr::Unix(path) => {
                    let unix = async_io::Async::<std::os::unix::net::UnixStream>::connect(path);
                    set_up(settings, unix.await?, config).await
                }
                _ => Err((redis::ErrorKind::Client, "not a plain TCP or unix socket").into()),
            }
        };
        let (conn, driver) = match select(Box::pin(open), async_io::Timer::after(timeout)).await {
            Either::Left((opened, _)) => opened?,
            Either::Right(_) => {
                return Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into())
            }
        };
        Ok(DrivenConnection {
            conn,
            driver: Arc::new(Driver {
                future: Mutex::new(Some(driver)),
                ended: AtomicBool::new(false),
                queue: Arc::default(),
            }),
        })
    }

    /// Whether the connection is still open, after letting the driver read
    /// what came in while no command waited (the server closing it).
    pub(crate) fn is_open(&self) -> bool {
        // Even if not woken: async-io's reactor may not have passed the
        // close on yet, the socket itself says it at once.
        self.driver.drive(false);
        !self.driver.ended.load(Ordering::Acquire)
    }
}

/// The connection's socket (TCP or unix): after a read found nothing, it reads
/// again only once async-io's reactor has woken it for the socket.
///
/// `Async::poll_read` tries the socket before asking the reactor, and the
/// redis crate's driver reads at every turn (ready, flush, read), so each
/// command cost three to five `recv`s that said `EAGAIN` (`strace -c` over
/// `bench async-vs-blocking`, issue 22), where a blocking connection makes
/// one `recv` per reply. The first read after data still goes to the
/// socket at once, so a reply already there costs no trip to the reactor.
///
/// The reactor's wake, not `poll_readable`'s answer, lets the next read
/// through: an event that comes in the reactor turn that registered the
/// interest wakes the waker, but `poll_readable` keeps saying `Pending`.
struct Stream<S> {
    io: async_io::Async<S>,
    /// The last read said `EAGAIN`: read again once `readable` is set.
    drained: bool,
    readable: Arc<Readable>,
}

/// The waker registered with the reactor: notes the socket readable, then
/// wakes the driver.
#[derive(Default)]
struct Readable {
    woken: AtomicBool,
    driver: futures::task::AtomicWaker,
}

impl ArcWake for Readable {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.woken.store(true, Ordering::Release);
        arc_self.driver.wake();
    }
}

impl<S> Stream<S> {
    fn new(io: async_io::Async<S>) -> Self {
        Stream {
            io,
            drained: false,
            readable: Arc::default(),
        }
    }
}

impl<S> futures::io::AsyncRead for Stream<S>
where
    for<'a> &'a S: std::io::Read,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        loop {
            if this.drained {
                this.readable.driver.register(cx.waker());
                if !this.readable.woken.swap(false, Ordering::AcqRel) {
                    let waker = futures::task::waker_ref(&this.readable);
                    match this.io.poll_readable(&mut Context::from_waker(&waker)) {
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(())) => {}
                        Poll::Pending if this.readable.woken.swap(false, Ordering::AcqRel) => {}
                        Poll::Pending => return Poll::Pending,
                    }
                }
                this.drained = false;
            }
            match std::io::Read::read(&mut this.io.get_ref(), buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => this.drained = true,
                other => return Poll::Ready(other),
            }
        }
    }
}

impl<S: async_io::IoSafe + std::io::Write> futures::io::AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_close(cx)
    }
}

/// The redis crate's multiplexed connection over `io`, and its driver for
/// the commands to poll.
async fn set_up<S>(
    settings: &RedisConnectionInfo,
    io: async_io::Async<S>,
    config: AsyncConnectionConfig,
) -> redis::RedisResult<(MultiplexedConnection, DriverFuture)>
where
    S: async_io::IoSafe + std::io::Write + Send + Sync + Unpin + 'static,
    for<'a> &'a S: std::io::Read,
{
    let stream = tokio_util::compat::FuturesAsyncReadCompatExt::compat(Stream::new(io));
    let (conn, driver) = MultiplexedConnection::new_with_config(settings, stream, config).await?;
    Ok((conn, Box::pin(driver)))
}

/// The first address of `host` that accepts a connection. Resolving a
/// name blocks (the standard library has no asynchronous resolver), once
/// per connection; an IP address resolves at once.
async fn connect_tcp(
    host: &str,
    port: u16,
) -> std::io::Result<async_io::Async<std::net::TcpStream>> {
    let addrs = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))?;
    let mut last = None;
    for addr in addrs {
        match async_io::Async::<std::net::TcpStream>::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("the host name resolves to no address")))
}

/// A command on the connection, driving it while it waits.
struct Driving<'a, F> {
    command: F,
    driver: &'a Arc<Driver>,
    id: Option<u64>,
}

impl<F: Future + Unpin> Future for Driving<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        if let Poll::Ready(out) = Pin::new(&mut this.command).poll(cx) {
            return Poll::Ready(this.done(out));
        }
        this.driver.register(&mut this.id, cx.waker());
        this.driver.drive(true);
        if let Poll::Ready(out) = Pin::new(&mut this.command).poll(cx) {
            return Poll::Ready(this.done(out));
        }
        Poll::Pending
    }
}

impl<F> Driving<'_, F> {
    fn done<T>(&mut self, out: T) -> T {
        if let Some(id) = self.id.take() {
            self.driver.leave(id);
        }
        out
    }
}

impl<F> Drop for Driving<'_, F> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.driver.leave(id);
        }
    }
}

impl redis::aio::ConnectionLike for DrivenConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        let DrivenConnection { conn, driver } = self;
        Box::pin(Driving {
            command: conn.req_packed_command(cmd),
            driver,
            id: None,
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        let DrivenConnection { conn, driver } = self;
        Box::pin(Driving {
            command: conn.req_packed_commands(pipeline, offset, count),
            driver,
            id: None,
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
