//! The reference model and property checks behind the fuzz targets in
//! `fuzz/` (compiled for tests and under `--cfg fuzzing`, which cargo-fuzz
//! passes; not part of the API, no stability promise). The fuzz targets
//! reach the entry points through the hidden `redlease::fuzzing`, which
//! exists only under `--cfg fuzzing`.
//!
//! Each `check_*` function decodes arbitrary bytes into a structured case,
//! runs it through the sans-IO core and **panics when a property is
//! violated**. The fuzz targets are one-line calls of these functions, and
//! the unit tests in `corpus_tests.rs` replay the committed seed corpus
//! (`fuzz/corpus/<target>/*`) through the same checks on stable Rust.
//!
//! - [`check_replies`] (`replies.rs`): classification of acquire, release
//!   and renew replies from arbitrary `redis::Value` trees is total, agrees
//!   with a reference written from docs/PROTOCOL.md §3, accepted fences are positive and
//!   round-trip, the error text never depends on string contents, and the
//!   core turns each reply into the matching outcome, orphan or lease state.
//! - [`check_names`] (`names.rs`): key and namespace validation never panics
//!   and gives `INVALID_KEY` / `INVALID_CONFIG` exactly for invalid input;
//!   valid keys give `<ns>:lock:{<64 lowercase hex>}` names whose hash tag is
//!   the key's SHA-256, and the acquire command carries exactly those names.
//! - [`check_line`] (`line.rs`): the per-key FIFO lines and wait decisions
//!   under arbitrary operation sequences and instants, checked after every
//!   step against a small reference model: no waiter lost, duplicated or
//!   reordered, one attempt per key, no wait past a deadline, no head left
//!   without a wake-up, and every token tracked, orphaned or released once.
//!   Three keys are locks, the fourth an election's candidates (campaigns,
//!   their microsecond-timed retries, vacancies that wake them, resigns);
//!   observers of two elections keep the subscription wanted, count every
//!   change announced to them and read one at a time.
//!
//! This file holds the input decoding and the helpers the checks share.

// The entry points are `pub` for the hidden `redlease::fuzzing` re-export
// (`--cfg fuzzing` only); in a plain test build only the unit tests use them.
#![cfg_attr(not(fuzzing), allow(unreachable_pub))]

mod line;
mod names;
mod replies;

#[cfg(test)]
mod corpus_tests;

pub use line::check_line;
pub use names::check_names;
pub use replies::check_replies;

use std::time::{Duration, Instant};

use redis::Value;

use crate::config::{Config, ResolvedOptions};
use crate::core::core::{Core, CoreSettings, WaiterStep};
use crate::core::line::WaiterId;
use crate::core::names::{Channel, KeyId, OwnerToken, Want};
use crate::core::script::{ScriptCall, ScriptKind};
use crate::error::Error;

// ----- input decoding --------------------------------------------------------

/// The fuzz bytes, read front to back; reads past the end give zeros, so
/// every input decodes to some case.
pub(super) struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub(super) fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub(super) fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    pub(super) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    pub(super) fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte();
        }
        u64::from_le_bytes(b)
    }

    /// A number below `n` (at most 256).
    pub(super) fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
}

/// The element of `items` that `pick` selects, if there is any.
pub(super) fn choose<T: Copy>(pick: u8, items: &[T]) -> Option<T> {
    (!items.is_empty()).then(|| items[usize::from(pick) % items.len()])
}

/// The one reading of the clock per case; every other instant is derived
/// from it by adding durations (the core never reads the clock itself).
#[allow(clippy::disallowed_methods)]
pub(super) fn clock_reading() -> Instant {
    Instant::now()
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The packed form of a command, parsed back into its arguments.
pub(super) fn command_args(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    match redis::parse_redis_value(&cmd.get_packed_command()) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::BulkString(b) => b,
                other => panic!("a packed command holds bulk strings, not {other:?}"),
            })
            .collect(),
        other => panic!("a packed command parses as an array, not {other:?}"),
    }
}

/// Whether `call` is a release (a leader's: a resign) of exactly `token`.
pub(super) fn releases(call: &ScriptCall, token: OwnerToken) -> bool {
    // The token follows the keys: a release has one, a resign two.
    let at = match call.kind {
        ScriptKind::Release => 4,
        ScriptKind::Resign => 5,
        _ => return false,
    };
    command_args(&call.evalsha()).get(at) == Some(&token.to_hex().into_bytes())
}

// ----- driving a core --------------------------------------------------------

/// Shorthands of [`Core::acquire_valued`] for the core's tests and this
/// model, and what they read of the core.
impl Core {
    /// Starts an acquire of `key`'s lock.
    pub(crate) fn acquire(
        &mut self,
        now: Instant,
        key: &str,
        token: OwnerToken,
        options: ResolvedOptions,
    ) -> Result<WaiterId, Error> {
        self.acquire_for(now, key, Want::Lock, token, options)
    }

    /// Starts an acquire of what `want` names on `key`, without a value.
    pub(crate) fn acquire_for(
        &mut self,
        now: Instant,
        key: &str,
        want: Want,
        token: OwnerToken,
        options: ResolvedOptions,
    ) -> Result<WaiterId, Error> {
        self.acquire_valued(now, key, want, None, token, options)
    }

    /// How many possible changes of `id` were announced so far: an
    /// observer whose last read began at a smaller count reads again.
    pub(crate) fn observed_changes(&self, id: KeyId) -> u64 {
        self.observed.get(&id).map_or(0, |o| o.changes)
    }
}

pub(super) fn fuzz_config() -> Config {
    Config::new("fuzz")
}

pub(super) fn new_core(config: &Config, now: Instant) -> Core {
    Core::new(CoreSettings::new(config, Channel::Standalone), now)
}

pub(super) fn options(wait: Duration, lease_ms: u64) -> ResolvedOptions {
    ResolvedOptions { wait, lease_ms }
}

#[track_caller]
pub(super) fn expect_attempt(core: &mut Core, now: Instant, id: WaiterId) -> ScriptCall {
    match core.poll_waiter(now, id) {
        WaiterStep::Attempt(call) => call,
        other => panic!("expected an attempt, got {other:?}"),
    }
}
