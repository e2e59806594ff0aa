//! The async front end: plain futures on any executor (smol, async-std,
//! `futures::executor`, or inside a tokio program) drive the sans-IO core.
//!
//! Each acquire future joins its key's line, sends the acquire script when it
//! is the head, and otherwise awaits its own `event_listener` raced against
//! an `async_io::Timer` for its retry instant or deadline. Nothing is spawned
//! by this crate: release notifications arrive as RESP3 pushes on a dedicated
//! connection and feed the core from the push callback.
//!
//! ```text
//!   acquire futures ──EVALSHA──▶ one multiplexed connection ──▶ Redis
//!         ▲ wake                                                 │
//!         └── Core (Mutex, never held across .await) ◀── RESP3 push callback
//! ```
//!
//! Requires the `aio` feature (on by default).

mod cluster;
mod connection;
mod lease;
mod locker;
mod subscription;
mod with_lock;

pub use lease::Lease;
pub use locker::Locker;
