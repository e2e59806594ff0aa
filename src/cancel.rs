//! `CancelHandle`: ends a blocking acquire's wait from another thread.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use event_listener::Event;
use parking_lot::Mutex;

/// Cancels the acquires it was given to through
/// [`AcquireOptions::cancel`](crate::AcquireOptions::cancel).
///
/// Cancelling is sticky: every acquire that uses the handle afterwards ends
/// with [`Error::Cancelled`](crate::Error::Cancelled) at once. A command
/// already sent to Redis is not withdrawn; if it acquires the lock, the lease
/// is returned (the acquire had already succeeded).
///
/// ```
/// let handle = redlease::CancelHandle::new();
/// let for_other_thread = handle.clone();
/// for_other_thread.cancel();
/// assert!(handle.is_cancelled());
/// ```
#[derive(Clone, Default)]
pub struct CancelHandle {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    // The wake-up events of the acquires waiting under this handle.
    waiters: Mutex<Vec<Weak<Event>>>,
}

impl CancelHandle {
    /// A handle that has not been cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every acquire using this handle, now and later.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let waiters = std::mem::take(&mut *self.inner.waiters.lock());
        for event in waiters.iter().filter_map(Weak::upgrade) {
            event.notify(usize::MAX);
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Registers a waiter's wake-up event so that `cancel` reaches it.
    pub(crate) fn register(&self, event: &Arc<Event>) {
        let mut waiters = self.inner.waiters.lock();
        waiters.retain(|w| w.strong_count() > 0);
        waiters.push(Arc::downgrade(event));
    }
}

impl fmt::Debug for CancelHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelHandle")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}
