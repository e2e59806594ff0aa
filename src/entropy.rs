//! Fresh owner tokens: 128 bits from the operating system's generator.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::names::{OwnerToken, RegId};

/// A new 128-bit owner token.
///
/// Tokens must be unique, not secret from Redis (which stores them). If the
/// OS generator is unavailable, std's randomly keyed SipHash over a process
/// counter still gives unique, unpredictable values instead of a panic.
pub(crate) fn fresh_token() -> OwnerToken {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        for (i, half) in bytes.chunks_exact_mut(8).enumerate() {
            let mut h = RandomState::new().build_hasher();
            h.write_u64(n);
            h.write_usize(i);
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    OwnerToken::from_bytes(bytes)
}

/// A new registration id for a locker's hand-over queue entries: not
/// secret, only distinct (64 bits of a fresh token).
pub(crate) fn fresh_reg() -> RegId {
    let hex = fresh_token().to_hex();
    RegId(u64::from_str_radix(&hex[..16], 16).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_distinct() {
        let a: std::collections::HashSet<_> = (0..1000).map(|_| super::fresh_token()).collect();
        assert_eq!(a.len(), 1000);
    }
}
