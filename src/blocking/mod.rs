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
mod locker;
mod with_lock;

pub(crate) use front::wait;
pub use locker::Locker;

crate::front::aliases!(Blocking);
