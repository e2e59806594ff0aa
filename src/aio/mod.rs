//! The async front end: plain futures on any executor (smol, async-std,
//! `futures::executor`, or inside a tokio program) drive the shared
//! operations (`src/driver/ops/`).
//!
//! Its types are the crate's handles on [`Async`](crate::front::Async)
//! (see [`front`](crate::front)): each call returns a `Send` future that
//! runs the operation through one loop (`front.rs`): it awaits what the
//! operation asks on the shared multiplexed connection and otherwise
//! awaits the operation's `event_listener` raced against an
//! `async_io::Timer`. Nothing is spawned on the caller's executor: on one
//! server over TCP or a unix socket the connection is driven by the
//! commands waiting on it
//! (`driven.rs`), and release notifications arrive on the driver layer's
//! subscriber thread, which also drops the subscription after its linger
//! without any call from the program. With feature `tokio` a plain TCP or
//! unix connection opened inside a tokio runtime goes on that runtime's reactor
//! (`tokio_reactor.rs`).
//!
//! ```text
//!   acquire futures ──drive(op)──▶ one multiplexed connection ──▶ Redis
//!         ▲ wake                                                   │
//!         └── Core (Mutex, never held across .await) ◀── subscriber thread
//! ```
//!
//! Requires the `aio` feature (on by default).

mod connection;
mod deadline;
pub(crate) mod driven;
mod election;
mod front;
mod locker;
#[cfg(all(feature = "tokio", panic = "unwind"))]
mod tokio_reactor;
mod with_lock;

pub(crate) use front::wait;
pub use locker::Locker;

crate::front::aliases!(Async);
