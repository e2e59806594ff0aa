//! What the calls that take a closure (`with_lock`, `with_permit`,
//! `with_read`, `with_write`, `keep_alive`, `with_leadership`) share on
//! both front ends, for a lease of any kind however it was acquired: its
//! `lost` signal, its renewer, and the end (release, then the closure's
//! result or its panic). Each front end runs the closure beside the
//! renewer its own way: a sync closure beside a scoped thread
//! (`src/blocking/with_lock.rs`), an async one in the same future
//! (`src/aio/with_lock.rs`).

use std::panic::resume_unwind;

use super::kind::Kind;
use super::lease::Lease;
use crate::core::outcome::ReleaseOutcome;
use crate::driver::ops::{log_failed_release, Renewer, StopSignal};
use crate::error::Error;
use crate::front::{Call, Front};
use crate::lost::Lost;

impl<F: Front, K: Kind> Lease<F, K> {
    /// This lease's renewer, which fires `lost` on a loss, until `stop`.
    pub(crate) fn renewer<'a>(&'a self, lost: &'a Lost, stop: &'a StopSignal) -> Renewer<'a> {
        Renewer::new(&self.shared().state, self.held(), lost, stop)
    }

    /// The end of a call that took a closure: nothing can be lost
    /// anymore, and the lease is released.
    pub(crate) fn release_after(
        self,
        lost: &Lost,
    ) -> Call<'static, F, Result<ReleaseOutcome, Error>> {
        lost.disarm();
        self.release()
    }
}

/// What a call that took a closure returns once its lease was released
/// (or its leadership resigned): the closure's result, or its panic
/// resumed. A failed release is logged; the TTL ends the lease.
pub(crate) fn after_release<T>(
    outcome: std::thread::Result<T>,
    release: Result<ReleaseOutcome, Error>,
) -> T {
    log_failed_release(release);
    outcome.unwrap_or_else(|panic| resume_unwind(panic))
}

impl Lost {
    /// The end of `keep_alive`: settles a deadline that passed unobserved,
    /// then stops counting; from here on the caller decides the lease's
    /// fate.
    pub(crate) fn settle(&self) {
        let _ = self.is_lost();
        self.disarm();
    }
}

/// The calls that take a closure, written once for both front ends:
/// `with_lock` (under the front end's own docs, `$lock_doc`: its example
/// differs), `with_all`, `with_permit`, `with_read` and `with_write`, each
/// an acquire of its kind handed to the front end's own `run_holding`.
/// `$bound` is the closure's trait (`FnOnce`, `AsyncFnOnce`) and `$runs`
/// the docs' verb; an async front end adds `async .await`.
macro_rules! with_calls {
    (
        $(#[$lock_doc:meta])*
        $bound:ident, $runs:literal $(, $asyncness:ident $($await:tt)*)?
    ) => {
        impl Locker {
            $(#[$lock_doc])*
            pub $($asyncness)? fn with_lock<T, E, F>(&self, key: &str, options: $crate::WithLock, f: F) -> Result<T, E>
            where
                E: From<$crate::Error>,
                F: $bound(&Lease, &$crate::Lost) -> Result<T, E>,
            {
                run_holding(self.acquire_with(key, options.acquire), options.extend, f) $($($await)*)?
            }

            #[doc = concat!(
                "Acquires every key of `keys` at once ([`Locker::acquire_all`](crate::Locker::acquire_all)), ",
                $runs, " `f(&lease, &lost)` and releases all of them afterwards, exactly as ",
                "[`with_lock`](Self::with_lock) does with one key."
            )]
            pub $($asyncness)? fn with_all<T, E, F>(&self, keys: &[&str], options: $crate::WithLock, f: F) -> Result<T, E>
            where
                E: From<$crate::Error>,
                F: $bound(&MultiLease, &$crate::Lost) -> Result<T, E>,
            {
                let acquired = self.acquire_all_with(keys, options.acquire);
                run_holding(acquired, options.extend, f) $($($await)*)?
            }
        }

        impl Semaphore {
            #[doc = concat!(
                "Acquires a permit, ", $runs, " `f(&permit, &lost)` and releases the permit ",
                "afterwards, exactly as [`Locker::with_lock`] does with a lease (extension, ",
                "`lost`, panics and errors alike; example in ",
                "[`Locker`](crate::Locker#work-while-holding-with_lock-with_permit-with_read-with_write-with_all))."
            )]
            pub $($asyncness)? fn with_permit<T, E, F>(&self, options: $crate::WithLock, f: F) -> Result<T, E>
            where
                E: From<$crate::Error>,
                F: $bound(&Permit, &$crate::Lost) -> Result<T, E>,
            {
                run_holding(self.acquire_with(options.acquire), options.extend, f) $($($await)*)?
            }
        }

        impl RwLock {
            #[doc = concat!(
                "Acquires a read lease, ", $runs, " `f(&read, &lost)` and releases it ",
                "afterwards, as [`Locker::with_lock`] does with a lease."
            )]
            pub $($asyncness)? fn with_read<T, E, F>(&self, options: $crate::WithLock, f: F) -> Result<T, E>
            where
                E: From<$crate::Error>,
                F: $bound(&ReadLease, &$crate::Lost) -> Result<T, E>,
            {
                run_holding(self.read_with(options.acquire), options.extend, f) $($($await)*)?
            }

            #[doc = concat!(
                "Acquires the write lease, ", $runs, " `f(&write, &lost)` and releases it ",
                "afterwards, as [`Locker::with_lock`] does with a lease."
            )]
            pub $($asyncness)? fn with_write<T, E, F>(&self, options: $crate::WithLock, f: F) -> Result<T, E>
            where
                E: From<$crate::Error>,
                F: $bound(&WriteLease, &$crate::Lost) -> Result<T, E>,
            {
                run_holding(self.write_with(options.acquire), options.extend, f) $($($await)*)?
            }
        }
    };
}
pub(crate) use with_calls;
