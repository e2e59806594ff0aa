//! The blocking front end: std threads and the redis crate's sync
//! connections drive the shared operations (`src/driver/ops/`).
//!
//! Each operation runs on its caller's thread through one loop
//! (`drive.rs`): it sends what the operation asks on a pooled connection
//! and otherwise sleeps on the operation's `event_listener` until the core
//! wakes it (a release notification, its retry instant, a hand-over) or its
//! deadline passes. The subscriber thread of the driver layer listens for
//! release notifications while anyone waits.
//!
//! ```text
//!   caller threads ──drive(op)──▶ command connection pool ──▶ Redis
//!         ▲  wake                                              │
//!         └──── Core (Mutex) ◀── notifications ── subscriber thread
//! ```

mod cluster;
mod connection;
mod drive;
mod lease;
mod locker;
mod rw_lock;
mod semaphore;
mod with_lock;

pub use lease::Lease;
pub use locker::Locker;
pub use rw_lock::{ReadLease, RwLock, WriteLease};
pub use semaphore::{Permit, Semaphore};
