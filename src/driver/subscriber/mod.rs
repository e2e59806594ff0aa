//! The subscriber thread: one per locker while anyone waits, for both front
//! ends. It holds the release-notification subscription on connections of
//! its own (the locker's channel on one server, one sharded channel per
//! waited-for key on the node that owns it on Redis Cluster), feeds what
//! arrives into the core, re-establishes a dropped connection as often as
//! it drops (with a short bounded backoff), and exits when the core says
//! the subscription lingered long enough after the last waiter, or at
//! shutdown. It is a thread of the library, never a task on the user's
//! executor, and runs without any call from the program.

use std::sync::Arc;
use std::time::Duration;

use event_listener::Listener;
use redis::{Connection, ConnectionInfo, PushKind, RedisResult, Value};

use crate::clock::now;
use crate::core::core::{Core, SubscriberStep, FAILURE_BACKOFF};
use crate::core::lease::{deadline_after, SharedClock};
use crate::core::names::KeyId;
use crate::core::notice::{decode, Notice};
use crate::driver::state::LockerState;
use crate::driver::target::Source;

mod cluster;
mod standalone;

/// Starts the thread; the caller already counted it as running.
pub(crate) fn spawn(state: Arc<LockerState>) {
    let for_thread = state.clone();
    let thread = std::thread::Builder::new().name("redlease-subscriber".into());
    if let Err(e) = thread.spawn(move || run(&for_thread)) {
        let cause = format!("could not start the subscriber thread: {:?}", e.kind());
        fail(&state, &cause);
        state.subscriber_exited();
    }
}

/// The thread: the subscriber of the locker's kind of server, until the
/// subscription is over.
fn run(state: &Arc<LockerState>) {
    let info = |client: &redis::Client| client.get_connection_info().clone();
    let timeout = state.config.command_timeout;
    match &state.notifications {
        Source::Standalone(client) => standalone::run(state, || Ok(info(client))),
        Source::Sentinel(resolver) => {
            standalone::run(state, || resolver.primary(timeout).map(|c| info(&c)))
        }
        Source::Cluster(slots, template) => cluster::run(state, slots, template.as_ref()),
    }
    state.subscriber_exited();
}

/// Notifications cannot work (refused by the server, no thread): waiters
/// poll. Logged once per spell (the crate docs' "How it works").
fn fail(state: &Arc<LockerState>, cause: &str) {
    if state.with_core(|core| core.handle_subscription_failed(now())) {
        log::warn!(
            target: "redlease",
            "LOCK_NOTIFY_UNAVAILABLE: release notifications unavailable ({cause}); \
             waiters poll every poll_interval"
        );
    }
}

/// Feeds one push into the core; returns what it was.
fn handle_push(state: &Arc<LockerState>, kind: &PushKind, data: &[Value]) -> Option<Notice> {
    let notice = decode(&state.channel_name, &state.config.namespace, kind, data)?;
    match &notice {
        Notice::Released(payload) => {
            if state.with_core(|core| core.handle_notice(now(), payload)) {
                state.counters.notification();
            }
        }
        Notice::Subscribed(None) => state.with_core(|core| core.handle_subscribed()),
        Notice::Subscribed(Some(key)) => {
            state.with_core(|core| core.handle_channel_subscribed(*key))
        }
        Notice::Unsubscribed(_) => {}
    }
    Some(notice)
}

/// Hands `send` what the core passes on (`core/linger.rs`), packed as
/// `EVAL`s (no script cache to miss), with the id of the key whose
/// channel's connection should carry them and how many calls they are.
/// The reader skips their replies; what fails lapses at the registration's
/// bound and the grant's claim window.
fn send_pass_ons(state: &Arc<LockerState>, mut send: impl FnMut(KeyId, &[u8], usize)) {
    // Looked at read-only first: this runs after every push, and a call
    // that changes the core wakes everyone listening for changes.
    if !state.cell.read(|core| core.has_pass_ons()) {
        return;
    }
    for (key, calls) in state.with_core(|core| core.take_pass_ons()) {
        let packed: Vec<u8> = calls
            .iter()
            .flat_map(|call| call.eval().get_packed_command())
            .collect();
        send(key, &packed, calls.len());
    }
}

/// Hands `send` each extension due (`core/claimless.rs`), packed as an
/// `EVAL`, with the clock its reply goes to
/// ([`handle_extension_reply`](crate::core::claimless::handle_extension_reply)).
fn send_extensions(state: &Arc<LockerState>, mut send: impl FnMut(&[u8], SharedClock)) {
    let now = now();
    let due = |core: &Core| core.next_extension_due().is_some_and(|due| due <= now);
    if !state.cell.read(due) {
        return;
    }
    for (call, clock) in state.with_core(|core| core.take_due_extensions(now)) {
        send(&call.eval().get_packed_command(), clock);
    }
}

/// How long one blocking read may last at most at `now`, or `None` when
/// the subscription is over.
fn listen_slice(state: &Arc<LockerState>, slice: Duration) -> Option<Duration> {
    let now = now();
    match state.with_core(|core| core.poll_subscriber(now)) {
        SubscriberStep::Stop => None,
        SubscriberStep::Listen(None) => Some(slice),
        SubscriberStep::Listen(Some(at)) => Some(
            at.saturating_duration_since(now)
                .clamp(Duration::from_millis(1), slice),
        ),
    }
}

/// The pause before reconnect attempt number `attempt`.
fn backoff(attempt: usize) -> Duration {
    FAILURE_BACKOFF[attempt.min(FAILURE_BACKOFF.len() - 1)]
}

/// The subscription was lost, or could not be made: heads poll until it
/// is back. Waits the backoff of reconnect attempt number `attempt` (then
/// counts it) unless the subscription ends meanwhile; false when it did.
fn pause_after_loss(state: &Arc<LockerState>, attempt: &mut usize) -> bool {
    state.with_core(|core| core.handle_subscriber_lost(now()));
    let pause = backoff(*attempt);
    *attempt += 1;
    let Some(until) = deadline_after(now(), pause) else {
        return false;
    };
    loop {
        let listener = state.cell.listen_changed();
        if listen_slice(state, pause).is_none() {
            return false;
        }
        if now() >= until {
            return true;
        }
        listener.wait_deadline(until);
    }
}

/// Whether a failure to subscribe is the server's refusal (an ACL's
/// `NOPERM`, an unknown or disabled command, no RESP3): trying again would
/// get the same. A passing state of the server (`LOADING` after a restart,
/// `CLUSTERDOWN` or a redirect during a failover, `BUSY`) is not.
fn is_refusal(e: &redis::RedisError) -> bool {
    const PASSING: [&str; 8] = [
        "LOADING",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "MOVED",
        "ASK",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
    ];
    crate::error::is_server_reply(e) && !e.code().is_some_and(|code| PASSING.contains(&code))
}

/// Opens a RESP3 connection with `timeout` on connect and writes.
fn open_resp3(info: ConnectionInfo, timeout: Duration) -> RedisResult<Connection> {
    let conn = super::target::resp3(info)?.get_connection_with_timeout(timeout)?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}
