//! The two front ends as types, [`Blocking`] and [`Async`], and what a call
//! on either returns ([`Call`]).
//!
//! Every handle — [`Locker`], [`Lease`](crate::Lease) (a lock, a permit,
//! a read or a write lease), [`Semaphore`](crate::Semaphore),
//! [`RwLock`](crate::RwLock) — is one definition generic over its front
//! end.
//! A front end supplies only how to send a command and how to wait;
//! [`blocking::Locker`](crate::blocking::Locker) is `Locker<Blocking>` and
//! `aio::Locker` is `Locker<Async>`, with the same methods:
//!
//! ```text
//!                    Locker<F>, Lease<F, K>, Semaphore<F>, RwLock<F>
//!                          │  each call: one shared operation
//!            ┌─────────────┴─────────────┐
//!   F = Blocking: run it now       F = Async: a future that runs it
//!   (std thread, sync send,        (any executor, async send,
//!    listener.wait_deadline)        listener raced against a Timer)
//! ```
//!
//! A call returns [`Call<'_, F, T>`](Call): on [`Blocking`] the `T` itself,
//! on [`Async`] a `Send` future of it.
//!
//! ```no_run
//! # fn blocking(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let lease = locker.acquire("job:42")?;           // Blocking: the result
//! lease.release()?;
//! # Ok(()) }
//! # #[cfg(feature = "aio")]
//! # async fn aio(locker: &redlease::aio::Locker) -> Result<(), redlease::Error> {
//! let lease = locker.acquire("job:42").await?;     // Async: a future of it
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! Code that embeds redlease can be generic over both with `F: Front`.
//! Only the calls that take a closure (`with_lock`, `with_permit`,
//! `with_read`, `with_write`, `keep_alive`) and the constructors are written
//! per front end: a blocking closure and an async one are different types.

use crate::config::Config;
use crate::core::outcome::ReleaseOutcome;
use crate::driver::ops::Op;
use crate::driver::state::{Connections, Shared};
use crate::driver::target::Source;
use crate::error::Error;
use crate::handle::{LeaseState, Locker};

/// A front end: [`Blocking`] or [`Async`]. Sealed: this crate has the only
/// two.
#[allow(
    private_interfaces,
    private_bounds,
    reason = "the hidden items are how this crate's handles drive its operations; sealed, so no one else implements or calls them"
)]
pub trait Front: sealed::Sealed + Sized + Clone + Send + Sync + 'static {
    /// What a call returns for a result `T`: `T` itself on [`Blocking`], a
    /// `Send` future of `T` on [`Async`].
    type Call<'a, T: 'a>;

    /// The locker's connections.
    #[doc(hidden)]
    type Commands: Connections;

    /// The lock that serialises one lease's renewals.
    #[doc(hidden)]
    type Serial: Default + Send + Sync + 'static;

    /// The `retries` of a cluster client built from node URLs (the redis
    /// crate's default where `None`).
    #[doc(hidden)]
    const CLUSTER_RETRIES: Option<u32>;

    /// Starts an operation when the call runs (an async call when first
    /// polled: futures do nothing until then), drives it to its end
    /// (holding `serial` when given) and hands its output, or the output
    /// `start` failed with, to `then`.
    #[doc(hidden)]
    fn run<'a, O, T>(
        shared: &'a Shared<Self::Commands>,
        serial: Option<&'a Self::Serial>,
        start: impl FnOnce() -> Result<O, O::Output> + Send + 'a,
        then: impl FnOnce(O::Output) -> T + Send + 'a,
    ) -> Self::Call<'a, T>
    where
        O: Op + Send + 'a,
        O::Output: Send,
        T: 'a;

    /// Opens a locker's connections to `source` and runs the connect-time
    /// checks (`config` is valid).
    #[doc(hidden)]
    fn open(source: Source, config: Config) -> Self::Call<'static, Result<Locker<Self>, Error>>;

    /// A call whose result is known before anything is sent (bad input).
    #[doc(hidden)]
    fn ready<'a, T: Send + 'a>(value: T) -> Self::Call<'a, T>;

    /// `call`, keeping `guard` until it is done (or dropped, for an async
    /// call dropped unfinished).
    #[doc(hidden)]
    fn keeping<'a, T: Send + 'a>(
        call: Self::Call<'a, T>,
        guard: impl Send + 'a,
    ) -> Self::Call<'a, T>;

    /// Releases a lease; the lease counts as released once this finished.
    #[doc(hidden)]
    fn release(lease: LeaseState<Self>) -> Self::Call<'static, Result<ReleaseOutcome, Error>>;

    /// A lease dropped without a finished release: the blocking front end
    /// releases it at once, the async one hands its token to the locker.
    #[doc(hidden)]
    fn dropped(lease: &mut LeaseState<Self>);

    /// Runs a call to its end on the current thread: only on a thread of
    /// the library's own (an election's keeper), never on a caller's.
    #[doc(hidden)]
    fn block<'a, T: 'a>(call: Self::Call<'a, T>) -> T;
}

/// What a call on front end `F` returns for a result `T`: `T` on
/// [`Blocking`], a `Send` future of `T` on [`Async`].
pub type Call<'a, F, T> = <F as Front>::Call<'a, T>;

/// The blocking front end: a call runs on the caller's thread and returns
/// its result. See [`blocking`](crate::blocking).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Blocking;

/// The async front end: a call returns a future, for any executor. See
/// `aio` (feature `aio`).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Async;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Blocking {}
    impl Sealed for super::Async {}
}

/// The type aliases a front end's module exports besides its `Locker`:
/// `Lease`, `Semaphore`, `Permit`, `RwLock`, `ReadLease`, `WriteLease`,
/// `Election`, `Leadership`, `Observer` on
/// front end `$front`.
macro_rules! aliases {
    ($front:ident) => {
        #[doc = concat!("A lock held through a [`Locker`]: `Lease<", stringify!($front), ">` (see [`crate::Lease`]).")]
        pub type Lease = $crate::Lease<$crate::front::$front>;

        #[doc = concat!("A fenced semaphore of a [`Locker`]: `Semaphore<", stringify!($front), ">` (see [`crate::Semaphore`]).")]
        pub type Semaphore = $crate::Semaphore<$crate::front::$front>;

        #[doc = concat!("One permit of a [`Semaphore`], a lease on one slot: `Lease<", stringify!($front), ", kind::Permit>`.")]
        pub type Permit = $crate::Lease<$crate::front::$front, $crate::kind::Permit>;

        #[doc = concat!("A multi-key lease of a [`Locker`], N keys held at once: `Lease<", stringify!($front), ", kind::Multi>`.")]
        pub type MultiLease = $crate::Lease<$crate::front::$front, $crate::kind::Multi>;

        #[doc = concat!("A read-write lease of a [`Locker`]: `RwLock<", stringify!($front), ">` (see [`crate::RwLock`]).")]
        pub type RwLock = $crate::RwLock<$crate::front::$front>;

        #[doc = concat!("A read lease of an [`RwLock`]: `Lease<", stringify!($front), ", kind::Read>`.")]
        pub type ReadLease = $crate::Lease<$crate::front::$front, $crate::kind::Read>;

        #[doc = concat!("The write lease of an [`RwLock`]: `Lease<", stringify!($front), ", kind::Write>`.")]
        pub type WriteLease = $crate::Lease<$crate::front::$front, $crate::kind::Write>;

        #[doc = concat!("An election of a [`Locker`]: `Election<", stringify!($front), ">` (see [`crate::Election`]).")]
        pub type Election = $crate::Election<$crate::front::$front>;

        #[doc = concat!("The leadership of an [`Election`]: `Leadership<", stringify!($front), ">` (see [`crate::Leadership`]).")]
        pub type Leadership = $crate::Leadership<$crate::front::$front>;

        #[doc = concat!("The changes of an [`Election`]: `Observer<", stringify!($front), ">` (see [`crate::Observer`]).")]
        pub type Observer = $crate::Observer<$crate::front::$front>;
    };
}
pub(crate) use aliases;
