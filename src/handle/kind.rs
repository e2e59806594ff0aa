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

/// The kinds: each a unit type under its docs, with its names in `Debug`
/// (`Kind`) and, where its grant number is a fence, [`Fenced`].
macro_rules! kinds {
    ($($(#[$doc:meta])* $kind:ident: $name:literal, $number:literal $(, $fenced:ident)?;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        #[non_exhaustive]
        pub struct $kind;

        impl sealed::Sealed for $kind {}
        impl Kind for $kind {
            const NAME: &'static str = $name;
            const NUMBER: &'static str = $number;
        }
        $(impl $fenced for $kind {})?
    )*};
}

kinds! {
    /// A lock: one holder per key ([`Locker::acquire`](crate::Locker::acquire)).
    Lock: "Lease", "fence", Fenced;

    /// A permit of a fenced semaphore: one of N holders, in a slot with a fence
    /// of its own ([`Semaphore`](crate::Semaphore)).
    Permit: "Permit", "fence", Fenced;

    /// A read lease of a read-write lease: shared with other readers, never
    /// with a writer; its number is an epoch ([`RwLock::read`](crate::RwLock::read)).
    Read: "ReadLease", "epoch";

    /// The write lease of a read-write lease: held alone, with a fence
    /// ([`RwLock::write`](crate::RwLock::write)).
    Write: "WriteLease", "fence", Fenced;

    /// The leadership of an election: one leader per name, its term a fence
    /// ([`Election::campaign`](crate::Election::campaign)); the lease inside a
    /// [`Leadership`](crate::Leadership).
    Leader: "Leadership", "term", Fenced;

    /// A multi-key lease: N keys taken at once, each with its own fence
    /// ([`Locker::acquire_all`](crate::Locker::acquire_all)). Not [`Fenced`]:
    /// it has [`fences`](crate::Lease::fences) and
    /// [`fence_of`](crate::Lease::fence_of) instead of one fence.
    Multi: "MultiLease", "fences";
}

mod sealed {
    pub trait Sealed {}
}
