//! One reader per observed election and locker (docs/PROTOCOL.md): the
//! observers of a name take turns sending its read, and every item a read
//! yields is kept for all of them, so a change costs one read whatever the
//! number of observers. Each observer walks the items with a cursor of its
//! own; one that falls more than [`FAN_OUT`] items behind, or that just
//! started, gets the current state instead, marked `resync`.
//!
//! ```text
//!  observer starts ──▶ Starting(reads done) ──▶ a read completes ──▶ current state (resync) ──▶ At(end)
//!  At(n), item n kept ──▶ yield it ──▶ At(n + 1)
//!  At(n), item n dropped (more than FAN_OUT newer) ──▶ current state (resync) ──▶ At(end)
//!  caught up ──▶ a read in flight: wait for it │ a change announced or the next read due: read
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::election::{ReadReply, Version};
use super::observe::{Observation, ObserveState};

/// How many items a reader keeps for observers that have not yielded
/// them yet.
pub(crate) const FAN_OUT: usize = 64;

/// Where one observer stands in its reader's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cursor {
    /// Started when the reader had completed this many reads: it yields
    /// the current state once a read completes after that.
    Starting(u64),
    /// The number of the next item to yield.
    At(u64),
}

/// What an observer does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReaderStep {
    /// Yield this item; the cursor moves to the one given.
    Yield(Observation, Cursor),
    /// Read now, after claiming the read ([`Reader::claim`]).
    Read,
    /// Wait for a change of the core (the read in flight ending, a
    /// notification) or until the instant (`None`: no deadline).
    Wait(Option<Instant>),
}

/// One observed election's reader.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    state: ObserveState,
    /// The last items read, the first numbered `first`.
    items: VecDeque<Observation>,
    first: u64,
    /// The state the last read ended at: what a starting or lagging
    /// observer yields.
    current: Option<Observation>,
    /// An observer's read is in flight.
    reading: bool,
    /// Reads completed (or failed).
    reads: u64,
    /// When to read next (`None`: at once).
    next_read: Option<Instant>,
    /// The announced changes when the last read began.
    seen: u64,
}

impl Reader {
    /// Reads completed so far: a new observer's [`Cursor::Starting`].
    pub(crate) fn reads(&self) -> u64 {
        self.reads
    }

    /// The version the next read reads after.
    pub(crate) fn after(&self) -> Option<Version> {
        self.state.after()
    }

    fn end(&self) -> u64 {
        self.first + self.items.len() as u64
    }

    fn resync(&self) -> Option<ReaderStep> {
        let current = self.current.as_ref()?;
        let item = Observation {
            resync: true,
            ..current.clone()
        };
        Some(ReaderStep::Yield(item, Cursor::At(self.end())))
    }

    /// The next step at `now` of an observer at `cursor`, `changes` being
    /// the changes announced so far. Changes nothing: a `Read` is claimed
    /// with [`claim`](Self::claim).
    pub(crate) fn step(&self, cursor: Cursor, changes: u64, now: Instant) -> ReaderStep {
        let behind = match cursor {
            Cursor::Starting(reads) => self.reads > reads,
            Cursor::At(n) if n >= self.first && n < self.end() => {
                let item = self.items[(n - self.first) as usize].clone();
                return ReaderStep::Yield(item, Cursor::At(n + 1));
            }
            Cursor::At(n) => n < self.first,
        };
        if behind {
            if let Some(step) = self.resync() {
                return step;
            }
        }
        if self.reading {
            return ReaderStep::Wait(None);
        }
        let starting = matches!(cursor, Cursor::Starting(_));
        let due = self.next_read.is_none_or(|at| at <= now);
        if starting || changes != self.seen || due {
            ReaderStep::Read
        } else {
            ReaderStep::Wait(self.next_read)
        }
    }

    /// An observer sends the read, with `changes` announced so far;
    /// false when another observer's read is already in flight.
    pub(crate) fn claim(&mut self, changes: u64) -> bool {
        if self.reading {
            return false;
        }
        self.reading = true;
        self.seen = changes;
        true
    }

    /// The claimed read's reply at `now` (`None`: it failed): its items
    /// are kept for every observer, and when to read next is set.
    pub(crate) fn handle(&mut self, now: Instant, reply: Option<&ReadReply>, poll: Duration) {
        self.reading = false;
        self.reads += 1;
        self.next_read = match reply {
            Some(read) => {
                let (items, next) = self.state.handle_read(now, read, poll);
                for item in items {
                    self.current = Some(item.clone());
                    self.items.push_back(item);
                    if self.items.len() > FAN_OUT {
                        self.items.pop_front();
                        self.first += 1;
                    }
                }
                next
            }
            None => self.state.handle_failure(now),
        };
    }

    /// The claimed read will not be answered (its observer was dropped):
    /// another observer reads.
    pub(crate) fn abandon(&mut self) {
        self.reading = false;
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests take one real instant, then move it by hand
mod tests {
    use super::*;
    use crate::core::observe::tests::{entry, read};

    const POLL: Duration = Duration::from_secs(1);

    fn version(step: &ReaderStep) -> Option<(String, bool)> {
        match step {
            ReaderStep::Yield(item, _) => Some((item.version.to_string(), item.resync)),
            _ => None,
        }
    }

    /// Yields what `cursor` can yield now; returns the items and the cursor.
    fn drain(reader: &Reader, mut cursor: Cursor, now: Instant) -> (Vec<(String, bool)>, Cursor) {
        let mut items = Vec::new();
        while let step @ ReaderStep::Yield(_, next) = reader.step(cursor, 0, now) {
            items.extend(version(&step));
            cursor = next;
        }
        (items, cursor)
    }

    /// A log of `n` proclaims of term 7 after the vacancy `0-0`.
    fn log(from: u64, to: u64) -> (Option<redis::Value>, Vec<redis::Value>) {
        let entries: Vec<redis::Value> = (from..to)
            .map(|i| {
                let prev = if i == 0 {
                    "0-0".to_owned()
                } else {
                    format!("7-{}", i - 1)
                };
                entry(&format!("7-{i}"), &prev, Some("v"))
            })
            .collect();
        (entries.last().cloned(), entries)
    }

    #[test]
    fn one_read_serves_every_observer_and_a_second_waits_for_the_first() {
        let now = Instant::now();
        let mut reader = Reader::default();
        let (a, b) = (Cursor::Starting(0), Cursor::Starting(0));
        assert_eq!(reader.step(a, 0, now), ReaderStep::Read);
        assert!(reader.claim(0));
        assert!(!reader.claim(0), "one read at a time");
        assert_eq!(
            reader.step(b, 0, now),
            ReaderStep::Wait(None),
            "b waits for a's read"
        );
        reader.handle(now, Some(&read("", None, vec![])), POLL);
        let (first_a, a) = drain(&reader, a, now);
        let (first_b, b) = drain(&reader, b, now);
        assert_eq!(first_a, [("0.0".to_owned(), true)]);
        assert_eq!(first_b, first_a, "the current state, to both");

        // A change announced: one read, its items to both, in order.
        assert_eq!(reader.step(a, 1, now), ReaderStep::Read);
        assert!(reader.claim(1));
        let (top, entries) = log(0, 3);
        reader.handle(now, Some(&read("7", top, entries)), POLL);
        let expected: Vec<(String, bool)> = (0..3).map(|i| (format!("7.{i}"), false)).collect();
        let (items_a, a) = drain(&reader, a, now);
        let (items_b, b) = drain(&reader, b, now);
        assert_eq!((items_a, items_b), (expected.clone(), expected));
        assert!(
            matches!(reader.step(a, 1, now), ReaderStep::Wait(Some(_))),
            "nothing new announced: it waits for the next poll"
        );
        let _ = b;
    }

    #[test]
    fn a_new_observer_reads_once_and_a_lagging_one_resyncs() {
        let now = Instant::now();
        let mut reader = Reader::default();
        let slow = Cursor::Starting(0);
        assert!(reader.claim(0));
        reader.handle(now, Some(&read("", None, vec![])), POLL);
        let (_, slow) = drain(&reader, slow, now);

        // More than FAN_OUT items while `slow` yields none of them.
        let mut last = 0;
        while (last as usize) < FAN_OUT + 10 {
            let next = last + 40;
            assert!(reader.claim(1));
            let (top, entries) = log(last, next);
            reader.handle(now, Some(&read("7", top, entries)), POLL);
            last = next;
        }
        let (items, _) = drain(&reader, slow, now);
        assert_eq!(
            items,
            [(format!("7.{}", last - 1), true)],
            "behind by more than it keeps: the current state, resync"
        );

        // A new observer: it reads first, then yields the current state.
        let new = Cursor::Starting(reader.reads());
        assert_eq!(reader.step(new, 1, now), ReaderStep::Read);
        assert!(reader.claim(1));
        reader.handle(now, Some(&read("7", log(last - 1, last).0, vec![])), POLL);
        let (items, _) = drain(&reader, new, now);
        assert_eq!(items, [(format!("7.{}", last - 1), true)]);
    }

    /// One observer of the property test: its cursor and what it yielded.
    struct Seen {
        cursor: Cursor,
        versions: Vec<(u64, bool)>,
    }

    proptest::proptest! {
        /// Observers that start at any time, reads that bring any number
        /// of changes, fail or are abandoned, in any interleaving: one read
        /// at a time; each observer starts with a `resync`, then yields
        /// every change in order with no hole, or a `resync` of the
        /// current state after falling behind; and once every read is
        /// done, each has yielded the log's last change.
        #[test]
        fn observers_yield_every_change_in_order_or_a_resync(ops in proptest::collection::vec(0u8..=255, 1..200)) {
            let now = Instant::now();
            let mut reader = Reader::default();
            let mut observers: Vec<Seen> = Vec::new();
            let mut claimant: Option<usize> = None;
            let mut changes = 0u64;
            let mut logged = 0u64;
            for op in ops {
                let who = usize::from(op >> 4);
                match op % 8 {
                    0 if observers.len() < 4 => observers.push(Seen {
                        cursor: Cursor::Starting(reader.reads()),
                        versions: Vec::new(),
                    }),
                    1 => changes += 1,
                    2 | 3 if claimant.is_some() => {
                        // The claimant's read: up to 40 new changes, or a
                        // failure.
                        claimant = None;
                        if op % 8 == 3 && op & 0x10 != 0 {
                            reader.handle(now, None, POLL);
                        } else {
                            let more = u64::from(op >> 3) % 40;
                            let (top, entries) = if logged == 0 && more == 0 {
                                (None, Vec::new())
                            } else if more == 0 {
                                (log(logged - 1, logged).0, Vec::new())
                            } else {
                                log(logged, logged + more)
                            };
                            let first = reader.after().is_none();
                            // A first read returns the current state only.
                            let entries = if first { Vec::new() } else { entries };
                            let term = if top.is_some() { "7" } else { "" };
                            reader.handle(now, Some(&read(term, top, entries)), POLL);
                            if !first {
                                logged += more;
                            }
                        }
                    }
                    4 if claimant.is_some() => {
                        claimant = None;
                        reader.abandon();
                    }
                    _ if !observers.is_empty() => {
                        let i = who % observers.len();
                        let o = &mut observers[i];
                        match reader.step(o.cursor, changes, now) {
                            ReaderStep::Yield(item, next) => {
                                o.cursor = next;
                                // The log's place: 7.i is change i, 0.0 before it.
                                let seq = if item.version.term == 0 { 0 } else { item.version.seq + 1 };
                                let versions = &mut o.versions;
                                if versions.is_empty() {
                                    proptest::prop_assert!(item.resync, "starts with the state");
                                } else if !item.resync {
                                    let (last, _) = versions[versions.len() - 1];
                                    proptest::prop_assert_eq!(seq, last + 1, "no hole");
                                }
                                versions.push((seq, item.resync));
                            }
                            ReaderStep::Read => {
                                proptest::prop_assert!(claimant.is_none(), "one read at a time");
                                proptest::prop_assert!(reader.claim(changes));
                                claimant = Some(i);
                            }
                            ReaderStep::Wait(_) => {}
                        }
                    }
                    _ => {}
                }
            }
            // Every read done: each observer catches up with the log.
            if claimant.take().is_some() {
                reader.abandon();
            }
            for o in &mut observers {
                for _ in 0..200 {
                    match reader.step(o.cursor, changes, now) {
                        ReaderStep::Yield(item, next) => {
                            o.cursor = next;
                            o.versions.push((item.version.seq + 1, item.resync));
                        }
                        ReaderStep::Read => {
                            proptest::prop_assert!(reader.claim(changes));
                            let top = (logged > 0).then(|| log(logged - 1, logged).0).flatten();
                            let term = if top.is_some() { "7" } else { "" };
                            reader.handle(now, Some(&read(term, top, Vec::new())), POLL);
                        }
                        ReaderStep::Wait(_) => break,
                    }
                }
                if logged > 0 {
                    proptest::prop_assert_eq!(o.versions.last().map(|v| v.0), Some(logged));
                }
            }
        }
    }

    #[test]
    fn an_abandoned_read_lets_another_observer_read() {
        let now = Instant::now();
        let mut reader = Reader::default();
        assert!(reader.claim(0));
        assert_eq!(
            reader.step(Cursor::Starting(0), 0, now),
            ReaderStep::Wait(None)
        );
        reader.abandon();
        assert_eq!(reader.step(Cursor::Starting(0), 0, now), ReaderStep::Read);
        assert!(reader.claim(0));
    }
}
