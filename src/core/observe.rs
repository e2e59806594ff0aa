//! What an election's observer yields from each read (docs/PROTOCOL.md,
//! steps 1, 3 and 4), as a pure function of the last version yielded and
//! the read's reply, and when it reads next; no clock is read here.
//!
//! ```text
//!   first read ──▶ current state (resync)
//!   next reads ──▶ entries after `last`, in order ──▶ a lapse's vacancy
//!              └─▶ a gap (trimmed, restart, failover) ──▶ current state (resync)
//! ```

use std::time::{Duration, Instant};

use super::core::{earliest_of, FAILURE_BACKOFF};
use super::election::{Current, Leader, ReadReply, Version, READ_BATCH};
use super::lease::deadline_after;

/// One change of an election as an observer sees it
/// ([`Election::observe`](crate::Election::observe)).
///
/// Items come in version order. `resync` marks the current state yielded
/// instead of the changes before it: the first item, and after a gap (more
/// than 64 changes between two reads, or a log that lost entries: Redis
/// restarted without data, a failover). A leader that lapsed without
/// resigning is followed by its vacancy. Its `Debug` never shows a value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Observation {
    /// The version of this state.
    pub version: Version,
    /// The leader from this version on; `None`: vacant.
    pub leader: Option<Leader>,
    /// Whether changes before this one may have been skipped.
    pub resync: bool,
}

/// An observer's reading state: the last version it yielded, and when to
/// read next.
#[derive(Debug, Clone, Default)]
pub(crate) struct ObserveState {
    last: Option<Version>,
    /// Failed reads in a row, for the backoff.
    failures: usize,
}

impl ObserveState {
    /// The version to read the log's entries after (`None`: the first read
    /// asks for the current state only).
    pub(crate) fn after(&self) -> Option<Version> {
        self.last
    }

    /// The items of one read at `now`, and when to read next: at once when
    /// the read was a full batch, else at the leader's expiry (`+ 1 ms`,
    /// a lapse publishes nothing) or after `poll`, whichever comes first.
    pub(crate) fn handle_read(
        &mut self,
        now: Instant,
        read: &ReadReply,
        poll: Duration,
    ) -> (Vec<Observation>, Option<Instant>) {
        self.failures = 0;
        let current = read.current();
        let (items, more) = self.items(read, current.clone());
        let next = if more {
            Some(now)
        } else {
            let expiry = current
                .leader
                .as_ref()
                .and_then(|l| l.remaining)
                .and_then(|r| deadline_after(now, r + Duration::from_millis(1)));
            earliest_of(expiry, deadline_after(now, poll))
        };
        (items, next)
    }

    /// A read failed at `now`: when to read again (the backoff of the crate docs' "How it works").
    pub(crate) fn handle_failure(&mut self, now: Instant) -> Option<Instant> {
        let delay = FAILURE_BACKOFF[self.failures.min(FAILURE_BACKOFF.len() - 1)];
        self.failures += 1;
        deadline_after(now, delay)
    }

    fn items(&mut self, read: &ReadReply, current: Current) -> (Vec<Observation>, bool) {
        let Some(last) = self.last else {
            return (vec![self.resync(current)], false);
        };
        let mut items = Vec::new();
        match read.entries.first() {
            Some(first) if first.prev == Some(last) => {
                for entry in &read.entries {
                    let leader = current.leader.as_ref();
                    let leader = leader.filter(|leader| leader.version == entry.version);
                    let remaining = leader.and_then(|leader| leader.remaining);
                    items.push(Observation {
                        version: entry.version,
                        leader: entry.value.as_ref().map(|_| entry.leader(remaining)),
                        resync: false,
                    });
                    self.last = Some(entry.version);
                }
                if read.entries.len() == READ_BATCH {
                    return (items, true);
                }
            }
            Some(_) => return (vec![self.resync(current)], false),
            None => {
                let behind = match &read.top {
                    None => last != Version::default(),
                    // Older than `last`, other than by `last` being the
                    // vacancy synthesized for this top.
                    Some(top) => {
                        top.version < last && !(top.value.is_some() && top.version.next() == last)
                    }
                };
                if behind {
                    return (vec![self.resync(current)], false);
                }
            }
        }
        // A leader whose lease the same read found gone: its vacancy, once.
        if let Some(top) = &read.top {
            let lapsed = top.value.is_some() && current.version == top.version.next();
            if lapsed && self.last == Some(top.version) {
                items.push(Observation {
                    version: current.version,
                    leader: None,
                    resync: false,
                });
                self.last = Some(current.version);
            }
        }
        (items, false)
    }

    fn resync(&mut self, current: Current) -> Observation {
        self.last = Some(current.version);
        Observation {
            version: current.version,
            leader: current.leader,
            resync: true,
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests take one real instant, then move it by hand
pub(crate) mod tests {
    use redis::Value;

    use super::*;
    use crate::core::election::classify_read;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// A log entry `id` after `prev`: a leader with `value`, or a vacancy.
    pub(crate) fn entry(id: &str, prev: &str, value: Option<&str>) -> Value {
        let mut fields = vec![bulk("prev"), bulk(prev), bulk("leader")];
        fields.push(bulk(if value.is_some() { "1" } else { "0" }));
        if let Some(value) = value {
            fields.extend([bulk("value"), bulk(value)]);
        }
        Value::Array(vec![bulk(id), Value::Array(fields)])
    }

    /// A read: the lease's term (`""`: none), the top, the entries.
    pub(crate) fn read(term: &str, top: Option<Value>, entries: Vec<Value>) -> ReadReply {
        let pttl = if term.is_empty() { -2 } else { 900 };
        classify_read(&Value::Array(vec![
            bulk(term),
            Value::Int(pttl),
            top.unwrap_or(Value::Nil),
            Value::Array(entries),
        ]))
        .unwrap()
    }

    fn versions(items: &[Observation]) -> Vec<(String, bool, bool)> {
        items
            .iter()
            .map(|o| (o.version.to_string(), o.leader.is_some(), o.resync))
            .collect()
    }

    const POLL: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_item_is_the_current_state_marked_resync() {
        let now = Instant::now();
        let mut state = ObserveState::default();
        let top = entry("7-1", "7-0", Some("b"));
        let (items, next) = state.handle_read(now, &read("7", Some(top), vec![]), POLL);
        assert_eq!(versions(&items), [("7.1".into(), true, true)]);
        assert_eq!(items[0].leader.as_ref().unwrap().value, b"b");
        // The leader's expiry comes before the poll.
        assert_eq!(next, Some(now + Duration::from_millis(901)));
        assert_eq!(state.after(), Some(Version::new(7, 1)));
    }

    #[test]
    fn entries_after_last_are_yielded_in_order_with_their_links() {
        let now = Instant::now();
        let mut state = ObserveState::default();
        state.handle_read(now, &read("", None, vec![]), POLL);
        assert_eq!(state.after(), Some(Version::default()));
        let log = vec![
            entry("7-0", "0-0", Some("a")),
            entry("7-1", "7-0", Some("b")),
            entry("7-2", "7-1", None),
            entry("9-0", "7-2", Some("c")),
        ];
        let top = log[3].clone();
        let (items, next) = state.handle_read(now, &read("9", Some(top), log), POLL);
        assert_eq!(
            versions(&items),
            [
                ("7.0".into(), true, false),
                ("7.1".into(), true, false),
                ("7.2".into(), false, false),
                ("9.0".into(), true, false),
            ]
        );
        assert_eq!(
            items[3].leader.as_ref().unwrap().remaining,
            Some(Duration::from_millis(900))
        );
        assert_eq!(items[1].leader.as_ref().unwrap().remaining, None);
        assert!(next.is_some());
        // Nothing new: nothing yielded.
        let top = entry("9-0", "7-2", Some("c"));
        let (items, _) = state.handle_read(now, &read("9", Some(top), vec![]), POLL);
        assert!(items.is_empty());
    }

    #[test]
    fn a_lapse_is_yielded_once_as_the_vacancy_the_next_grant_logs() {
        let now = Instant::now();
        let mut state = ObserveState::default();
        let top = || entry("7-1", "7-0", Some("b"));
        state.handle_read(now, &read("7", Some(top()), vec![]), POLL);
        // The lease is gone: vacant at 7.2, once.
        let (items, next) = state.handle_read(now, &read("", Some(top()), vec![]), POLL);
        assert_eq!(versions(&items), [("7.2".into(), false, false)]);
        assert_eq!(next, Some(now + POLL));
        let (items, _) = state.handle_read(now, &read("", Some(top()), vec![]), POLL);
        assert!(items.is_empty(), "never twice");
        // The next grant logs that vacancy, then itself: the read after
        // 7.2 lists the grant only, linked to the vacancy yielded.
        let grant = entry("9-0", "7-2", Some("c"));
        let (items, _) = state.handle_read(now, &read("9", Some(grant.clone()), vec![grant]), POLL);
        assert_eq!(versions(&items), [("9.0".into(), true, false)]);
    }

    #[test]
    fn a_gap_or_a_lost_log_yields_only_the_current_state_marked_resync() {
        let now = Instant::now();
        let mut state = ObserveState::default();
        state.handle_read(
            now,
            &read("7", Some(entry("7-1", "7-0", Some("b"))), vec![]),
            POLL,
        );
        // Trimmed: the first entry after 7.1 does not link to it.
        let top = entry("9-3", "9-2", Some("d"));
        let (items, _) = state.handle_read(now, &read("9", Some(top.clone()), vec![top]), POLL);
        assert_eq!(versions(&items), [("9.3".into(), true, true)]);
        // The log is gone (a restart without data).
        let (items, _) = state.handle_read(now, &read("", None, vec![]), POLL);
        assert_eq!(versions(&items), [("0.0".into(), false, true)]);
        // A log older than what was seen (a failover that lost entries).
        let mut state = ObserveState::default();
        state.handle_read(
            now,
            &read("9", Some(entry("9-3", "9-2", Some("d"))), vec![]),
            POLL,
        );
        let old = entry("9-1", "9-0", Some("b"));
        let (items, _) = state.handle_read(now, &read("9", Some(old), vec![]), POLL);
        assert_eq!(versions(&items), [("9.1".into(), true, true)]);
    }

    #[test]
    fn a_full_batch_is_read_again_at_once_and_failures_back_off() {
        let now = Instant::now();
        let mut state = ObserveState::default();
        state.handle_read(now, &read("", None, vec![]), POLL);
        let mut log = vec![entry("5-0", "0-0", Some("v"))];
        for seq in 1..READ_BATCH {
            log.push(entry(
                &format!("5-{seq}"),
                &format!("5-{}", seq - 1),
                Some("v"),
            ));
        }
        let top = entry("5-99", "5-98", Some("v"));
        let (items, next) = state.handle_read(now, &read("5", Some(top), log), POLL);
        assert_eq!(items.len(), READ_BATCH);
        assert_eq!(next, Some(now));
        assert_eq!(state.handle_failure(now), Some(now + FAILURE_BACKOFF[0]));
        assert_eq!(state.handle_failure(now), Some(now + FAILURE_BACKOFF[1]));
    }

    #[test]
    fn an_observation_never_shows_the_value() {
        let now = Instant::now();
        let mut state = ObserveState::default();
        let top = entry("7-0", "0-0", Some("secret"));
        let (items, _) = state.handle_read(now, &read("7", Some(top), vec![]), POLL);
        assert!(!format!("{items:?}").contains("secret"));
    }
}
