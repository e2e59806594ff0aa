//! The sans-IO core: lease deadlines, key naming, script replies and their
//! classification, the per-key FIFO of waiters and the wait/poll decisions.
//!
//! It does no I/O, spawns nothing and never reads the clock: time comes in
//! as a `now: Instant` argument and decisions leave as values. The
//! operations of [`driver::ops`](crate::driver::ops), driven by both front
//! ends, are its only users. [`Core`](core::Core) routes between small
//! machines with the same verbs: the per-key [`line`], the lease clock
//! ([`lease`]), the subscription ([`subscription`]), the observed
//! elections ([`observed`]) and the tracked tokens ([`tracking`]).
//!
//! # Driving contract
//!
//! Inputs are `handle_*` calls, outputs are `poll_*` calls, application
//! commands are plain verbs (`acquire`, `cancel`, `abandon`, `begin_shutdown`).
//! Every attempt the core hands out is answered exactly once with
//! `handle_acquire_reply` (the reply or the I/O error), except by a front
//! end that `abandon`s the waiter, which turns the token into an orphan to
//! be released by token (and lets the key's line settle until the reply can
//! no longer come). After every call, drain `poll_event` and act on each
//! event (wake a waiter, start the subscriber). The loop of one waiter:
//!
//! ```text
//! let id = core.acquire(now, key, token, options)?;
//! loop {
//!     match core.poll_waiter(now, id) {
//!         WaiterStep::Attempt(call) => {
//!             let submitted = now;               // deadlines count from here
//!             let reply = send(call);            // outside any lock
//!             core.handle_acquire_reply(now, id, reply);
//!         }
//!         WaiterStep::Wait(deadline) => wait_for_wake_or(deadline),
//!         WaiterStep::Done(result) => return result,
//!     }
//!     while let Some(event) = core.poll_event() { act(event) }
//! }
//! ```
//!
//! A `Wait` deadline is soft: polling early is harmless, polling late only
//! delays the retry.

pub(crate) mod claimless;
#[allow(clippy::module_inception)]
pub(crate) mod core;
pub(crate) mod election;
pub(crate) mod lease;
pub(crate) mod line;
pub(crate) mod linger;
#[cfg(any(test, fuzzing))]
pub(crate) mod model;
pub(crate) mod multi;
pub(crate) mod names;
pub(crate) mod notice;
pub(crate) mod observe;
pub(crate) mod observed;
pub(crate) mod outcome;
pub(crate) mod reader;
pub(crate) mod script;
#[cfg(test)]
mod script_header_tests;
pub(crate) mod slots;
pub(crate) mod subscription;
pub(crate) mod tracking;

pub use election::{Leader, Version};
pub use observe::Observation;
pub use outcome::{Fence, ReleaseOutcome, RenewOutcome};
pub use script::ReplyError;
