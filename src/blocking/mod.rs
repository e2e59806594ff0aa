//! The blocking front end: std threads and the redis crate's sync
//! connections drive the sans-IO core.
//!
//! Each acquire runs on its caller's thread: it joins its key's line, sends
//! the acquire script when it is the head, and otherwise sleeps on its own
//! `event_listener` until the core wakes it (a release notification, its
//! retry instant, a hand-over) or its deadline passes. One subscriber thread
//! per locker listens for release notifications while anyone waits.
//!
//! ```text
//!   caller threads ──acquire/release/renew──▶ command connection pool ──▶ Redis
//!         ▲  wake                                                          │
//!         └──── Core (Mutex) ◀── notifications ── subscriber thread ◀──────┘
//! ```

mod cluster;
mod connection;
mod lease;
mod locker;
mod subscriber;
mod with_lock;

pub use lease::Lease;
pub use locker::Locker;
