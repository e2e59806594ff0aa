//! The subscriber thread: one per locker while anyone waits. It listens for
//! release notifications on a dedicated connection and feeds them to the
//! core, reconnects once after losing its connection, and exits when the
//! core says the subscription lingered long enough (or on failure).

use std::sync::Arc;
use std::time::Duration;

use super::connection::open;
use super::locker::Shared;
use crate::clock::now;
use crate::core::core::SubscriberStep;
use crate::error::describe;

/// Longest blocking read: bounds how late the thread notices the linger
/// ending or a shutdown.
const SLICE: Duration = Duration::from_millis(100);

enum Ended {
    /// The core said stop.
    Stopped,
    /// Could not connect or subscribe (refused, NOPERM, ...).
    Failed(redis::RedisError),
    /// The connection broke after a confirmed subscription.
    Lost,
}

/// Starts the thread; the caller already counted it as running.
pub(crate) fn spawn(shared: Arc<Shared>) {
    let for_thread = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("redlease-subscriber".into())
        .spawn(move || run(&for_thread));
    if let Err(e) = spawned {
        if shared.with_core(|core| core.handle_subscription_failed(now())) {
            log::warn!(
                target: "redlease",
                "LOCK_NOTIFY_UNAVAILABLE: could not start the subscriber thread ({:?}); \
                 waiters poll instead",
                e.kind()
            );
        }
        shared.subscriber_exited();
    }
}

fn run(shared: &Arc<Shared>) {
    let mut reconnected = false;
    loop {
        match listen(shared) {
            Ended::Stopped => break,
            Ended::Lost if !reconnected => {
                reconnected = true;
                shared.with_core(|core| core.handle_subscriber_lost(now()));
            }
            Ended::Lost => {
                fail(shared, "the subscriber connection dropped again");
                break;
            }
            Ended::Failed(e) => {
                fail(shared, &describe(&e));
                break;
            }
        }
    }
    shared.subscriber_exited();
}

fn fail(shared: &Arc<Shared>, cause: &str) {
    if shared.with_core(|core| core.handle_subscription_failed(now())) {
        log::warn!(
            target: "redlease",
            "LOCK_NOTIFY_UNAVAILABLE: release notifications unavailable ({cause}); \
             waiters poll every poll_interval"
        );
    }
}

/// Sends `SUBSCRIBE` and checks its confirmation. `PubSub::subscribe` would
/// take a refusal (an ACL's `NOPERM`) for a confirmation.
fn subscribe(conn: &mut redis::Connection, channel: &str) -> redis::RedisResult<()> {
    conn.send_packed_command(&redis::cmd("SUBSCRIBE").arg(channel).get_packed_command())?;
    match conn.recv_response()?.extract_error()? {
        redis::Value::Array(items) if matches!(items.first(), Some(redis::Value::BulkString(kind)) if kind == b"subscribe") => {
            Ok(())
        }
        _ => Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "unexpected reply to SUBSCRIBE",
        ))),
    }
}

fn listen(shared: &Arc<Shared>) -> Ended {
    let Some(client) = shared.commands.client() else {
        return Ended::Stopped;
    };
    let mut conn = match open(client, shared.config.command_timeout) {
        Ok(conn) => conn,
        Err(e) => return Ended::Failed(e),
    };
    if let Err(e) = subscribe(&mut conn, &shared.channel_name) {
        return Ended::Failed(e);
    }
    let mut pubsub = conn.as_pubsub();
    // Confirmed: a release before this instant went unseen, so heads retry.
    shared.with_core(|core| core.handle_subscribed());
    loop {
        let slice = match shared.with_core(|core| core.poll_subscriber(now())) {
            SubscriberStep::Stop => return Ended::Stopped,
            SubscriberStep::Listen(None) => SLICE,
            SubscriberStep::Listen(Some(at)) => at
                .saturating_duration_since(now())
                .clamp(Duration::from_millis(1), SLICE),
        };
        if pubsub.set_read_timeout(Some(slice)).is_err() {
            return Ended::Lost;
        }
        match pubsub.get_message() {
            Ok(msg) => {
                if msg.get_channel_name() == shared.channel_name {
                    shared.counters.notification();
                    shared.with_core(|core| core.handle_notification(msg.get_payload_bytes()));
                }
            }
            Err(e) if e.is_timeout() => {}
            Err(_) => return Ended::Lost,
        }
    }
}
