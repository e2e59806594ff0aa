//! `aio::Semaphore` and `aio::Permit`: the async twins of the blocking
//! semaphore (SPEC §12). A permit is a lease on its slot's key, so renew,
//! release, drop and `with_permit` are the lease's own operations.

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
    /// A handle on the fenced semaphore `key` with `permits` permits, as
    /// [`blocking::Locker::semaphore`](crate::blocking::Locker::semaphore).
    ///
    /// # Errors
    ///
    /// `InvalidKey` for a bad key, `InvalidConfig` for `permits` outside
    /// `1..=1024`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locker: &redlease::aio::Locker) -> Result<(), redlease::Error> {
    /// let pool = locker.semaphore("db-pool", 4)?;
    /// let permit = pool.acquire().await?;
    /// println!("slot {} with fence {}", permit.slot(), permit.fence());
    /// permit.release().await?;
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
/// Made by [`Locker::semaphore`]; semantics as
/// [`blocking::Semaphore`](crate::blocking::Semaphore).
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
    /// As [`blocking::Semaphore::acquire`](crate::blocking::Semaphore::acquire).
    pub async fn acquire(&self) -> Result<Permit, Error> {
        self.acquire_with(AcquireOptions::new()).await
    }

    /// Tries once for a permit: `Busy` when every permit is held.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Permit, Error> {
        self.acquire_with(AcquireOptions::new().wait(Duration::ZERO))
            .await
    }

    /// Acquires a permit with per-call options (wait, lease). To cancel,
    /// drop the future.
    ///
    /// # Errors
    ///
    /// As [`blocking::Semaphore::acquire_with`](crate::blocking::Semaphore::acquire_with).
    pub async fn acquire_with(&self, options: AcquireOptions) -> Result<Permit, Error> {
        let op = Acquire::start(&self.shared.state, &self.key, self.want(), options, now())?;
        let granted = drive(&self.shared, op).await?;
        Ok(Permit(Lease::new(self.shared.clone(), granted)))
    }

    /// Acquires a permit, awaits `f(&permit, &lost)` and releases the
    /// permit afterwards, exactly as [`Locker::with_lock`] does with a lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locker: &redlease::aio::Locker) -> Result<(), redlease::Error> {
    /// use redlease::WithLock;
    ///
    /// let pool = locker.semaphore("api-quota", 3)?;
    /// let slot = pool
    ///     .with_permit(WithLock::new().extend(true), async |permit, _lost| {
    ///         Ok::<_, redlease::Error>(permit.slot())
    ///     })
    ///     .await?;
    /// # let _ = slot; Ok(()) }
    /// ```
    pub async fn with_permit<T, E, F>(&self, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: AsyncFnOnce(&Permit, &Lost) -> Result<T, E>,
    {
        let permit = self.acquire_with(options.acquire).await?;
        run_holding(permit, options.extend, f).await
    }
}

/// One permit of a [`Semaphore`]: a lease on one slot; semantics as
/// [`blocking::Permit`](crate::blocking::Permit), dropping as
/// [`Lease`]'s (the locker releases it later).
#[must_use = "if unused the permit goes back to the locker, which releases it soon after"]
pub struct Permit(Lease);

guard_ops!(Permit, "the permit", "the semaphore's waiters");
