//! The shared driver layer between the sans-IO [`core`](crate::core) and the
//! two front ends: every operation written once ([`ops`]), the connect-time
//! checks ([`connect`]), the state they
//! share ([`state`]: the core behind its mutex, counters, the replication
//! check), the bookkeeping of a held lease ([`held`]), the subscriber
//! thread ([`subscriber`]) and the blocking connection of our own with the
//! set-up both kinds share ([`wire`]). A front end only knows how to send a
//! [`ops::Request`] on its connections and how to wait.
//!
//! ```text
//!  blocking::Locker ─┐                        ┌─ sync connections
//!                    ├─ drive(op) ── ops ──────┤
//!  aio::Locker ──────┘    ▲                   └─ async connections
//!                         │ wake
//!                       state (Core, Mutex) ◀── subscriber thread ◀── Redis
//! ```

pub(crate) mod cell;
pub(crate) mod connect;
pub(crate) mod held;
pub(crate) mod metrics;
pub(crate) mod ops;
pub(crate) mod quiet;
#[cfg_attr(not(feature = "aio"), allow(dead_code, reason = "read by aio only"))]
pub(crate) mod replies;
pub(crate) mod state;
pub(crate) mod subscriber;
pub(crate) mod target;
#[cfg_attr(not(feature = "aio"), allow(dead_code, reason = "Wire is aio only"))]
pub(crate) mod wire;
