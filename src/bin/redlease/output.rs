//! What `redlease` says on standard error: notices, the library's log
//! records, and the one-line progress indicator while waiting.
//!
//! Keys, owner tokens and the server URL are never printed (the URL may
//! carry a password), in line with the library's own logs.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::duration::human;
use crate::now;

/// How chatty to be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    quiet: bool,
    verbose: bool,
    /// Standard error is a terminal.
    tty: bool,
}

impl Out {
    pub(crate) fn new(quiet: bool, verbose: bool) -> Self {
        Out {
            quiet,
            verbose,
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// An error that decides redlease's exit: always printed.
    pub(crate) fn fatal(&self, msg: impl std::fmt::Display) {
        eprintln!("redlease: {msg}");
    }

    /// A notice (busy, gave up waiting, release problems): not with `--quiet`.
    pub(crate) fn notice(&self, msg: impl std::fmt::Display) {
        if !self.quiet {
            eprintln!("redlease: {msg}");
        }
    }

    /// Detail shown only with `--verbose`.
    pub(crate) fn detail(&self, msg: impl std::fmt::Display) {
        if self.verbose {
            eprintln!("redlease: {msg}");
        }
    }

    pub(crate) fn is_verbose(&self) -> bool {
        self.verbose
    }

    /// Whether a wait shows the live one-line indicator (a terminal, and
    /// not `--quiet`).
    pub(crate) fn live_progress(&self) -> bool {
        self.tty && !self.quiet
    }

    /// Sends the library's log records (target `redlease`) to standard
    /// error with `--verbose` (debug and up). Without it, what matters is
    /// said once in the tool's own words (a lost lease, a failed release),
    /// not again as a library line such as `LOCK_CLEANUP_FAILED`; except
    /// [`SHOWN_BY_DEFAULT`], which the tool has no words of its own for.
    /// Nothing with `--quiet`.
    pub(crate) fn install_logger(&self) {
        let level = match (self.quiet, self.verbose) {
            (true, _) => log::LevelFilter::Off,
            (false, true) => log::LevelFilter::Debug,
            (false, false) => log::LevelFilter::Error,
        };
        if log::set_logger(&StderrLogger).is_ok() {
            log::set_max_level(level);
        }
    }
}

/// Writes `parts` on standard output: a closed one (`| head -0`) is not
/// worth a panic.
pub(crate) fn print(parts: &[&[u8]]) {
    let mut stdout = std::io::stdout().lock();
    let written = parts.iter().try_for_each(|part| stdout.write_all(part));
    let _ = written.and_then(|()| stdout.flush());
}

/// `value` as one line of JSON (the tool's types have nothing that could
/// fail to serialize).
pub(crate) fn json(value: &(impl serde::Serialize + ?Sized)) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A Redis that may evict keys can drop a held lock and let a second
/// holder in: the user must hear of it without `-v`. The library checks at
/// every connect (each pooled connection), so it is said once per run.
const SHOWN_BY_DEFAULT: &str = "REDIS_EVICTION_UNSAFE";

/// [`SHOWN_BY_DEFAULT`] was said.
static SHOWN: AtomicBool = AtomicBool::new(false);

#[derive(Debug)]
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target().starts_with("redlease") && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = record.args().to_string();
        // Every record up to the level with `--verbose` (the only debug
        // level), else only SHOWN_BY_DEFAULT.
        if text.starts_with(SHOWN_BY_DEFAULT) {
            if SHOWN.swap(true, Ordering::Relaxed) {
                return;
            }
        } else if log::max_level() < log::LevelFilter::Debug {
            return;
        }
        let level = record.level().as_str().to_ascii_lowercase();
        eprintln!("redlease: {level}: {text}");
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// What `run` waits for, as its messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// The key's lock, or a lease of its read-write lease.
    Lock,
    /// A permit of the key's semaphore of this many.
    Permit(u32),
    /// The leadership of the election (`elect`).
    Leadership,
    /// This many keys at once, a multi-key lease (`--also`).
    Keys(usize),
}

impl Wanted {
    /// "the lock" or "a permit".
    pub(crate) fn thing(self) -> &'static str {
        match self {
            Wanted::Lock => "the lock",
            Wanted::Permit(_) => "a permit",
            Wanted::Leadership => "the leadership",
            Wanted::Keys(_) => "the keys",
        }
    }

    /// Why the acquire found it busy; `remaining` is the holder's time
    /// left (for a semaphore, the soonest permit's).
    pub(crate) fn busy(self, remaining: Option<Duration>) -> String {
        let busy = match self {
            Wanted::Lock => "the lock is held by someone else".to_owned(),
            Wanted::Permit(1) => "the only permit is held by someone else".to_owned(),
            Wanted::Permit(n) => format!("all {n} permits are held by someone else"),
            Wanted::Leadership => "someone else leads".to_owned(),
            Wanted::Keys(n) => format!("of the {n} keys, some are held by someone else"),
        };
        format!("{busy}{}", self.holder(Said::Busy, remaining))
    }

    /// The words for the holder's time left, if known, where `said`.
    pub(crate) fn holder(self, said: Said, remaining: Option<Duration>) -> String {
        let whose = match self {
            Wanted::Lock => ["its lease", "its lease", "the holder's lease"],
            Wanted::Permit(_) => [
                "the first to end",
                "the first permit to end",
                "the first permit to end",
            ],
            Wanted::Leadership => ["its lease", "the leader's lease", "the leader's lease"],
            Wanted::Keys(_) => [
                "the first to end",
                "the first held key to end",
                "the last held key to end",
            ],
        }[said as usize];
        remaining.map_or_else(String::new, |d| match said {
            Said::Progress => format!("; {whose} has {} left unless renewed", human(d)),
            _ => format!(" ({whose} has {} left)", human(d)),
        })
    }
}

/// Where the holder's time left is said.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Said {
    /// After [`Wanted::busy`].
    Busy,
    /// After "gave up waiting".
    GaveUp,
    /// On the progress line.
    Progress,
}

/// How often the progress line is redrawn, and how often it asks Redis for
/// the holder's remaining time.
const REDRAW: Duration = Duration::from_millis(200);
const REFRESH_HOLDER: Duration = Duration::from_secs(1);

/// The live "waiting" line on a terminal; cleared by [`Progress::finish`].
#[derive(Debug)]
pub(crate) struct Progress {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Progress {
    /// Starts redrawing `redlease: waited 3.4s of 1m00s for the lock;
    /// the holder's lease has 26.6s left unless renewed` (or `for a
    /// permit`) on standard error. `ends` is when the holder's lease
    /// ends unless renewed (`None` when unknown); `pttl` asks Redis for its
    /// remaining time, from the progress thread about once a second.
    pub(crate) fn start(
        wanted: Wanted,
        started: Instant,
        wait: Duration,
        mut ends: Option<Instant>,
        mut pttl: impl FnMut() -> Option<Duration> + Send + 'static,
    ) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            let mut refreshed = now();
            let limit = match wait {
                Duration::MAX => " (no deadline)".to_owned(),
                wait => format!(" of {}", human(wait)),
            };
            loop {
                let t = now();
                if t.saturating_duration_since(refreshed) >= REFRESH_HOLDER {
                    refreshed = t;
                    ends = pttl().and_then(|remaining| t.checked_add(remaining));
                }
                let left = ends.map(|ends| ends.saturating_duration_since(t));
                let held = wanted.holder(Said::Progress, left);
                let elapsed = human(t.saturating_duration_since(started));
                let line = format!("waited {elapsed}{limit} for {}{held}", wanted.thing());
                let _ = write!(std::io::stderr(), "\r\x1b[Kredlease: {line}");
                if stopped.recv_timeout(REDRAW) != Err(RecvTimeoutError::Timeout) {
                    break;
                }
            }
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        });
        Progress { stop, thread }
    }

    /// Stops the line and erases it.
    pub(crate) fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}
