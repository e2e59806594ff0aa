//! The values a lease operation hands back: fences and release/renew outcomes.

use std::fmt;

/// A fencing token: strictly increasing per key across every grant, also
/// after Redis lost its data (docs/PROTOCOL.md §3).
///
/// Pass it to every store the lease protects and let the store reject a
/// write whose fence is lower than one it already accepted.
///
/// ```
/// # fn fence_of(n: u64) -> redlease::Fence { redlease::Fence::new(n) }
/// let older = fence_of(7);
/// let newer = fence_of(8);
/// assert!(older < newer);
/// assert_eq!(newer.get(), 8);
/// assert_eq!(newer.to_string(), "8");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

impl Fence {
    /// Wraps a fence value, e.g. one read back from a store.
    pub fn new(value: u64) -> Self {
        Fence(value)
    }

    /// The fence as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// What a release found in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The lease was ours and is now deleted; waiters were notified.
    Released,
    /// The lock was already gone: the lease had expired.
    Expired,
    /// Someone else holds the lock now: the lease had expired and was taken.
    Conflict,
}

/// What a renew found in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// The lease was ours and now lasts a full lease length again.
    Renewed,
    /// The lock was gone; it was not re-created.
    Expired,
    /// Someone else holds the lock now.
    Conflict,
}
