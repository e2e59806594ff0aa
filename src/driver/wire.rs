//! The blocking command connection of our own to one server over plain TCP
//! or a unix socket: a std socket, requests written as packed bytes,
//! replies parsed by the redis crate's [`redis::Parser`] (as its own sync
//! connection does), and the one place the set-up runs for both front ends
//! ([`set_up`]: the redis crate's own `HELLO`/`AUTH`/`SELECT`/`CLIENT
//! SETINFO`, over any stream).
//!
//! Unlike the redis crate's `Connection`, whose socket is private, a
//! [`Wire`] can tell whether the server closed it while it sat idle
//! (`CLIENT KILL`, restart, idle timeout) without sending anything
//! ([`OneServer::closed_while_idle`]), so a request never has to go out behind a
//! `PING` probe to learn it. TLS keeps the redis crate's connection (its TLS
//! stream is not public); so does a build without the `aio` feature, which
//! lacks the redis crate's async set-up that [`Wire::connect`] reuses.

use std::io::{self, Write};
use std::time::Duration;

use redis::{ConnectionInfo, RedisResult, Value};

/// The socket, TCP or unix.
type Socket = socket2::Socket;

/// Peeks at what came in, without waiting: `Ok(0)` at the end of the
/// stream, `WouldBlock` when nothing came.
#[cfg(unix)]
fn peek_now(socket: &Socket) -> io::Result<usize> {
    let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT;
    socket.recv_with_flags(&mut [std::mem::MaybeUninit::uninit()], flags)
}

#[cfg(not(unix))]
fn peek_now(socket: &Socket) -> io::Result<usize> {
    socket.set_nonblocking(true)?;
    let peeked = socket.peek(&mut [std::mem::MaybeUninit::uninit()]);
    socket.set_nonblocking(false).and(peeked)
}

fn set_timeouts(socket: &Socket, timeout: Option<Duration>) -> io::Result<()> {
    socket.set_read_timeout(timeout)?;
    socket.set_write_timeout(timeout)
}

/// One blocking connection. Any I/O or protocol error ends it
/// ([`redis::ConnectionLike::is_open`]): after a timeout its late reply would answer the
/// next request. Never opened without `aio`.
pub(crate) struct Wire {
    socket: Socket,
    parser: redis::Parser,
    db: i64,
    open: bool,
}

impl Wire {
    /// Connects to `info`'s address and sets the connection up as the
    /// redis crate does, with `timeout` on connect, reads and writes;
    /// `None` where that is not ours to do (TLS, or no `aio` feature): the
    /// caller opens the redis crate's connection instead.
    pub(crate) fn connect(info: &ConnectionInfo, timeout: Duration) -> Option<RedisResult<Wire>> {
        #[cfg(not(feature = "aio"))]
        {
            let _ = (info, timeout);
            None
        }
        #[cfg(feature = "aio")]
        {
            let started = crate::clock::now();
            let socket = match info.addr() {
                redis::ConnectionAddr::Tcp(host, port) => {
                    connect_tcp(host, *port, timeout, info.tcp_settings().nodelay())
                }
                #[cfg(unix)]
                redis::ConnectionAddr::Unix(path) => {
                    std::os::unix::net::UnixStream::connect(path).map(Socket::from)
                }
                _ => return None,
            };
            Some(socket.map_err(Into::into).and_then(|socket| {
                // The set-up gets what the connect left of `timeout`, as
                // the redis crate's own connect gives it.
                let spent = crate::clock::now().saturating_duration_since(started);
                let left = timeout.checked_sub(spent).filter(|left| !left.is_zero());
                let left = left.ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
                set_timeouts(&socket, Some(left))?;
                let settings = info.redis_settings();
                let stream = futures::io::AllowStdIo::new(socket.try_clone()?);
                setup::complete(set_up(settings, stream))?;
                set_timeouts(&socket, Some(timeout))?;
                Ok(Wire::new(socket, settings.db()))
            }))
        }
    }

    fn new(socket: Socket, db: i64) -> Wire {
        Wire {
            socket,
            parser: redis::Parser::new(),
            db,
            open: true,
        }
    }
}

/// A connection to one server as the blocking front end uses it: ours, or
/// the redis crate's (TLS), which cannot tell a close while idle and so
/// needs the `PING` probe on reuse (src/blocking/connection.rs).
pub(crate) trait OneServer: redis::ConnectionLike + Send {
    /// Whether the server closed it while it was idle, as far as can be
    /// known without sending anything.
    fn closed_while_idle(&self) -> bool;
    /// Whether a request on it, reused, goes behind a `PING`.
    fn needs_probe(&self) -> bool;
    /// Sets the read and write timeouts.
    fn set_timeout(&self, timeout: Duration) -> RedisResult<()>;
    /// Writes packed commands.
    fn send_packed_command(&mut self, bytes: &[u8]) -> RedisResult<()>;
    /// Reads one reply.
    fn recv_response(&mut self) -> RedisResult<Value>;
}

impl OneServer for redis::Connection {
    fn closed_while_idle(&self) -> bool {
        false
    }

    fn needs_probe(&self) -> bool {
        true
    }

    fn set_timeout(&self, timeout: Duration) -> RedisResult<()> {
        self.set_read_timeout(Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }

    fn send_packed_command(&mut self, bytes: &[u8]) -> RedisResult<()> {
        redis::Connection::send_packed_command(self, bytes)
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        redis::Connection::recv_response(self)
    }
}

impl OneServer for Wire {
    /// Whether the server closed the connection while it was idle, found
    /// without sending anything: a peek that does not wait. Nothing is due
    /// on an idle connection, so a byte, the end of the stream or an error
    /// all end it; only "nothing came" keeps it.
    fn closed_while_idle(&self) -> bool {
        !matches!(peek_now(&self.socket), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    fn needs_probe(&self) -> bool {
        false
    }

    fn set_timeout(&self, timeout: Duration) -> RedisResult<()> {
        Ok(set_timeouts(&self.socket, Some(timeout))?)
    }

    fn send_packed_command(&mut self, bytes: &[u8]) -> RedisResult<()> {
        let written = (&mut &self.socket).write_all(bytes);
        self.open &= written.is_ok();
        Ok(written?)
    }

    /// A push is out of band: passed over.
    fn recv_response(&mut self) -> RedisResult<Value> {
        loop {
            let parsed = self.parser.parse_value(&mut &self.socket);
            match parsed.inspect_err(|_| self.open = false)? {
                Value::Push { .. } => {}
                value => return Ok(value),
            }
        }
    }
}

impl redis::ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send_packed_command(cmd)?;
        self.recv_response()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send_packed_command(cmd)?;
        for _ in 0..offset {
            self.recv_response()?;
        }
        (0..count).map(|_| self.recv_response()).collect()
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<Value>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

/// The first address of `host` that accepts a connection within `timeout`,
/// with `nodelay`.
#[cfg(feature = "aio")]
fn connect_tcp(host: &str, port: u16, timeout: Duration, nodelay: bool) -> io::Result<Socket> {
    let mut last = None;
    for addr in std::net::ToSocketAddrs::to_socket_addrs(&(host, port))? {
        match std::net::TcpStream::connect_timeout(&addr, timeout) {
            Ok(tcp) => return tcp.set_nodelay(nodelay).map(|()| Socket::from(tcp)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("the host name resolves to no address")))
}

#[cfg(feature = "aio")]
pub(crate) use setup::set_up;

/// The set-up, written once for both kinds of connection of our own.
#[cfg(feature = "aio")]
mod setup {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use redis::{RedisConnectionInfo, RedisResult};

    /// Sets a connection up exactly as the redis crate does, by opening its
    /// multiplexed connection over `stream` (a second handle to the socket)
    /// and dropping it unpolled: the set-up has read every reply it asked
    /// for by then, and nothing else is sent.
    pub(crate) async fn set_up<S>(settings: &RedisConnectionInfo, stream: S) -> RedisResult<()>
    where
        S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + Send + 'static,
    {
        let stream = tokio_util::compat::FuturesAsyncReadCompatExt::compat(stream);
        let config = redis::AsyncConnectionConfig::new();
        let set_up = redis::aio::MultiplexedConnection::new_with_config(settings, stream, config);
        drop(set_up.await?);
        Ok(())
    }

    /// Notes a wake.
    #[derive(Default)]
    struct Woken(AtomicBool);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::Release);
        }
    }

    /// Runs the set-up over a blocking socket (`AllowStdIo`: every read
    /// and write completes, or times out, before it returns) to its end on
    /// this thread. Its I/O never waits for a wake, so the future ends in one
    /// poll; one that waits without having been woken is an error rather
    /// than a hang (no executor here: this may run inside another's
    /// `block_on`, which `futures`' would refuse).
    pub(super) fn complete<T>(set_up: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        let woken = Arc::new(Woken::default());
        let waker = Waker::from(woken.clone());
        let mut set_up = pin!(set_up);
        loop {
            match set_up.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(out) => return out,
                Poll::Pending if woken.0.swap(false, Ordering::AcqRel) => {}
                Poll::Pending => {
                    let stuck = "the connection set-up waited on a blocking socket";
                    return Err((redis::ErrorKind::Client, stuck).into());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// A wire to a listener of this test, and the server's end.
    fn pair() -> (Wire, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let wire = Wire::new(Socket::from(client), 0);
        wire.set_timeout(Duration::from_secs(10)).unwrap();
        (wire, server)
    }

    #[test]
    fn an_idle_wire_is_open_until_the_server_closes_it() {
        let (wire, server) = pair();
        assert!(!wire.closed_while_idle(), "open, nothing sent");
        assert!(!wire.closed_while_idle(), "still open");
        drop(server);
        assert!(
            wire.closed_while_idle(),
            "the close is seen without a write"
        );
    }

    #[test]
    fn a_byte_nobody_asked_for_ends_an_idle_wire() {
        let (wire, mut server) = pair();
        server.write_all(b"+PONG\r\n").unwrap();
        // The byte may take a moment to arrive on loopback: read for it.
        let mut closed = false;
        for _ in 0..1000 {
            closed = wire.closed_while_idle();
            if closed {
                break;
            }
            std::thread::yield_now();
        }
        assert!(closed);
    }

    #[test]
    fn replies_are_read_in_order_and_a_pipeline_keeps_those_past_its_offset() {
        let (mut wire, mut server) = pair();
        server
            .write_all(b"+OK\r\n:1\r\n$1\r\nb\r\n-ERR no\r\n")
            .unwrap();
        let pipe = redis::pipe()
            .cmd("SET")
            .arg("a")
            .arg(1)
            .ignore()
            .cmd("GET")
            .arg("a")
            .clone();
        let got = redis::ConnectionLike::req_packed_commands(
            &mut wire,
            &pipe.get_packed_pipeline(),
            1,
            1,
        );
        assert_eq!(got.unwrap(), vec![Value::Int(1)]);
        let b: String = redis::cmd("GET").arg("b").query(&mut wire).unwrap();
        assert_eq!(b, "b");
        let err = redis::cmd("X").query::<Value>(&mut wire).unwrap_err();
        assert_eq!(err.code(), Some("ERR"));
        assert!(
            redis::ConnectionLike::is_open(&wire),
            "a server error keeps it"
        );
        drop(server);
        let dropped = redis::cmd("GET").query::<Value>(&mut wire).unwrap_err();
        assert!(dropped.is_connection_dropped(), "{dropped:?}");
        assert!(!redis::ConnectionLike::is_open(&wire));
    }
}
