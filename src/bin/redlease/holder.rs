//! The holder record: who holds a key, written by `run` beside the lock
//! (`<ns>:lock-holder:{<sha>}`) and shown by `status`.
//!
//! It holds the grant's fence, the host name, redlease's pid and the
//! command's program name (its first word, never its arguments, which may
//! carry secrets), and expires with the lease. It is never the lock's value
//! and never the owner token: the library neither reads nor writes it. A
//! record is shown only while its fence is the key's latest grant, so a
//! record left behind by an earlier holder is never mistaken for the
//! current one.

use std::ffi::OsStr;
use std::path::Path;

use serde::Serialize;

/// Longest host or command name kept.
const MAX_FIELD: usize = 200;
/// First line of the record: its format.
const VERSION: &str = "redlease-holder-v1";

/// Who holds a key; its JSON object (`status --json`) leaves the fence
/// out, which the status shows beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Holder {
    #[serde(skip)]
    pub(crate) fence: u64,
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) command: String,
}

impl Holder {
    /// This process, running `program`, for the grant `fence`.
    pub(crate) fn this_process(fence: u64, program: &OsStr) -> Self {
        let name = Path::new(program)
            .file_name()
            .unwrap_or(program)
            .to_string_lossy();
        Holder {
            fence,
            host: clean(&hostname()),
            pid: std::process::id(),
            command: clean(&name),
        }
    }

    /// The stored form: one field a line.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{VERSION}\n{}\n{}\n{}\n{}",
            self.fence, self.host, self.pid, self.command
        )
    }

    /// The stored form read back; `None` for anything else.
    pub(crate) fn decode(text: &str) -> Option<Self> {
        let [VERSION, fence, host, pid, command] = text.split('\n').collect::<Vec<_>>()[..] else {
            return None;
        };
        Some(Holder {
            fence: fence.parse().ok()?,
            host: clean(host),
            pid: pid.parse().ok()?,
            command: clean(command),
        })
    }
}

/// This machine's name, or "" when unknown.
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Printable, one line, bounded (whole characters only).
fn clean(s: &str) -> String {
    let mut len = 0;
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take_while(|c| {
            len += c.len_utf8();
            len <= MAX_FIELD
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_record_reads_back_and_keeps_only_the_program_name() {
        let h = Holder::this_process(42, OsStr::new("/usr/bin/pg_dump"));
        assert_eq!(h.command, "pg_dump");
        assert_eq!(h.pid, std::process::id());
        assert_eq!(Holder::decode(&h.encode()), Some(h));
    }

    proptest! {
        #[test]
        fn decoding_anything_never_panics(text in "\\PC{0,80}(\n\\PC{0,20}){0,6}") {
            let _ = Holder::decode(&text);
        }

        #[test]
        fn fields_survive_the_round_trip(fence: u64, pid: u32, host in "\\PC{0,300}", command in "\\PC{0,300}") {
            let h = Holder { fence, host: clean(&host), pid, command: clean(&command) };
            prop_assert_eq!(Holder::decode(&h.encode()), Some(h));
        }
    }
}
