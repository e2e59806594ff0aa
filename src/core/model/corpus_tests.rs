//! Replays the committed seed corpus of every fuzz target
//! (`fuzz/corpus/<target>/*`) through the same property checks the fuzz
//! targets run (`check_*` of this module), on stable Rust and without
//! cargo-fuzz, plus a few thousand deterministic pseudo-random inputs and
//! byte-level mutations of the seeds per target.
//!
//! The seeds are written by `write_seed_corpus` (ignored; run it with
//! `cargo test --lib write_seed_corpus -- --ignored` after the input
//! encoding in `src/core/model/` changes). Files the fuzzers add to the
//! corpus directories are replayed too.

use std::fs;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use super::{check_line, check_names, check_replies};

type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 3] = [
    ("replies", check_replies),
    ("names", check_names),
    ("line", check_line),
];

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
        .join(target)
}

/// The corpus files of `target`, sorted (hidden files skipped).
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

/// Runs `check` on `data`, naming the case when a property fails.
fn run(check: Check, what: &dyn std::fmt::Display, data: &[u8]) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(data))) {
        eprintln!(
            "property violated by {what} ({} bytes): {data:02x?}",
            data.len()
        );
        resume_unwind(panic);
    }
}

fn replay(target: &str, check: Check) {
    let files = corpus(target);
    assert!(
        files.len() >= 5,
        "a seed corpus of a handful of files for {target}: {files:?}"
    );
    for file in files {
        let data = fs::read(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        run(check, &file.display(), &data);
    }
}

#[test]
fn the_replies_corpus_passes_the_classification_checks() {
    replay("replies", check_replies);
}

#[test]
fn the_names_corpus_passes_the_naming_checks() {
    replay("names", check_names);
}

#[test]
fn the_line_corpus_passes_the_line_model_checks() {
    replay("line", check_line);
}

/// xorshift64*: deterministic, so a failure reproduces from its case number.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Random inputs, and seeds with bytes flipped, inserted and cut.
fn explore(target: &str, check: Check, cases: usize, max_len: usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    let seeds: Vec<Vec<u8>> = corpus(target)
        .iter()
        .map(|f| fs::read(f).expect("readable seed"))
        .collect();
    for case in 0..cases {
        let data = if case % 2 == 0 || seeds.is_empty() {
            let len = rng.below(max_len);
            rng.bytes(len)
        } else {
            let mut data = seeds[rng.below(seeds.len())].clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(data.len() + 1);
                match rng.below(3) {
                    0 if at < data.len() => data[at] = rng.next() as u8,
                    1 => data.insert(at, rng.next() as u8),
                    _ => data.truncate(at.max(1)),
                }
            }
            data
        };
        run(check, &format!("{target} case {case}"), &data);
    }
}

#[test]
fn random_and_mutated_inputs_pass_the_classification_checks() {
    explore("replies", check_replies, 4000, 256);
}

#[test]
fn random_and_mutated_inputs_pass_the_naming_checks() {
    explore("names", check_names, 4000, 128);
}

#[test]
fn random_and_mutated_inputs_pass_the_line_model_checks() {
    explore("line", check_line, 1500, 600);
}

// ----- the seed corpus ---------------------------------------------------------
//
// Each seed is written in the input encoding of `src/core/model/`; the
// comments name what the bytes decode to.

fn le64(n: u64) -> Vec<u8> {
    n.to_le_bytes().to_vec()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn reply_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // Value tags: 0 nil, 1 OK, 2 int(8 bytes), 3 small int (byte % 8 - 4),
    // 4 raw bulk, 5 digits, 6 number text (u64, form), 7 status,
    // 8 double, 9 bool, 10 verbatim, 11 error, 12 array, 13 set, 14 map,
    // 15 push, 16 attribute, 17 RESP bytes.
    let int1 = [3u8, 5];
    let int0 = [3u8, 4];
    let int2 = [3u8, 6];
    vec![
        (
            "acquired-renewed-released",
            cat(&[&[6], &le64(1_796_104_174_047_001), &[0], &int1, &int1]),
        ),
        (
            "max-fence-expired-conflict",
            cat(&[&[6], &le64(u64::MAX), &[0], &int0, &int2]),
        ),
        (
            "busy-remaining-and-unknown",
            cat(&[&[2], &le64(1500), &[3, 2], &[0], &[3, 3], &[3, 0], &[1]]),
        ),
        (
            "zero-padded-overflow-float-signed",
            cat(&[
                &[6],
                &le64(7),
                &[2],
                &[6],
                &le64(42),
                &[6],
                &[6],
                &le64(1_796_104_174_047_000),
                &[7],
                &[6],
                &le64(5),
                &[3],
                &[6],
                &le64(5),
                &[4],
                &[6],
                &le64(0),
                &[0],
            ]),
        ),
        (
            "token-shaped-strings",
            cat(&[
                &[4, 34],
                b"5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a:1",
                &[7, 2],
                b"OK",
                &[5, 20],
                &[1; 20],
            ]),
        ),
        (
            "nested-resp3",
            cat(&[
                &[12, 3, 0, 6],
                &le64(9),
                &[0],
                &[14, 1, 9, 1, 3, 5],
                &[15, 0, 2, 4, 3],
                b"abc",
                &[10, 0, 3],
                b"txt",
                &[16, 3, 5, 1, 1, 0],
                &[13, 1, 8],
                &le64(f64::to_bits(1.5)),
            ]),
        ),
        (
            "server-errors-and-resp",
            cat(&[
                &[11, 1, 5],
                b"abcde",
                &[11, 3, 0],
                &[17, 11],
                b"$3\r\n123\r\n",
                &[17, 4],
                b":-2\r\n",
                &[17, 5],
                b"_\r\n",
            ]),
        ),
        ("whole-input-resp", b"$5\r\n12345\r\n".to_vec()),
    ]
}

/// A `text` of `check_names`: length, raw mode, the bytes.
fn raw(text: &[u8]) -> Vec<u8> {
    cat(&[&[text.len() as u8, 1], text])
}

fn name_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let hex = b"5994471abb01112afcc18159f6cc74b4f511b99806da59b3caf5a9c173cacfc5";
    let token = [0xab; 16];
    // namespace, key selector (0: long key of u16 % 2100 bytes) + key,
    // max selector (0: 1024, else byte % 64), hex payload, token.
    let seed = |ns: Vec<u8>, key: Vec<u8>, max: &[u8], payload: &[u8]| {
        cat(&[&ns, &key, max, &[payload.len() as u8], payload, &token])
    };
    vec![
        (
            "valid",
            seed(raw(b"svc"), cat(&[&[1], &raw(b"job:42")]), &[0], hex),
        ),
        (
            "brace-namespace",
            seed(raw(b"a{b}"), cat(&[&[1], &raw(b"k")]), &[0], b"nothex"),
        ),
        (
            "empty-namespace-and-key",
            seed(raw(b""), cat(&[&[1], &raw(b"")]), &[1, 5], &hex[1..]),
        ),
        (
            "key-over-the-limit",
            seed(
                raw(b"ns"),
                cat(&[&[0], &1500u16.to_le_bytes()]),
                &[0],
                &hex.to_ascii_uppercase(),
            ),
        ),
        (
            "key-at-a-small-limit",
            seed(raw(b"ns:x"), cat(&[&[1], &raw(b"abcde")]), &[1, 5], hex),
        ),
        (
            "unicode-and-invalid-utf8",
            seed(
                raw("é€ns".as_bytes()),
                cat(&[&[1], &raw(&[0xff, 0xfe, b'k', 0])]),
                &[0],
                &[],
            ),
        ),
        (
            "alphabet-mode",
            cat(&[&[6, 0, 0, 3, 4, 5, 1, 2], &[1, 4, 0, 4, 5, 9, 10], &[2, 63]]),
        ),
    ]
}

/// Operation encodings of `check_line` (first byte of each).
mod op {
    pub(super) fn join(key: u8, wait_ms: u16) -> Vec<u8> {
        let [lo, hi] = (wait_ms - 1).to_le_bytes();
        vec![0, key, 2, lo, hi]
    }
    pub(super) fn join_once(key: u8) -> Vec<u8> {
        vec![0, key, 0]
    }
    pub(super) fn join_forever(key: u8) -> Vec<u8> {
        vec![0, key, 1]
    }
    pub(super) fn acquired(pick: u8) -> Vec<u8> {
        vec![48, pick, 0, 9]
    }
    pub(super) fn acquired_deferred(pick: u8) -> Vec<u8> {
        vec![48, pick, 0, 0]
    }
    pub(super) fn busy(pick: u8, remaining_ms: u16) -> Vec<u8> {
        let [lo, hi] = (remaining_ms + 2).to_le_bytes();
        vec![48, pick, 4, lo, hi, 9]
    }
    pub(super) fn busy_unknown(pick: u8) -> Vec<u8> {
        vec![48, pick, 10, 9]
    }
    pub(super) fn timed_out(pick: u8) -> Vec<u8> {
        vec![48, pick, 11, 9]
    }
    pub(super) fn server_error(pick: u8) -> Vec<u8> {
        vec![48, pick, 12, 9]
    }
    pub(super) fn take(pick: u8) -> Vec<u8> {
        vec![96, pick]
    }
    /// Up to 399 ms.
    pub(super) fn advance(ms: u16) -> Vec<u8> {
        let [lo, hi] = ms.to_le_bytes();
        vec![106, 2, lo, hi]
    }
    /// 900 ms and `extra_ms` (below 6100).
    pub(super) fn advance_long(extra_ms: u16) -> Vec<u8> {
        let [lo, hi] = extra_ms.to_le_bytes();
        vec![106, 0, lo, hi]
    }
    pub(super) fn cancel(pick: u8) -> Vec<u8> {
        vec![142, pick]
    }
    pub(super) fn abandon(pick: u8) -> Vec<u8> {
        vec![152, pick, 0]
    }
    pub(super) fn notify(key: u8) -> Vec<u8> {
        vec![159, key, 0]
    }
    /// An election's notification about key 2 or 3: `form` 1 a vacancy, 2
    /// a new leader, 3 a new value.
    pub(super) fn notify_election(key: u8, form: u8) -> Vec<u8> {
        vec![159, key, form]
    }
    /// A campaign's busy reply, the lease ending in `units` × 50 µs.
    pub(super) fn busy_us(pick: u8, units: u16) -> Vec<u8> {
        let [lo, hi] = units.to_le_bytes();
        vec![48, pick, 15, lo, hi, 9]
    }
    /// An observer of key 2 (`name` 0) or of the candidates' key 3 (1).
    pub(super) fn observe(name: u8) -> Vec<u8> {
        vec![134, name]
    }
    pub(super) fn unobserve(pick: u8) -> Vec<u8> {
        vec![138, pick]
    }
    /// Claims a read, or ends the one in flight (`end` even: failed).
    pub(super) fn observer_read(pick: u8, end: u8) -> Vec<u8> {
        vec![90, pick, end]
    }
    pub(super) fn garbage() -> Vec<u8> {
        vec![174, 2, 0]
    }
    pub(super) const SUBSCRIBED: [u8; 1] = [178];
    pub(super) const SUBSCRIPTION_FAILED: [u8; 1] = [185];
    pub(super) const SUBSCRIBER_LOST: [u8; 1] = [189];
    pub(super) const SUBSCRIBER_STOPPED: [u8; 1] = [193];
    pub(super) const POLL_SUBSCRIBER: [u8; 1] = [196];
    pub(super) fn give_up(pick: u8) -> Vec<u8> {
        vec![203, pick]
    }
    pub(super) fn release(pick: u8, reply: u8) -> Vec<u8> {
        vec![210, pick, reply]
    }
    pub(super) fn renew(pick: u8, reply: u8) -> Vec<u8> {
        vec![228, pick, reply]
    }
    pub(super) fn abandon_lease(pick: u8) -> Vec<u8> {
        vec![239, pick]
    }
    pub(super) const TAKE_ORPHANS: [u8; 1] = [242];
    pub(super) const SHUTDOWN: [u8; 1] = [246];
    pub(super) const CLEANUP: [u8; 1] = [248];
}

fn line_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use op::*;
    // Header: safety intervals (2: 25 ms / 250 ms, 0: 100 ms / 30 ms),
    // then whether shutdown's cleanup runs before outcomes are taken.
    let seed = |header: [u8; 2], ops: Vec<Vec<u8>>| cat(&[&header, &ops.concat()]);
    vec![
        (
            "hand-over-through-notifications",
            seed(
                [2, 0],
                vec![
                    join(0, 3000),
                    busy(0, 2000),
                    join(0, 3000),
                    join(0, 3000),
                    SUBSCRIBED.to_vec(),
                    notify(0),
                    acquired(0),
                    release(0, 1),
                    notify(0),
                    busy(0, 100),
                    advance(120),
                    acquired(0),
                    renew(0, 1),
                    release(0, 1),
                ],
            ),
        ),
        (
            "try-once-and-queue-full",
            seed(
                [2, 1],
                vec![
                    join(1, 500),
                    busy(0, 800),
                    join_once(1),
                    join(1, 500),
                    join(2, 500),
                    join(2, 500),
                    join(0, 500),
                    join(0, 500),
                    join(0, 500),
                    join(0, 500),
                    join(0, 500),
                    advance(300),
                    advance(300),
                ],
            ),
        ),
        (
            "subscription-lost-failed-stopped",
            seed(
                [0, 0],
                vec![
                    join_forever(2),
                    busy(0, 5000),
                    join(2, 2000),
                    SUBSCRIBED.to_vec(),
                    SUBSCRIBER_LOST.to_vec(),
                    advance(50),
                    busy_unknown(0),
                    SUBSCRIPTION_FAILED.to_vec(),
                    advance(150),
                    busy(0, 10),
                    garbage(),
                    SUBSCRIBER_STOPPED.to_vec(),
                    give_up(0),
                    cancel(0),
                    advance(7000),
                    POLL_SUBSCRIBER.to_vec(),
                ],
            ),
        ),
        (
            "failures-orphans-and-abandon",
            seed(
                [2, 0],
                vec![
                    join(0, 1000),
                    timed_out(0),
                    join(0, 1000),
                    server_error(0),
                    join(1, 1000),
                    busy(0, 300),
                    join(1, 1000),
                    abandon(0),
                    acquired(0),
                    abandon_lease(0),
                    TAKE_ORPHANS.to_vec(),
                    join(2, 1000),
                    acquired_deferred(0),
                    take(0),
                ],
            ),
        ),
        (
            "campaigns-timed-retries-and-vacancies",
            seed(
                [2, 0],
                vec![
                    join(3, 3000),
                    busy_us(0, 40),
                    join(3, 3000),
                    advance(2),
                    busy_us(0, 0),
                    busy(0, 100),
                    SUBSCRIBED.to_vec(),
                    notify_election(3, 2),
                    notify(3),
                    notify_election(3, 1),
                    acquired(0),
                    release(0, 1),
                    notify_election(3, 1),
                    busy_us(0, 1000),
                    advance(49),
                    advance(1),
                    acquired(0),
                    renew(0, 1),
                    release(0, 1),
                ],
            ),
        ),
        (
            "observers-keep-the-subscription",
            seed(
                [2, 0],
                vec![
                    observe(0),
                    observe(1),
                    SUBSCRIBED.to_vec(),
                    notify_election(2, 3),
                    notify(2),
                    observer_read(0, 0),
                    observer_read(0, 0),
                    observer_read(1, 1),
                    observer_read(1, 1),
                    unobserve(0),
                    unobserve(0),
                    advance(300),
                    POLL_SUBSCRIBER.to_vec(),
                    advance(300),
                    advance(300),
                    advance(300),
                    POLL_SUBSCRIBER.to_vec(),
                    observe(1),
                    join(0, 1000),
                    busy(0, 500),
                    SUBSCRIPTION_FAILED.to_vec(),
                    cancel(0),
                    unobserve(0),
                    advance_long(4100),
                    advance_long(100),
                    observe(0),
                ],
            ),
        ),
        (
            "shutdown-mid-wait",
            seed(
                [1, 1],
                vec![
                    join(0, 2000),
                    acquired(0),
                    join(1, 2000),
                    busy(0, 1000),
                    join(1, 2000),
                    join(2, 2000),
                    acquired_deferred(0),
                    SHUTDOWN.to_vec(),
                    CLEANUP.to_vec(),
                    release(0, 1),
                    take(0),
                ],
            ),
        ),
    ]
}

/// Writes the seed corpus of every target (overwriting the seeds by name,
/// leaving files the fuzzers added).
#[test]
#[ignore = "writes fuzz/corpus; run after changing the input encoding"]
fn write_seed_corpus() {
    for (target, seeds) in [
        ("replies", reply_seeds()),
        ("names", name_seeds()),
        ("line", line_seeds()),
    ] {
        let dir = corpus_dir(target);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let check = TARGETS
            .iter()
            .find(|(t, _)| *t == target)
            .map(|(_, c)| *c)
            .expect("a target");
        for (name, data) in seeds {
            run(check, &name, &data);
            let path = dir.join(format!("seed-{name}"));
            fs::write(&path, &data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        }
    }
}
