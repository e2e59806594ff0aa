//! The kinds of lease, as types: what a [`Lease`](crate::Lease) holds. A
//! kind is a core kind (its script and reply classification in
//! `src/core/`) plus the accessors of its grant number; everything else a
//! lease does (validity, renew, release, drop, keep-alive) is the same for
//! every kind.

/// A kind of lease: [`Lock`], [`Permit`], [`Read`], [`Write`],
/// [`Leader`] or [`Multi`]. Sealed.
pub trait Kind: sealed::Sealed + Send + Sync + 'static {
    /// The type's name in `Debug`.
    #[doc(hidden)]
    const NAME: &'static str;
    /// What its grant number is called in `Debug` (`fence`, `epoch`).
    #[doc(hidden)]
    const NUMBER: &'static str;
}

/// A kind whose grant number is a fence: strictly increasing per key (per
/// slot for a permit), so a store can refuse a stale holder's writes.
pub trait Fenced: Kind {}

/// A lock: one holder per key ([`Locker::acquire`](crate::Locker::acquire)).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Lock;

/// A permit of a fenced semaphore: one of N holders, in a slot with a fence
/// of its own ([`Semaphore`](crate::Semaphore)).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Permit;

/// A read lease of a read-write lease: shared with other readers, never
/// with a writer; its number is an epoch ([`RwLock::read`](crate::RwLock::read)).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Read;

/// The write lease of a read-write lease: held alone, with a fence
/// ([`RwLock::write`](crate::RwLock::write)).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Write;

/// The leadership of an election: one leader per name, its term a fence
/// ([`Election::campaign`](crate::Election::campaign)); the lease inside a
/// [`Leadership`](crate::Leadership).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Leader;

/// A multi-key lease: N keys taken at once, each with its own fence
/// ([`Locker::acquire_all`](crate::Locker::acquire_all)). Not [`Fenced`]:
/// it has [`fences`](crate::Lease::fences) and
/// [`fence_of`](crate::Lease::fence_of) instead of one fence.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Multi;

macro_rules! kinds {
    ($($kind:ident: $name:literal, $number:literal;)*) => {$(
        impl sealed::Sealed for $kind {}
        impl Kind for $kind {
            const NAME: &'static str = $name;
            const NUMBER: &'static str = $number;
        }
    )*};
}

kinds! {
    Lock: "Lease", "fence";
    Permit: "Permit", "fence";
    Read: "ReadLease", "epoch";
    Write: "WriteLease", "fence";
    Leader: "Leadership", "term";
    Multi: "MultiLease", "fences";
}

impl Fenced for Lock {}
impl Fenced for Permit {}
impl Fenced for Write {}
impl Fenced for Leader {}

mod sealed {
    pub trait Sealed {}
}
