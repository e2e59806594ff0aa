//! The async front end: plain futures on any executor (smol, async-std,
//! `futures::executor`, or inside a tokio program) drive the shared
//! operations (`src/driver/ops/`).
//!
//! Each operation runs inside its caller's future through one loop
//! (`drive.rs`): it awaits what the operation asks on the shared
//! multiplexed connection and otherwise awaits the operation's
//! `event_listener` raced against an `async_io::Timer`. Nothing is spawned
//! on the caller's executor: on one server over TCP the connection is
//! driven by the commands waiting on it (`driven.rs`), and release
//! notifications arrive on the driver layer's subscriber thread, which also
//! drops the subscription after its linger without any call from the
//! program.
//!
//! ```text
//!   acquire futures ──drive(op)──▶ one multiplexed connection ──▶ Redis
//!         ▲ wake                                                   │
//!         └── Core (Mutex, never held across .await) ◀── subscriber thread
//! ```
//!
//! Requires the `aio` feature (on by default).

mod cluster;
mod connection;
mod deadline;
mod drive;
mod driven;
mod lease;
mod locker;
mod rw_lock;
mod semaphore;
mod with_lock;

pub use lease::Lease;
pub use locker::Locker;
pub use rw_lock::{ReadLease, RwLock, WriteLease};
pub use semaphore::{Permit, Semaphore};
