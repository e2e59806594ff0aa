//! `RwLock<F>`: shared readers or one fenced writer on a key, writers
//! preferred (docs/PROTOCOL.md §5.3). Both guards are leases (`Lease<F, kind::Read>`,
//! `Lease<F, kind::Write>`): renew, release, drop and `with_*` are the
//! lease's operations; only the acquire scripts and the reader's release
//! and renew differ.

use std::sync::Arc;
use std::time::Duration;

use super::kind;
use super::lease::Lease;
use super::locker::{acquire_kind, Locker, SharedOf};
use crate::config::AcquireOptions;
use crate::core::names::{validate_key, Want};

use crate::error::Error;
use crate::front::{Call, Front};

impl<F: Front> Locker<F> {
    /// A handle on the read-write lease `key`: many readers at once, or one
    /// writer with a fence.
    ///
    /// Writers are preferred: a writer waiting for readers to leave keeps
    /// new readers out with a short-lived intent, so a stream of readers
    /// cannot starve it. A reader's [`epoch`](Lease::epoch) is the
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
    /// let read = doc.read()?;                // aio: doc.read().await?
    /// println!("reading at epoch {}", read.epoch());
    /// read.release()?;
    /// let write = doc.write()?;
    /// println!("writing with fence {}", write.fence());
    /// write.release()?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, key: &str) -> Result<RwLock<F>, Error> {
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
pub struct RwLock<F: Front> {
    shared: SharedOf<F>,
    key: Arc<str>,
}

/// A read lease of an [`RwLock`] on front end `F`.
type ReadLease<F> = Lease<F, kind::Read>;
/// The write lease of an [`RwLock`] on front end `F`.
type WriteLease<F> = Lease<F, kind::Write>;

impl<F: Front> RwLock<F> {
    /// Acquires a read lease, waiting up to the config's `wait` while a
    /// writer holds the key or waits for it.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn read(&self) -> Call<'_, F, Result<ReadLease<F>, Error>> {
        self.read_with(AcquireOptions::new())
    }

    /// Tries once for a read lease.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn try_read(&self) -> Call<'_, F, Result<ReadLease<F>, Error>> {
        self.read_with(AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Acquires a read lease with per-call options.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire_with`].
    pub fn read_with(&self, options: AcquireOptions) -> Call<'_, F, Result<ReadLease<F>, Error>> {
        acquire_kind::<F, _>(&self.shared, &self.key, Want::Read, options)
    }

    /// Acquires the write lease, waiting up to the config's `wait` while a
    /// writer or any reader holds the key.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn write(&self) -> Call<'_, F, Result<WriteLease<F>, Error>> {
        self.write_with(AcquireOptions::new())
    }

    /// Tries once for the write lease; it leaves no intent behind.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`].
    pub fn try_write(&self) -> Call<'_, F, Result<WriteLease<F>, Error>> {
        self.write_with(AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Acquires the write lease with per-call options.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire_with`].
    pub fn write_with(&self, options: AcquireOptions) -> Call<'_, F, Result<WriteLease<F>, Error>> {
        acquire_kind::<F, _>(&self.shared, &self.key, Want::Write, options)
    }
}

// Hand-written: the key must not show.
impl<F: Front> std::fmt::Debug for RwLock<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock").finish_non_exhaustive()
    }
}
