//! The blocking front end's half of every handle: how to send (a sync call
//! on the pooled connections) and how to wait (`wait_deadline` on the
//! operation's `event_listener`), in one loop that drives every operation
//! on the caller's thread.

use std::time::Instant;

use event_listener::{EventListener, Listener};
use parking_lot::Mutex;

use super::connection::Commands;
use crate::config::Config;
use crate::core::outcome::ReleaseOutcome;
use crate::driver::connect::prepare;
use crate::driver::ops::{answer, log_failed_release_on_drop, turn, Io, Op};
use crate::driver::state::Shared;
use crate::driver::target::Source;
use crate::error::Error;
use crate::front::{Blocking, Front};
use crate::handle::{LeaseState, Locker};
use crate::probe::{self, Step};

#[allow(
    private_interfaces,
    private_bounds,
    reason = "the sealed trait's hidden items; see `Front`"
)]
impl Front for Blocking {
    type Call<'a, T: 'a> = T;
    type Commands = Commands;
    type Serial = Mutex<()>;
    /// `retries(0)`: the redis crate would re-send a timed-out write.
    const CLUSTER_RETRIES: Option<u32> = Some(0);

    fn run<'a, O, T>(
        shared: &'a Shared<Commands>,
        serial: Option<&'a Mutex<()>>,
        start: impl FnOnce() -> Result<O, O::Output> + Send + 'a,
        then: impl FnOnce(O::Output) -> T + Send + 'a,
    ) -> T
    where
        O: Op + Send + 'a,
        O::Output: Send,
    {
        let _serial = serial.map(Mutex::lock);
        then(start().map_or_else(|output| output, |op| drive(shared, op)))
    }

    /// Opens the connection pool and sends the connect-time checks
    /// (`src/driver/connect.rs`), each on a fresh connection.
    fn open(source: Source, config: Config) -> Result<Locker<Blocking>, Error> {
        let (shared, mut checks) = prepare(source, config, Commands::new);
        while let Some(ask) = checks.next() {
            checks.settle(&shared, shared.commands.ask(&ask))?;
        }
        Ok(Locker::from_shared(shared))
    }

    fn ready<'a, T: Send + 'a>(value: T) -> T {
        value
    }

    fn keeping<'a, T: Send + 'a>(call: T, guard: impl Send + 'a) -> T {
        drop(guard);
        call
    }

    fn release(mut lease: LeaseState<Self>) -> Result<ReleaseOutcome, Error> {
        let result = release(&lease);
        lease.finished();
        result
    }

    fn dropped(lease: &mut LeaseState<Self>) {
        log_failed_release_on_drop(release(lease));
    }

    fn block<'a, T: 'a>(call: T) -> T {
        call
    }
}

fn release(lease: &LeaseState<Blocking>) -> Result<ReleaseOutcome, Error> {
    let _serial = lease.serial.lock();
    drive(&lease.shared, lease.release_op())
}

/// Drives `op` to its end on the locker's connections.
pub(crate) fn drive<O: Op>(shared: &Shared<Commands>, mut op: O) -> O::Output {
    loop {
        match turn(&mut op) {
            (Io::Send(request), _) => {
                let reply = shared.commands.send(&request, &shared.state.counters);
                answer(&mut op, &request, reply);
            }
            (Io::Wait { until }, listener) => {
                wait(listener, until);
                probe::mark(Step::WaiterWoken);
            }
            (Io::Done(output), _) => return output,
        }
    }
}

/// Blocks until `listener` fires or `until` passes: how this front end
/// waits, for an operation, a loss
/// ([`Lost::wait_timeout`](crate::Lost::wait_timeout)) or an observer.
pub(crate) fn wait(listener: Option<EventListener>, until: Option<Instant>) {
    let listener = listener.unwrap_or_else(|| event_listener::Event::new().listen());
    match until {
        Some(at) => {
            listener.wait_deadline(at);
        }
        None => listener.wait(),
    }
}
