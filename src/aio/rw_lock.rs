//! `aio::RwLock`, `ReadLease` and `WriteLease`: the async twins of the
//! blocking read-write lease (SPEC §13). Both guards are leases, so renew,
//! release, drop and `with_*` are the lease's own operations.

use std::sync::Arc;
use std::time::Duration;

use super::drive::drive;
use super::lease::Lease;
use super::locker::{Locker, Shared};
use super::with_lock::{guard_ops, run_holding};
use crate::clock::now;
use crate::config::{AcquireOptions, WithLock};
use crate::core::names::{validate_key, Want};
use crate::driver::held::rw_common;
use crate::driver::ops::Acquire;
use crate::error::Error;
use crate::lost::Lost;

impl Locker {
    /// A handle on the read-write lease `key`, as
    /// [`blocking::Locker::rw_lock`](crate::blocking::Locker::rw_lock).
    ///
    /// # Errors
    ///
    /// `InvalidKey` for a bad key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locker: &redlease::aio::Locker) -> Result<(), redlease::Error> {
    /// let doc = locker.rw_lock("doc:7")?;
    /// let read = doc.read().await?;
    /// println!("reading at epoch {}", read.epoch());
    /// read.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, key: &str) -> Result<RwLock, Error> {
        validate_key(key, self.config().max_key_bytes)?;
        Ok(RwLock {
            shared: self.shared().clone(),
            key: key.into(),
        })
    }
}

/// A read-write lease: shared readers or one fenced writer. Made by
/// [`Locker::rw_lock`]; semantics as
/// [`blocking::RwLock`](crate::blocking::RwLock).
#[derive(Clone)]
pub struct RwLock {
    shared: Arc<Shared>,
    key: Arc<str>,
}

rw_common!(RwLock, ReadLease, WriteLease);

impl RwLock {
    async fn acquire(&self, want: Want, options: AcquireOptions) -> Result<Lease, Error> {
        let op = Acquire::start(&self.shared.state, &self.key, want, options, now())?;
        let granted = drive(&self.shared, op).await?;
        Ok(Lease::new(self.shared.clone(), granted))
    }

    /// Acquires a read lease, waiting up to the config's `wait`.
    ///
    /// # Errors
    ///
    /// As [`blocking::RwLock::read`](crate::blocking::RwLock::read).
    pub async fn read(&self) -> Result<ReadLease, Error> {
        self.read_with(AcquireOptions::new()).await
    }

    /// Tries once for a read lease.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub async fn try_read(&self) -> Result<ReadLease, Error> {
        self.read_with(AcquireOptions::new().wait(Duration::ZERO))
            .await
    }

    /// Acquires a read lease with per-call options. To cancel, drop the
    /// future.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub async fn read_with(&self, options: AcquireOptions) -> Result<ReadLease, Error> {
        self.acquire(Want::Read, options).await.map(ReadLease)
    }

    /// Acquires the write lease, waiting up to the config's `wait`.
    ///
    /// # Errors
    ///
    /// As [`blocking::RwLock::write`](crate::blocking::RwLock::write).
    pub async fn write(&self) -> Result<WriteLease, Error> {
        self.write_with(AcquireOptions::new()).await
    }

    /// Tries once for the write lease; it leaves no intent behind.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    pub async fn try_write(&self) -> Result<WriteLease, Error> {
        self.write_with(AcquireOptions::new().wait(Duration::ZERO))
            .await
    }

    /// Acquires the write lease with per-call options. To cancel, drop the
    /// future.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    pub async fn write_with(&self, options: AcquireOptions) -> Result<WriteLease, Error> {
        self.acquire(Want::Write, options).await.map(WriteLease)
    }

    /// Acquires a read lease, awaits `f(&read, &lost)` and releases it
    /// afterwards, as [`Locker::with_lock`] does with a lease.
    ///
    /// # Errors
    ///
    /// As [`Locker::with_lock`].
    pub async fn with_read<T, E, F>(&self, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: AsyncFnOnce(&ReadLease, &Lost) -> Result<T, E>,
    {
        let read = self.read_with(options.acquire).await?;
        run_holding(read, options.extend, f).await
    }

    /// Acquires the write lease, awaits `f(&write, &lost)` and releases it
    /// afterwards, as [`Locker::with_lock`] does with a lease.
    ///
    /// # Errors
    ///
    /// As [`Locker::with_lock`].
    pub async fn with_write<T, E, F>(&self, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: AsyncFnOnce(&WriteLease, &Lost) -> Result<T, E>,
    {
        let write = self.write_with(options.acquire).await?;
        run_holding(write, options.extend, f).await
    }
}

/// A read lease of an [`RwLock`]; semantics as
/// [`blocking::ReadLease`](crate::blocking::ReadLease), dropping as
/// [`Lease`]'s (the locker releases it later).
#[must_use = "if unused the read lease goes back to the locker, which releases it soon after"]
pub struct ReadLease(Lease);

/// The write lease of an [`RwLock`]; semantics as
/// [`blocking::WriteLease`](crate::blocking::WriteLease), dropping as
/// [`Lease`]'s (the locker releases it later).
#[must_use = "if unused the write lease goes back to the locker, which releases it soon after"]
pub struct WriteLease(Lease);

guard_ops!(ReadLease, "the read lease", "waiters");
guard_ops!(WriteLease, "the write lease", "waiters");
