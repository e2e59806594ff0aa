//! The handles, each written once for both front ends (generic over
//! [`Front`](crate::front::Front)): the [`Locker`], its [`Lease`] of every
//! [`kind`], the [`Semaphore`] and the [`RwLock`]. A kind is a core kind
//! (script and reply classification in `src/core/`), an acquire here and,
//! where its grant number is read differently, an accessor on `Lease`.

mod connect;
pub mod kind;
mod lease;
mod locker;
mod rw_lock;
mod semaphore;

pub use lease::Lease;
pub(crate) use lease::LeaseState;
pub use locker::Locker;
pub use rw_lock::RwLock;
pub use semaphore::Semaphore;
