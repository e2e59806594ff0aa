//! The async front end's half of every handle: how to send (awaiting the
//! shared async connection) and how to wait (the operation's
//! `event_listener` raced against an `async_io::Timer`), in one loop that
//! drives every operation inside the caller's future. Nothing is spawned;
//! dropping the future drops the operation, which abandons it.

use std::future::Future;
use std::pin::{pin, Pin};
use std::time::Instant;

use event_listener::EventListener;
use futures::future::{select, Either, OptionFuture};

use super::connection::Commands;
use crate::config::Config;
use crate::core::outcome::ReleaseOutcome;
use crate::driver::connect::prepare;
use crate::driver::ops::{answer, turn, Io, Op};
use crate::driver::state::Shared;
use crate::driver::target::Source;
use crate::error::Error;
use crate::front::{Async, Front};
use crate::handle::{LeaseState, Locker};
use crate::probe::{self, Step};

#[allow(
    private_interfaces,
    private_bounds,
    reason = "the sealed trait's hidden items; see `Front`"
)]
impl Front for Async {
    type Call<'a, T: 'a> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
    type Commands = Commands;
    type Serial = futures::lock::Mutex<()>;
    const CLUSTER_RETRIES: Option<u32> = None;

    fn run<'a, O, T>(
        shared: &'a Shared<Commands>,
        serial: Option<&'a Self::Serial>,
        start: impl FnOnce() -> Result<O, O::Output> + Send + 'a,
        then: impl FnOnce(O::Output) -> T + Send + 'a,
    ) -> Self::Call<'a, T>
    where
        O: Op + Send + 'a,
        O::Output: Send,
        T: 'a,
    {
        Box::pin(async move {
            let _serial = OptionFuture::from(serial.map(Self::Serial::lock)).await;
            let output = match start() {
                Ok(op) => drive(shared, op).await,
                Err(output) => output,
            };
            then(output)
        })
    }

    /// Opens the shared multiplexed connection and sends the connect-time
    /// checks (`src/driver/connect.rs`) on it.
    fn open(source: Source, config: Config) -> Self::Call<'static, Result<Locker<Async>, Error>> {
        Box::pin(async move {
            let (shared, mut checks) = prepare(source, config, Commands::new);
            while let Some(ask) = checks.next() {
                checks.settle(&shared, shared.commands.ask(ask).await)?;
            }
            Ok(Locker::from_shared(shared))
        })
    }

    fn ready<'a, T: Send + 'a>(value: T) -> Self::Call<'a, T> {
        Box::pin(std::future::ready(value))
    }

    fn keeping<'a, T: Send + 'a>(
        call: Self::Call<'a, T>,
        guard: impl Send + 'a,
    ) -> Self::Call<'a, T> {
        Box::pin(async move {
            let output = call.await;
            drop(guard);
            output
        })
    }

    fn release(mut lease: LeaseState<Self>) -> Self::Call<'static, Result<ReleaseOutcome, Error>> {
        Box::pin(async move {
            let result = drive(&lease.shared, lease.release_op()).await;
            // Only now: a release future dropped midway hands the token
            // back to the locker like a dropped lease.
            lease.finished();
            result
        })
    }

    fn dropped(lease: &mut LeaseState<Self>) {
        let id = lease.held.id;
        lease.shared.state.with_core(|core| core.abandon_lease(id));
    }

    fn block<'a, T: 'a>(call: Self::Call<'a, T>) -> T {
        // On the library's own thread (an election's keeper): the call's
        // connection is driven by the command waiting on it (`driven.rs`).
        async_io::block_on(call)
    }
}

/// Drives `op` to its end on the locker's connection.
pub(crate) async fn drive<O: Op>(shared: &Shared<Commands>, mut op: O) -> O::Output {
    loop {
        match turn(&mut op) {
            (Io::Send(request), _) => {
                let reply = shared.commands.send(&request, &shared.state.counters).await;
                answer(&mut op, &request, reply);
            }
            (Io::Wait { until }, listener) => {
                wait(listener, until).await;
                probe::mark(Step::WaiterWoken);
            }
            (Io::Done(output), _) => return output,
        }
    }
}

/// Awaits `listener` or `until`, whichever comes first: how this front end
/// waits, for an operation, a loss ([`Lost::wait`](crate::Lost::wait)) or an
/// observer.
pub(crate) async fn wait(listener: Option<EventListener>, until: Option<Instant>) {
    match (listener, until) {
        (Some(listener), until) => drop(within(until, listener).await),
        (None, Some(at)) => drop(async_io::Timer::at(at).await),
        (None, None) => {}
    }
}

/// `work`'s output, or `None` once `until` passed (never without it).
pub(crate) async fn within<T>(until: Option<Instant>, work: impl Future<Output = T>) -> Option<T> {
    let timer = until.map_or_else(async_io::Timer::never, async_io::Timer::at);
    match select(pin!(work), timer).await {
        Either::Left((output, _)) => Some(output),
        Either::Right(_) => None,
    }
}
