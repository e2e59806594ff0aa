//! The front ends' only clock read. The core never reads the clock; the
//! drivers pass `clock::now()` in.

use std::time::Instant;

#[expect(clippy::disallowed_methods, reason = "the one driver-side clock read")]
pub(crate) fn now() -> Instant {
    Instant::now()
}
