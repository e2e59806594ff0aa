//! `blocking::RwLock`, `ReadLease` and `WriteLease`: shared readers or one
//! fenced writer on a key, writers preferred (SPEC §13). Both guards are
//! leases (renew, release, drop and `with_*` are the lease's operations);
//! only the acquire scripts and the reader's release and renew differ.

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
    /// A handle on the read-write lease `key`: many readers at once, or one
    /// writer with a fence.
    ///
    /// Writers are preferred: a writer waiting for readers to leave keeps
    /// new readers out with a short-lived intent, so a stream of readers
    /// cannot starve it. A reader's [`epoch`](ReadLease::epoch) is the
    /// latest writer fence at its grant, for writes derived from what it
    /// read (see [`fenced`](crate::fenced)). The handle is cheap to clone
    /// and shares this locker's connections, waiting and shutdown.
    ///
    /// # Errors
    ///
    /// `InvalidKey` for a bad key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// let doc = locker.rw_lock("doc:7")?;
    /// let read = doc.read()?;
    /// println!("reading at epoch {}", read.epoch());
    /// read.release()?;
    /// let write = doc.write()?;
    /// println!("writing with fence {}", write.fence());
    /// write.release()?;
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
/// [`Locker::rw_lock`].
///
/// Readers and writers of one locker wait in two lines of their own;
/// readers of one locker are granted one after another at once, a
/// writer's or the last reader's release wakes both lines.
#[derive(Clone)]
pub struct RwLock {
    shared: Arc<Shared>,
    key: Arc<str>,
}

rw_common!(RwLock, ReadLease, WriteLease);

impl RwLock {
    fn acquire(&self, want: Want, options: AcquireOptions) -> Result<Lease, Error> {
        let op = Acquire::start(&self.shared.state, &self.key, want, options, now())?;
        let granted = drive(&self.shared, op)?;
        Ok(Lease::new(self.shared.clone(), granted))
    }

    /// Acquires a read lease, waiting up to the config's `wait` while a
    /// writer holds the key or waits for it.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn read(&self) -> Result<ReadLease, Error> {
        self.read_with(AcquireOptions::new())
    }

    /// Tries once for a read lease.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn try_read(&self) -> Result<ReadLease, Error> {
        self.read_with(AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Acquires a read lease with per-call options.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire_with`].
    pub fn read_with(&self, options: AcquireOptions) -> Result<ReadLease, Error> {
        self.acquire(Want::Read, options).map(ReadLease)
    }

    /// Acquires the write lease, waiting up to the config's `wait` while a
    /// writer or any reader holds the key.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn write(&self) -> Result<WriteLease, Error> {
        self.write_with(AcquireOptions::new())
    }

    /// Tries once for the write lease; it leaves no intent behind.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn try_write(&self) -> Result<WriteLease, Error> {
        self.write_with(AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Acquires the write lease with per-call options.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire_with`].
    pub fn write_with(&self, options: AcquireOptions) -> Result<WriteLease, Error> {
        self.acquire(Want::Write, options).map(WriteLease)
    }

    /// Acquires a read lease, runs `f(&read, &lost)` and releases it
    /// afterwards, as [`Locker::with_lock`] does with a lease.
    ///
    /// # Errors
    ///
    /// As [`Locker::with_lock`].
    pub fn with_read<T, E, F>(&self, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: FnOnce(&ReadLease, &Lost) -> Result<T, E>,
    {
        let read = self.read_with(options.acquire)?;
        run_holding(read, options.extend, f)
    }

    /// Acquires the write lease, runs `f(&write, &lost)` and releases it
    /// afterwards, as [`Locker::with_lock`] does with a lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// use redlease::WithLock;
    ///
    /// let doc = locker.rw_lock("doc:7")?;
    /// doc.with_write(WithLock::new().extend(true), |write, lost| {
    ///     // save, passing write.fence() to the store
    ///     Ok::<_, redlease::Error>(!lost.is_lost())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Locker::with_lock`].
    pub fn with_write<T, E, F>(&self, options: WithLock, f: F) -> Result<T, E>
    where
        E: From<Error>,
        F: FnOnce(&WriteLease, &Lost) -> Result<T, E>,
    {
        let write = self.write_with(options.acquire)?;
        run_holding(write, options.extend, f)
    }
}

/// A read lease of an [`RwLock`]: shared with other readers, never with a
/// writer. Validity, renew, release and drop behave as [`Lease`]'s; a
/// reader that expired is never renewed back.
#[must_use = "if unused the read lease is released at once"]
pub struct ReadLease(Lease);

/// The write lease of an [`RwLock`]: held alone, with a fence. Validity,
/// renew, release and drop behave as [`Lease`]'s.
#[must_use = "if unused the write lease is released at once"]
pub struct WriteLease(Lease);

guard_ops!(ReadLease, "the read lease", "waiters");
guard_ops!(WriteLease, "the write lease", "waiters");
