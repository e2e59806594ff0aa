//! `Semaphore<F>`: N holders of one key at once, each with a slot and a
//! fence of its own (docs/PROTOCOL.md §5.2). A permit is a lease on its slot's key
//! (`Lease<F, kind::Permit>`), so renew, release, drop and `with_permit`
//! are the lease's own operations; only the acquire script differs.

use std::sync::Arc;
use std::time::Duration;

use super::kind;
use super::lease::Lease;
use super::locker::{acquire_kind, Locker, SharedOf};
use crate::config::AcquireOptions;
use crate::core::names::{validate_key, validate_permits, Want};

use crate::error::Error;
use crate::front::{Call, Front};

impl<F: Front> Locker<F> {
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
    /// let permit = pool.acquire()?;          // aio: pool.acquire().await?
    /// println!("slot {} with fence {}", permit.slot(), permit.fence());
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, key: &str, permits: u32) -> Result<Semaphore<F>, Error> {
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
pub struct Semaphore<F: Front> {
    shared: SharedOf<F>,
    key: Arc<str>,
    permits: u32,
}

impl<F: Front> Semaphore<F> {
    /// The number of permits this handle acquires from.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Acquires a permit, waiting up to the config's `wait`.
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire`], plus `InvalidConfig` when the semaphore is in
    /// use with another permit count.
    pub fn acquire(&self) -> Call<'_, F, Result<Lease<F, kind::Permit>, Error>> {
        self.acquire_with(AcquireOptions::new())
    }

    /// Tries once for a permit: `Busy` when every permit is held.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire(&self) -> Call<'_, F, Result<Lease<F, kind::Permit>, Error>> {
        self.acquire_with(AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Acquires a permit with per-call options (wait, lease, cancel handle).
    ///
    /// # Errors
    ///
    /// As [`Locker::acquire_with`], plus `InvalidConfig` when the semaphore
    /// is in use with another permit count.
    pub fn acquire_with(
        &self,
        options: AcquireOptions,
    ) -> Call<'_, F, Result<Lease<F, kind::Permit>, Error>> {
        let want = Want::Permit {
            permits: self.permits,
        };
        acquire_kind::<F, _>(&self.shared, &self.key, want, options)
    }
}

// Hand-written: the key must not show.
impl<F: Front> std::fmt::Debug for Semaphore<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}
