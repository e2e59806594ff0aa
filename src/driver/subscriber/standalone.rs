//! The subscriber on one server: `SUBSCRIBE <ns>:lock-released` on a
//! dedicated RESP3 connection; every confirmation (the first, and after
//! each reconnect) makes every head check once more.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, ConnectionInfo, RedisResult, Value};

use super::{
    fail, handle_push, is_refusal, listen_slice, open_resp3, pause_after_loss, send_extensions,
    send_pass_ons,
};
use crate::core::claimless::handle_extension_reply;
use crate::core::lease::SharedClock;
use crate::driver::state::LockerState;
use crate::error::describe;
use crate::probe::{self, Step};

/// Longest blocking read: bounds how late the thread notices the linger
/// ending or a shutdown.
const SLICE: Duration = Duration::from_millis(100);

/// `target` says where to connect, asked anew at every (re)connect (on
/// Sentinel, it asks for the current primary).
pub(super) fn run(state: &Arc<LockerState>, target: impl Fn() -> RedisResult<ConnectionInfo>) {
    let mut attempt = 0;
    while listen_slice(state, SLICE).is_some() {
        match subscribe(state, &target) {
            Ok(conn) => {
                attempt = 0;
                if listen(state, conn).is_break() {
                    return;
                }
            }
            Err(e) if is_refusal(&e) => return fail(state, &describe(&e)),
            Err(_) => {}
        }
        // Lost or not reachable.
        if !pause_after_loss(state, &mut attempt) {
            return;
        }
    }
}

/// Connects and subscribes, checking the confirmation: the redis crate's
/// `PubSub::subscribe` would take a refusal (`NOPERM`) for one.
fn subscribe(
    state: &Arc<LockerState>,
    target: &impl Fn() -> RedisResult<ConnectionInfo>,
) -> RedisResult<Connection> {
    let timeout = state.config.command_timeout;
    let mut conn = open_resp3(target()?, timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    let mut subscribe = redis::cmd("SUBSCRIBE");
    subscribe.arg(&state.channel_name);
    conn.send_packed_command(&subscribe.get_packed_command())?;
    match conn.recv_response()?.extract_error()? {
        Value::Push { kind, data } if handle_push(state, &kind, &data).is_some() => Ok(conn),
        _ => Err((redis::ErrorKind::Client, "unexpected reply to SUBSCRIBE").into()),
    }
}

/// Reads what arrives until the core says stop (`Break`) or the
/// connection breaks (`Continue`: connect again). Replies come in the
/// order of the calls sent: a pass-on's is skipped, an extension's goes to
/// its hold's clock (and one that never comes counts as unknown).
fn listen(state: &Arc<LockerState>, mut conn: Connection) -> ControlFlow<()> {
    let mut replies: VecDeque<Option<SharedClock>> = VecDeque::new();
    let flow = loop {
        let Some(slice) = listen_slice(state, SLICE) else {
            break ControlFlow::Break(());
        };
        // A broken connection shows at the read.
        send_pass_ons(state, |_, packed, calls| {
            replies.extend((0..calls).map(|_| None));
            drop(conn.send_packed_command(packed));
        });
        send_extensions(state, |packed, clock| {
            replies.push_back(Some(clock));
            drop(conn.send_packed_command(packed));
        });
        let read = conn.set_read_timeout(Some(slice));
        match read.and_then(|()| conn.recv_response()) {
            Ok(Value::Push { kind, data }) => {
                probe::mark(Step::NoticeRead);
                handle_push(state, &kind, &data);
                probe::mark(Step::NoticeHandled);
            }
            Ok(reply) => {
                if let Some(Some(clock)) = replies.pop_front() {
                    handle_extension_reply(&clock, Some(&reply));
                }
            }
            Err(e) if e.is_timeout() => {}
            Err(_) => break ControlFlow::Continue(()),
        }
    };
    for clock in replies.into_iter().flatten() {
        handle_extension_reply(&clock, None);
    }
    flow
}
