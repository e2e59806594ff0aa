//! The blocking front end: std threads and the redis crate's sync
//! connections drive the shared operations (`src/driver/ops/`).
//!
//! Its types are the crate's handles on [`Blocking`](crate::front::Blocking)
//! (see [`front`](crate::front)): each call runs on its caller's thread
//! through one loop (`front.rs`) that sends what the operation asks on a
//! pooled connection and otherwise sleeps on the operation's
//! `event_listener` until the core wakes it (a release notification, its
//! retry instant, a hand-over) or its deadline passes. The subscriber
//! thread of the driver layer listens for release notifications while
//! anyone waits. Dropping a lease releases it at once (one round trip).
//!
//! ```text
//!   caller threads ──drive(op)──▶ command connection pool ──▶ Redis
//!         ▲  wake                                              │
//!         └──── Core (Mutex) ◀── notifications ── subscriber thread
//! ```

mod connection;
mod election;
mod front;
mod with_lock;

pub(crate) use front::wait;

/// A lease client for std threads: `Locker<Blocking>` (see
/// [`Locker`](crate::Locker) for what every locker and its examples do).
/// Each call runs on the caller's thread and returns its result; dropping
/// a held lease releases it at once.
pub type Locker = crate::Locker<crate::front::Blocking>;

crate::front::aliases!(Blocking);
