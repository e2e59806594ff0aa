//! `blocking::Semaphore` and `blocking::Permit`: N holders of one key at
//! once, each with a slot and a fence of its own (SPEC §12). A permit is a
//! lease on its slot's key, so renew, release, drop and `with_permit` are
//! the lease's own operations; only the acquire script differs.

use std::sync::Arc;
use std::time::Duration;

use super::drive::drive;
use super::lease::Lease;
use super::locker::{Locker, Shared};
use super::with_lock::{guard_ops, run_holding};
use crate::clock::now;
use crate::config::{AcquireOptions, WithLock};
use crate::core::names::{validate_key, validate_permits};
use crate::driver::held::permit_common;
use crate::driver::ops::Acquire;
use crate::error::Error;
use crate::lost::Lost;

impl Locker {
    /// A handle on the fenced semaphore `key` with `permits` permits: at
    /// most that many holders at once, across every locker and process,
    /// each holding a slot (`0..permits`) with its own fence.
    ///
    /// The handle is cheap to clone and shares this locker's connections,
    /// waiting and shutdown. Lockers that use one key with different
    /// permit counts never over-grant: an acquire with another count than
    /// the one in use fails with `InvalidConfig` while any permit of that
    /// count is held, and takes over once none is (resize by draining).
    ///
    /// # Errors
    ///
    /// `InvalidKey` for a bad key, `InvalidConfig` for `permits` outside
    /// `1..=1024`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let pool = locker.semaphore("db-pool", 4)?;
    /// let permit = pool.acquire()?;
    /// println!("slot {} with fence {}", permit.slot(), permit.fence());
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, key: &str, permits: u32) -> Result<Semaphore, Error> {
        validate_key(key, self.config().max_key_bytes)?;
        validate_permits(permits)?;
        Ok(Semaphore {
            shared: self.shared().clone(),
            key: key.into(),
            permits,
        })
    }
}

/// A fenced semaphore: up to [`permits`](Self::permits) holders at once.
/// Made by [`Locker::semaphore`].
///
/// Waiters of one locker for one semaphore form a FIFO line, and only the
/// head sends attempts; after a grant the next waiter tries at once (more
/// permits may be free), else it waits for a release notification, the
/// soonest permit's expiry or the safety poll.
#[derive(Clone)]
pub struct Semaphore {
    shared: Arc<Shared>,
    key: Arc<str>,
    permits: u32,
}

permit_common!(Permit, Semaphore);

impl Semaphore {
    /// Acquires a permit, waiting up to the config's `wait`.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`], plus `InvalidConfig` when the semaphore is in
    /// use with another permit count.
    pub fn acquire(&self) -> Result<Permit, Error> {
        self.acquire_with(AcquireOptions::new())
    }

    /// Tries once for a permit: `Busy` when every permit is held.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Result<Permit, Error> {
        self.acquire_with(AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Acquires a permit with per-call options (wait, lease, cancel handle).
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire_with`], plus `InvalidConfig` when the semaphore
    /// is in use with another permit count.
    pub fn acquire_with(&self, options: AcquireOptions) -> Result<Permit, Error> {
        let op = Acquire::start(&self.shared.state, &self.key, self.want(), options, now())?;
        let granted = drive(&self.shared, op)?;
        Ok(Permit(Lease::new(self.shared.clone(), granted)))
    }

    /// Acquires a permit, runs `f(&permit, &lost)` and releases the permit
    /// afterwards, exactly as [`Locker::with_lock`] does with a lease
    /// (extension, `lost`, panics and errors alike).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// use redlease::WithLock;
    ///
    /// let pool = locker.semaphore("api-quota", 3)?;
    /// pool.with_permit(WithLock::new().extend(true), |permit, lost| {
    ///     // call the API, passing (permit.slot(), permit.fence()) along
    ///     Ok::<_, redlease::Error>(!lost.is_lost())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn with_permit<T, E, F>(&self, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: FnOnce(&Permit, &Lost) -> Result<T, E>,
    {
        let permit = self.acquire_with(options.acquire)?;
        run_holding(permit, options.extend, f)
    }
}

/// One permit of a [`Semaphore`]: a lease on one slot.
///
/// A store the permit protects checks `(slot, fence)`: it keeps a
/// high-water fence per slot (see [`fenced`](crate::fenced)). Validity,
/// renew, release and drop behave as [`Lease`]'s.
#[must_use = "if unused the permit is released at once"]
pub struct Permit(Lease);

guard_ops!(Permit, "the permit", "the semaphore's waiters");
