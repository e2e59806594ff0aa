//! The handles, each written once for both front ends (generic over
//! [`Front`](crate::front::Front)): the [`Locker`], its [`Lease`] of every
//! [`kind`], the [`Semaphore`], the [`RwLock`] and the [`Election`] with
//! its [`Leadership`]. A kind is a core kind
//! (script and reply classification in `src/core/`), an acquire here and,
//! where its grant number is read differently, an accessor on `Lease`.

mod connect;
mod election;
mod holding;
mod keeper;
mod keeper_threads;
pub mod kind;
mod lease;
mod locker;
mod multi;
mod observer;
mod rw_lock;
mod semaphore;

pub use election::{Election, Leadership};
pub(crate) use holding::{after_release, with_calls};
pub use lease::Lease;
pub(crate) use lease::LeaseState;
pub use locker::Locker;
pub use observer::Observer;
pub use rw_lock::RwLock;
pub use semaphore::Semaphore;
