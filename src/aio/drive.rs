//! The async front end's one loop: every operation is driven by it inside
//! the caller's future, sending on the shared async connection and racing
//! the operation's `event_listener` against an `async_io::Timer`. Nothing
//! is spawned; dropping the future drops the operation, which abandons it.

use std::time::Instant;

use event_listener::EventListener;
use futures::future::{select, Either};

use super::locker::Shared;
use crate::clock::now;
use crate::driver::ops::{Io, Op};

/// Drives `op` to its end on the locker's connection.
pub(crate) async fn drive<O: Op>(shared: &Shared, mut op: O) -> O::Output {
    let (commands, counters) = (&shared.commands, &shared.state.counters);
    loop {
        let listener = op.listener();
        match op.next(now()) {
            Io::Send(request) => {
                drop(listener);
                let reply = commands.send(&request, counters).await;
                op.handle_reply(now(), reply);
            }
            Io::Wait { until } => wait(listener, until).await,
            Io::Done(output) => return output,
        }
    }
}

async fn wait(listener: Option<EventListener>, until: Option<Instant>) {
    match (listener, until) {
        (Some(listener), Some(at)) => {
            if let Either::Right(_) = select(listener, async_io::Timer::at(at)).await {}
        }
        (Some(listener), None) => listener.await,
        (None, Some(at)) => {
            async_io::Timer::at(at).await;
        }
        (None, None) => {}
    }
}
