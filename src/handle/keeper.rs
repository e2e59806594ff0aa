//! The keeper of one leadership: a thread of the library (one of the
//! `keeper_threads`) that renews it with the shared renewer (`with_lock`'s docs:
//! every lease/2, failed renewals sent again while the local deadline
//! allows, `lost` on a loss) and, when the leadership is dropped, resigns
//! it. Nothing runs on the caller's executor; on the async front end the
//! thread drives the calls itself.
//!
//! ```text
//!   start ──▶ renewing ──stop (resign)──▶ gone
//!                │  └──lost──▶ gone (a later drop releases in place)
//!                └──drop: the lease handed over──▶ resigns it ──▶ gone
//! ```

use std::sync::Arc;

use parking_lot::Mutex;

use super::keeper_threads;
use super::kind;
use super::lease::Lease;
use crate::driver::ops::{log_failed_release_on_drop, Renewer, StopSignal};
use crate::error::LostCause;
use crate::front::Front;
use crate::lost::Lost;

/// What a leadership and its keeper thread share.
pub(crate) struct Keeper<F: Front> {
    stop: StopSignal,
    /// A dropped leadership's lease, for the thread to resign; `gone` once
    /// the thread no longer takes one.
    handoff: Mutex<Handoff<F>>,
}

struct Handoff<F: Front> {
    lease: Option<Lease<F, kind::Leader>>,
    gone: bool,
}

impl<F: Front> Keeper<F> {
    /// Starts the keeper thread of `lease`; `None` (and `lost` fired) when
    /// no thread can start: nothing would keep the leadership alive.
    pub(crate) fn start(lease: &Lease<F, kind::Leader>, lost: &Lost) -> Option<Arc<Self>> {
        let keeper = Arc::new(Keeper {
            stop: StopSignal::default(),
            handoff: Mutex::new(Handoff {
                lease: None,
                gone: false,
            }),
        });
        let (shared, held) = (lease.shared().clone(), lease.held().clone());
        let (for_lost, for_thread) = (lost.clone(), keeper.clone());
        let started = keeper_threads::run(Box::new(move || {
            let renewer = Renewer::new(&shared.state, &held, &for_lost, &for_thread.stop);
            F::block(F::run(&shared, None, move || Ok(renewer), |()| ()));
            let dropped = {
                let mut handoff = for_thread.handoff.lock();
                handoff.gone = true;
                handoff.lease.take()
            };
            if let Some(lease) = dropped {
                log_failed_release_on_drop(F::block(lease.release()));
            }
        }));
        if started.is_err() {
            lost.fire(LostCause::DeadlinePassed);
            return None;
        }
        Some(keeper)
    }

    /// Stops the renewals (a resign, or a loss seen by a proclaim).
    pub(crate) fn stop(&self) {
        self.stop.stop();
    }

    /// Stops the renewals and wakes the thread when the guard is dropped:
    /// a resign keeps it until its release is done, so the thread's
    /// wake-up does not compete with the resign for the CPU.
    pub(crate) fn stop_until_dropped(self: &Arc<Self>) -> WakeOnDrop<F> {
        self.stop.stop_quietly();
        WakeOnDrop(self.clone())
    }

    /// Hands a dropped leadership's lease to the thread, which resigns it
    /// once its renewals stopped; a thread already gone (after a loss)
    /// leaves it to the lease's own drop.
    pub(crate) fn resign(&self, lease: Lease<F, kind::Leader>) {
        let lease = {
            let mut handoff = self.handoff.lock();
            if handoff.gone {
                Some(lease)
            } else {
                handoff.lease = Some(lease);
                None
            }
        };
        self.stop();
        drop(lease);
    }
}

/// Wakes a keeper stopped with [`Keeper::stop_until_dropped`].
pub(crate) struct WakeOnDrop<F: Front>(Arc<Keeper<F>>);

impl<F: Front> Drop for WakeOnDrop<F> {
    fn drop(&mut self) {
        self.0.stop.wake();
    }
}
