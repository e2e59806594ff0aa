//! The core behind a mutex, each waiter's wake-up event, and the drain of
//! the core's events after every call. The mutex is never held across I/O
//! or an `.await`.

use std::collections::HashMap;
use std::sync::Arc;

use event_listener::{Event, EventListener};
use parking_lot::Mutex;

use super::metrics::CellMetrics;
use crate::core::core::{Core, CoreEvent};
use crate::core::line::WaiterId;

pub(crate) struct CoreCell {
    state: Mutex<CellState>,
    /// Notified after every call into the core, so that shutdown can wait
    /// for attempts in flight to finish.
    changed: Event,
    metrics: CellMetrics,
}

struct CellState {
    core: Core,
    wakers: HashMap<WaiterId, Arc<Event>>,
}

/// Whether a call asked for the subscriber to be started.
#[must_use]
pub(crate) struct StartSubscriber(pub(crate) bool);

impl CoreCell {
    pub(crate) fn new(core: Core, metrics: CellMetrics) -> Self {
        CoreCell {
            state: Mutex::new(CellState {
                core,
                wakers: HashMap::new(),
            }),
            changed: Event::new(),
            metrics,
        }
    }

    /// Runs `f` on the core, then wakes every waiter the core named and
    /// records the gauges and wake-ups (feature `metrics`).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Core) -> R) -> (R, StartSubscriber) {
        let mut st = self.state.lock();
        let result = f(&mut st.core);
        let mut start = false;
        while let Some(event) = st.core.poll_event() {
            match event {
                CoreEvent::Wake(id) => {
                    if let Some(waker) = st.wakers.get(&id) {
                        waker.notify(usize::MAX);
                    }
                }
                CoreEvent::StartSubscriber => start = true,
            }
        }
        self.metrics.update(&mut st.core);
        drop(st);
        self.changed.notify(usize::MAX);
        (result, StartSubscriber(start))
    }

    /// Reads the core; for calls that change nothing.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&Core) -> R) -> R {
        f(&self.state.lock().core)
    }

    /// Registers the wake-up event of a new waiter.
    pub(crate) fn set_waker(&self, id: WaiterId, waker: Arc<Event>) {
        self.state.lock().wakers.insert(id, waker);
    }

    pub(crate) fn remove_waker(&self, id: WaiterId) {
        self.state.lock().wakers.remove(&id);
    }

    pub(crate) fn listen_changed(&self) -> EventListener {
        self.changed.listen()
    }

    /// Wakes everyone listening for changes (e.g. a subscriber exited).
    pub(crate) fn notify_changed(&self) {
        self.changed.notify(usize::MAX);
    }
}
