//! A TCP proxy in front of a test server whose replies can be held back:
//! commands reach Redis at once and run, while their replies wait until
//! released, as on a network that stalls in one direction. A client then
//! times out on commands Redis did run, and sends them again. Holding
//! both ways stands for a client stopped (SIGSTOP) and then continued:
//! what it sent meanwhile reaches Redis late, in order. Retargeted, it
//! leads new connections to another server, as an address that moves to
//! a promoted replica.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

/// What is held (replies; commands too), and the streams to shut when the
/// proxy goes.
#[derive(Default)]
struct Shared {
    held: Mutex<Held>,
    released: Condvar,
    stopped: AtomicBool,
    streams: Mutex<Vec<TcpStream>>,
    /// The server new connections go to.
    target: AtomicU16,
}

#[derive(Default, Clone, Copy)]
struct Held {
    replies: bool,
    commands: bool,
}

impl Shared {
    /// Blocks while this direction (`commands` or replies) is held.
    fn wait_released(&self, commands: bool) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while (if commands {
            held.commands
        } else {
            held.replies
        }) && !self.stopped.load(Ordering::SeqCst)
        {
            held = self.released.wait(held).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set_held(&self, value: Held) {
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = value;
        self.released.notify_all();
    }
}

/// The proxy; stops, closing every connection through it, on drop.
pub struct ReplyHoldProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl ReplyHoldProxy {
    /// A proxy on a free loopback port in front of `127.0.0.1:target`.
    pub fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared::default());
        shared.target.store(target, Ordering::SeqCst);
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let target = accepting.target.load(Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                forward(client, server, &accepting);
            }
        });
        ReplyHoldProxy { port, shared }
    }

    /// `redis://127.0.0.1:<proxy port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// From now on, replies wait (commands still go through).
    pub fn hold(&self) {
        self.shared.set_held(Held {
            replies: true,
            commands: false,
        });
    }

    /// From now on, nothing passes either way: the client is stopped.
    pub fn stop(&self) {
        self.shared.set_held(Held {
            replies: true,
            commands: true,
        });
    }

    /// New connections go to `127.0.0.1:target` from now on.
    pub fn retarget(&self, target: u16) {
        self.shared.target.store(target, Ordering::SeqCst);
    }

    /// What was held so far is delivered, in order, and the rest flows.
    pub fn release(&self) {
        self.shared.set_held(Held::default());
    }
}

impl Drop for ReplyHoldProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.set_held(Held::default());
        for stream in self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
        // Wakes the accept loop so that it sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies both ways between `client` and `server`, replies subject to
/// the hold; either side closing closes both.
fn forward(client: TcpStream, server: TcpStream, shared: &Arc<Shared>) {
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    {
        let mut streams = shared.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.extend(client.try_clone());
        streams.extend(server.try_clone());
    }
    let both = move |a: &TcpStream, b: &TcpStream| {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    };
    let (c, s) = (client_in, server);
    let shared_in = Arc::clone(shared);
    thread::spawn(move || {
        copy(&c, &s, &shared_in, true);
        both(&c, &s);
    });
    let shared = Arc::clone(shared);
    thread::spawn(move || {
        copy(&server_in, &client, &shared, false);
        both(&server_in, &client);
    });
}

/// Copies `from` to `to`, waiting while its direction is held.
fn copy(mut from: &TcpStream, mut to: &TcpStream, shared: &Shared, commands: bool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        shared.wait_released(commands);
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}
