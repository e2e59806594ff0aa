//! Feature `tokio`: a connection's socket (TCP or unix) on the reactor of
//! the tokio runtime it is opened in, and where that reactor turns.

use std::io::{self, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::io::Interest;
use tokio::runtime::{Handle, Id, RuntimeFlavor};

use super::driven::{Registrable, Socket, Wire};

/// A socket on a tokio runtime's reactor, and the same socket as the
/// standard library's `R` for its reads.
struct OnTokio<S, R> {
    stream: S,
    raw: R,
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

/// A second handle to a socket on the current tokio runtime's reactor,
/// made by `from_std` (tokio's, on a clone of the socket), beside `raw`;
/// `None` outside a runtime, in one without an IO driver, or where it
/// refuses.
fn register<S, R>(raw: R, from_std: impl FnOnce() -> io::Result<S>) -> Option<OnTokio<S, R>> {
    let runtime = Handle::try_current().ok()?;
    let mut without_io = WITHOUT_IO.lock();
    if *without_io == Some(runtime.id()) {
        return None;
    }
    let Ok(registered) = catch_unwind(AssertUnwindSafe(from_std)) else {
        *without_io = Some(runtime.id());
        return None;
    };
    // Refused (a runtime shutting down): async-io's reactor serves.
    Some(OnTokio {
        stream: registered.ok()?,
        raw,
        runtime: runtime.id(),
        anywhere: runtime.runtime_flavor() == RuntimeFlavor::MultiThread,
    })
}

/// The same `Wire` and `Registrable` on tokio's TCP and unix streams.
macro_rules! wire_on_tokio {
    ($stream:ty, $raw:ty) => {
        impl Wire for OnTokio<$stream, $raw> {
            /// A read of the socket itself. tokio's `try_read` reads only
            /// while the reactor last saw the socket readable, so after a
            /// read that found nothing, a close that came while the runtime
            /// was busy (its reactor not turning) would go unseen by the
            /// look before the next request, which would then be sent on a
            /// closed connection (async-io's reads always ask the socket).
            /// Finding nothing clears tokio's readiness as its reads do.
            fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
                let read = (&self.raw).read(buf);
                if matches!(&read, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
                    let none = || Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock));
                    let _ = self.stream.try_io(Interest::READABLE, none);
                }
                read
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

        impl Registrable for $raw {
            fn on_tokio(&self) -> Option<Socket> {
                let raw = self.try_clone().ok()?;
                let on = register(raw, || <$stream>::from_std(self.try_clone()?))?;
                Some(Arc::new(on))
            }
        }
    };
}

wire_on_tokio!(tokio::net::TcpStream, std::net::TcpStream);
#[cfg(unix)]
wire_on_tokio!(tokio::net::UnixStream, std::os::unix::net::UnixStream);
