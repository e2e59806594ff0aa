//! The blocking front end's one loop: every operation is driven by it on
//! the caller's thread, sending on the pooled sync connections and waiting
//! on the operation's `event_listener` with a deadline.

use std::time::Instant;

use event_listener::{EventListener, Listener};

use super::locker::Shared;
use crate::clock::now;
use crate::driver::ops::{Io, Op};

/// Drives `op` to its end on the locker's connections.
pub(crate) fn drive<O: Op>(shared: &Shared, mut op: O) -> O::Output {
    let (commands, counters) = (&shared.commands, &shared.state.counters);
    loop {
        let listener = op.listener();
        match op.next(now()) {
            Io::Send(request) => {
                drop(listener);
                let reply = commands.send(&request, counters);
                op.handle_reply(now(), reply);
            }
            Io::Wait { until } => wait(listener, until),
            Io::Done(output) => return output,
        }
    }
}

fn wait(listener: Option<EventListener>, until: Option<Instant>) {
    let listener = listener.unwrap_or_else(|| event_listener::Event::new().listen());
    match until {
        Some(at) => {
            listener.wait_deadline(at);
        }
        None => listener.wait(),
    }
}
