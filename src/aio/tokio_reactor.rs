//! Feature `tokio`: a connection's socket on the reactor of the tokio
//! runtime it is opened in, and where that reactor turns.

use std::io;
use std::net::TcpStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::runtime::{Handle, Id, RuntimeFlavor};

use super::driven::Wire;

/// A socket on a tokio runtime's reactor.
pub(super) struct OnTokio {
    stream: tokio::net::TcpStream,
    runtime: Id,
    /// A multi-thread runtime's workers turn its reactor for a request
    /// polled on any thread; a current-thread runtime turns it only inside
    /// its own `block_on`.
    anywhere: bool,
}

/// The last runtime found without an IO driver. Registering a socket with
/// one panics, and tokio has no way to ask first: the first connection
/// opened in such a runtime finds out (tokio's panic message is printed),
/// the next ones skip it.
static WITHOUT_IO: Mutex<Option<Id>> = Mutex::new(None);

/// A second handle to `tcp` on the current tokio runtime's reactor; `None`
/// outside a runtime, in one without an IO driver, or where it refuses.
pub(super) fn register(tcp: &TcpStream) -> io::Result<Option<OnTokio>> {
    let Ok(runtime) = Handle::try_current() else {
        return Ok(None);
    };
    let mut without_io = WITHOUT_IO.lock();
    if *without_io == Some(runtime.id()) {
        return Ok(None);
    }
    let second = tcp.try_clone()?;
    let Ok(registered) = catch_unwind(AssertUnwindSafe(|| tokio::net::TcpStream::from_std(second)))
    else {
        *without_io = Some(runtime.id());
        return Ok(None);
    };
    // Refused (a runtime shutting down): async-io's reactor serves.
    let Ok(stream) = registered else {
        return Ok(None);
    };
    Ok(Some(OnTokio {
        stream,
        runtime: runtime.id(),
        anywhere: runtime.runtime_flavor() == RuntimeFlavor::MultiThread,
    }))
}

impl Wire for OnTokio {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.try_read(buf)
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        self.stream.try_write(buf)
    }

    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_read_ready(cx)
    }

    fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_write_ready(cx)
    }

    fn usable_here(&self) -> bool {
        self.anywhere || Handle::try_current().is_ok_and(|here| here.id() == self.runtime)
    }

    fn gone(&self) -> bool {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        matches!(self.stream.poll_read_ready(&mut cx), Poll::Ready(Err(_)))
    }
}
