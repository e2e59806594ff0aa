//! Captures the `redlease` log records of the test binary.
//!
//! One logger per process, installed on first use. nextest runs every test
//! in its own process; under `cargo test` records of concurrent tests mix,
//! so bodies look for their own markers only.

use std::sync::{Mutex, Once, PoisonError};

/// One captured record.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) level: log::Level,
    #[allow(dead_code, reason = "only some test binaries check the target")]
    pub(crate) target: String,
    pub(crate) message: String,
}

static RECORDS: Mutex<Vec<Record>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();
static LOGGER: Capture = Capture;

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target().starts_with("redlease")
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            RECORDS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Record {
                    level: record.level(),
                    target: record.target().to_owned(),
                    message: record.args().to_string(),
                });
        }
    }

    fn flush(&self) {}
}

/// The records logged from the moment [`capture`] was called.
#[derive(Debug)]
pub(crate) struct Logs {
    from: usize,
}

/// Installs the logger (once per process) and marks the current position.
pub(crate) fn capture() -> Logs {
    INSTALL.call_once(|| {
        log::set_logger(&LOGGER).expect("no other logger in the behaviour test binaries");
        log::set_max_level(log::LevelFilter::Trace);
    });
    Logs {
        from: RECORDS.lock().unwrap_or_else(PoisonError::into_inner).len(),
    }
}

impl Logs {
    /// Every `redlease` record since the mark.
    pub(crate) fn records(&self) -> Vec<Record> {
        RECORDS.lock().unwrap_or_else(PoisonError::into_inner)[self.from..].to_vec()
    }

    /// Whether a record at `level` containing `needle` was logged since the mark.
    pub(crate) fn contains(&self, level: log::Level, needle: &str) -> bool {
        self.records()
            .iter()
            .any(|r| r.level == level && r.message.contains(needle))
    }
}
