//! `check_names`: key and namespace validation and the names stored in Redis.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::core::names::{validate_key, Channel, KeyId, LockNames, OwnerToken};
use crate::core::script::ScriptKind;

use super::{clock_reading, command_args, expect_attempt, new_core, options, Input};

/// Characters that matter to names: braces (hash tags), separators, non-ASCII.
const NAME_CHARS: [char; 12] = [
    'a', 'z', '0', ':', '{', '}', '-', ' ', 'é', '€', '\u{0}', '/',
];

fn text(input: &mut Input<'_>, max: usize) -> String {
    let len = input.below(max + 1);
    if input.byte() & 1 == 1 {
        String::from_utf8_lossy(input.bytes(len)).into_owned()
    } else {
        (0..len)
            .map(|_| NAME_CHARS[input.below(NAME_CHARS.len())])
            .collect()
    }
}

/// The Redis Cluster hash tag of a name: between the first `{` and the
/// next `}`, if non-empty; otherwise the whole name.
fn hash_tag(name: &str) -> &str {
    if let Some(open) = name.find('{') {
        if let Some(len) = name[open + 1..].find('}') {
            if len > 0 {
                return &name[open + 1..open + 1 + len];
            }
        }
    }
    name
}

/// `s` with every character but braces replaced by `x` of the same length.
fn masked_text(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '{' | '}' | '*' | '?' | '[' | ']' | '\\' => c.to_string(),
            c => "x".repeat(c.len_utf8()),
        })
        .collect()
}

/// Key and namespace validation and name building.
///
/// # Panics
///
/// When validation panics or disagrees with docs/PROTOCOL.md §1, an error message
/// depends on the key's or namespace's characters, or a valid key's names,
/// hash tags, channel or acquire command are not the ones docs/PROTOCOL.md §1 gives.
pub fn check_names(data: &[u8]) {
    let mut input = Input::new(data);
    let namespace = text(&mut input, 24);
    let key = match input.byte() % 8 {
        // Long keys around the limits.
        0 => "k".repeat(usize::from(input.u16()) % 2100),
        _ => text(&mut input, 48),
    };
    let max_key_bytes = match input.byte() % 4 {
        0 => 1024,
        _ => input.below(64),
    };
    let raw_hex = {
        let n = input.below(72);
        input.bytes(n).to_vec()
    };

    // Namespace (and the max_key_bytes option).
    let config = Config::new(namespace.clone()).max_key_bytes(max_key_bytes);
    let config_ok = !namespace.is_empty()
        && !namespace.contains(['{', '}', '*', '?', '[', ']', '\\'])
        && max_key_bytes >= 1;
    match config.validate() {
        Ok(()) => assert!(
            config_ok,
            "namespace {namespace:?}, max {max_key_bytes} accepted"
        ),
        Err(e) => {
            assert!(!config_ok, "namespace {namespace:?} refused: {e:?}");
            assert_eq!(e.code(), "INVALID_CONFIG");
            let other = Config::new(masked_text(&namespace))
                .max_key_bytes(max_key_bytes)
                .validate()
                .expect_err("masking keeps braces, glob characters and emptiness");
            assert_eq!(
                e.to_string(),
                other.to_string(),
                "the message hides the namespace"
            );
        }
    }

    // Key.
    let key_ok = !key.is_empty() && key.len() <= max_key_bytes;
    match validate_key(&key, max_key_bytes) {
        Ok(()) => assert!(
            key_ok,
            "key of {} bytes accepted (max {max_key_bytes})",
            key.len()
        ),
        Err(e) => {
            assert!(!key_ok, "key {key:?} refused: {e:?}");
            assert_eq!(e.code(), "INVALID_KEY");
            let other = validate_key(&"x".repeat(key.len()), max_key_bytes)
                .expect_err("same length, same verdict");
            assert_eq!(
                e.to_string(),
                other.to_string(),
                "the message hides the key"
            );
            assert_eq!(
                format!("{e:?}"),
                format!("{other:?}"),
                "Debug hides the key"
            );
        }
    }

    // Names of the key under a valid namespace.
    let id = KeyId::of(&key);
    let sha = lowercase_hex(&Sha256::digest(key.as_bytes()));
    assert_eq!(sha.len(), 64);
    assert_eq!(id.to_hex(), sha);
    assert_eq!(KeyId::from_hex(sha.as_bytes()), Some(id));
    if config_ok {
        let names = LockNames::new(&namespace, id);
        assert_eq!(names.lock, format!("{namespace}:lock:{{{sha}}}"));
        assert_eq!(names.fence, format!("{namespace}:lock-fence:{{{sha}}}"));
        assert_eq!(
            hash_tag(&names.lock),
            sha,
            "the lock's hash tag is the key's sha"
        );
        assert_eq!(
            hash_tag(&names.fence),
            sha,
            "the counter shares the lock's slot"
        );
        let sharded = Channel::Sharded.name(&namespace, id);
        assert_eq!(sharded, format!("{namespace}:lock-released:{{{sha}}}"));
        assert_eq!(
            hash_tag(&sharded),
            sha,
            "the sharded channel shares the slot"
        );
        assert_eq!(
            Channel::Standalone.name(&namespace, id),
            format!("{namespace}:lock-released")
        );
        assert!(
            !format!("{names:?}").contains(&sha),
            "Debug hides the names"
        );

        // Through the core: the acquire carries exactly these names.
        let now = clock_reading();
        let mut core = new_core(&config, now);
        let token = OwnerToken::from_bytes([7; 16]);
        match core.acquire(now, &key, token, options(Duration::ZERO, 1000)) {
            Ok(waiter) => {
                assert!(key_ok);
                let call = expect_attempt(&mut core, now, waiter);
                let args = command_args(&call.evalsha());
                assert_eq!(args[0], b"EVALSHA");
                assert_eq!(args[1], ScriptKind::Acquire.sha1().as_bytes());
                assert_eq!(args[2], b"2");
                assert_eq!(args[3], names.lock.as_bytes());
                assert_eq!(args[4], names.fence.as_bytes());
                assert_eq!(args[5], token.to_hex().as_bytes());
                assert_eq!(args[6], b"1000");
            }
            Err(e) => {
                assert!(!key_ok, "core refused a valid key: {e:?}");
                assert_eq!(e.code(), "INVALID_KEY");
                assert_eq!(core.counts().waiters, 0);
            }
        }
    }

    // Notification payloads: any bytes parse or not, never panic.
    let parsed = KeyId::from_hex(&raw_hex);
    let well_formed = raw_hex.len() == 64
        && raw_hex
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    assert_eq!(parsed.is_some(), well_formed, "{raw_hex:?}");
    if let Some(parsed) = parsed {
        assert_eq!(parsed.to_hex().as_bytes(), raw_hex.as_slice());
    }

    // Owner tokens: 32 lowercase hex digits, hidden from Debug.
    let mut bytes = [0u8; 16];
    for b in &mut bytes {
        *b = input.byte();
    }
    let token = OwnerToken::from_bytes(bytes);
    assert_eq!(token.to_hex(), lowercase_hex(&bytes));
    assert!(!format!("{token:?}").contains(&token.to_hex()));
}

fn lowercase_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
