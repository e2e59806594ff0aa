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
