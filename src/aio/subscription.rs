//! Release notifications for the async locker: RESP3 pushes on a dedicated
//! multiplexed connection. The push callback feeds the core directly, so no
//! task is spawned to listen; the connection's own driver runs on the redis
//! crate's smol executor.

use std::convert::Infallible;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, PushInfo, PushKind, Value};

use super::locker::Shared;
use crate::clock::now;
use crate::error::describe;

/// The subscribed connection, while there is one.
#[derive(Default)]
pub(crate) struct Subscription {
    conn: Mutex<Option<MultiplexedConnection>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("connected", &self.conn.lock().is_some())
            .finish()
    }
}

impl Subscription {
    /// Closes the subscribed connection (which ends the subscription).
    pub(crate) fn close(&self) {
        *self.conn.lock() = None;
    }
}

/// Marks the start abandoned if the future running it is dropped midway.
struct StartGuard<'a> {
    shared: &'a Arc<Shared>,
    armed: bool,
}

impl Drop for StartGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared
                .with_core_no_start(|core| core.handle_subscriber_stopped());
        }
    }
}

/// Opens the subscriber connection and subscribes. Confirmation arrives as
/// a `subscribe` push, which tells the core that every head should check
/// once more.
pub(crate) async fn start(shared: &Arc<Shared>) {
    // On a cluster the per-key channels are subscribed by the waiters
    // themselves (`cluster::Channels::ensure`).
    let Some(client) = &shared.subscriber_client else {
        return;
    };
    let mut guard = StartGuard {
        shared,
        armed: true,
    };
    let weak = Arc::downgrade(shared);
    let sender = move |push: PushInfo| -> Result<(), Infallible> {
        on_push(&weak, push);
        Ok(())
    };
    let timeout = Some(shared.commands.timeout());
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(timeout)
        .set_response_timeout(timeout)
        .set_push_sender(sender);
    let subscribed = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        conn.subscribe(&shared.channel_name).await?;
        Ok::<_, redis::RedisError>(conn)
    }
    .await;
    guard.armed = false;
    match subscribed {
        Ok(conn) => *shared.subscription.conn.lock() = Some(conn),
        Err(e) => {
            if shared.with_core_no_start(|core| core.handle_subscription_failed(now())) {
                log::warn!(
                    target: "redlease",
                    "LOCK_NOTIFY_UNAVAILABLE: release notifications unavailable ({}); \
                     waiters poll every poll_interval",
                    describe(&e)
                );
            }
        }
    }
}

fn on_push(shared: &Weak<Shared>, push: PushInfo) {
    let Some(shared) = shared.upgrade() else {
        return;
    };
    match push.kind {
        PushKind::Message => {
            if let [Value::BulkString(channel), Value::BulkString(payload)] = push.data.as_slice() {
                if channel.as_slice() == shared.channel_name.as_bytes() {
                    shared.counters.notification();
                    shared.with_core_no_start(|core| core.handle_notification(payload));
                }
            }
        }
        PushKind::Subscribe => shared.with_core_no_start(|core| core.handle_subscribed()),
        PushKind::Disconnection => {
            shared.subscription.close();
            shared.with_core_no_start(|core| core.handle_subscriber_stopped());
        }
        _ => {}
    }
}
