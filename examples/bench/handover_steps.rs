//! The contention scenario's breakdown of a hand-over to another
//! process into its steps (docs/PROTOCOL.md §4.5), from the timestamps the
//! workers' lockers record (`redlease::probe`, feature `bench-hooks`):
//!
//! ```text
//! releaser: release called → release sent ─────────────▶ release replied
//!                                 │ (script, notification)
//! next:                           └▶ notice read → handled → waiter woken
//!                                    (→ claim sent → claim replied) → acquired
//! ```
//!
//! A lock's grant taken from its notice (docs/PROTOCOL.md §4.3) sends no
//! claim: its claim terms are 0, and `claimed` counts the others.

use std::collections::BTreeMap;

use super::contention::Rec;
use super::json::J;
use super::util;

/// One recorded step of a worker process.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    pub(crate) step: String,
    pub(crate) unix_ns: u64,
    pub(crate) thread: u64,
}

/// The worker's line for one mark: `T <step> <unix ns> <thread>`.
pub(crate) fn line(m: &redlease::probe::Mark) -> String {
    format!("T {} {} {}", m.step.name(), m.unix_ns, m.thread)
}

/// Parses the words after `T`.
pub(crate) fn parse(mut words: std::str::SplitWhitespace<'_>) -> Option<Mark> {
    let step = words.next()?.to_owned();
    let unix_ns = words.next()?.parse().ok()?;
    let thread = words.next()?.parse().ok()?;
    Some(Mark {
        step,
        unix_ns,
        thread,
    })
}

/// The terms, in the order they follow one another on the critical path,
/// and beside it the releaser's own round trip.
const TERMS: [&str; 8] = [
    "release_called_to_sent",
    "release_sent_to_notice_read",
    "notice_handling",
    "waiter_wake_up",
    "woken_to_claim_sent",
    "claim_round_trip",
    "claim_replied_to_returned",
    "releaser_round_trip",
];

/// The p50 of each term over the hand-overs `pairs` (previous holder, next
/// holder) between processes, in µs and in `idle_rtt_ns`; `None` without
/// marks.
pub(crate) fn breakdown(
    pairs: &[[Rec; 2]],
    marks: &BTreeMap<usize, Vec<Mark>>,
    idle_rtt_ns: u64,
) -> Option<J> {
    let mut terms: Vec<Vec<u64>> = vec![Vec::new(); TERMS.len()];
    let mut total = Vec::new();
    let mut claimed = 0;
    for [prev, next] in pairs.iter().filter(|[p, n]| p.process != n.process) {
        let Some(steps) = one(prev, next, marks) else {
            continue;
        };
        claimed += usize::from(steps[5] > 0);
        for (samples, ns) in terms.iter_mut().zip(steps) {
            samples.push(ns);
        }
        total.push((next.acquired - prev.release_called) * 1000);
    }
    if total.is_empty() {
        return None;
    }
    let woken = marks
        .values()
        .flatten()
        .filter(|m| m.step == "waiter_woken")
        .count();
    let mut fields: Vec<(&str, J)> = vec![
        ("hand_overs", J::from(total.len())),
        ("claimed", J::from(claimed)),
        (
            "waiter_wake_ups_per_acquisition",
            J::round(woken as f64 / (pairs.len() + 1) as f64, 2),
        ),
    ];
    for (name, samples) in TERMS.iter().zip(&terms) {
        fields.push((
            name,
            J::obj([
                ("p50_us", J::round(util::p50(samples) as f64 / 1000.0, 1)),
                (
                    "p50_idle_rtt",
                    util::in_rtt(util::p50(samples), idle_rtt_ns),
                ),
            ]),
        ));
    }
    fields.push(("total", util::summary_us(&total)));
    fields.push((
        "total_p50_idle_rtt",
        util::in_rtt(util::p50(&total), idle_rtt_ns),
    ));
    Some(J::obj(fields))
}

/// The terms of one hand-over, in ns, in [`TERMS`]' order.
fn one(prev: &Rec, next: &Rec, marks: &BTreeMap<usize, Vec<Mark>>) -> Option<[u64; 8]> {
    let (from, to) = (marks.get(&prev.process)?, marks.get(&next.process)?);
    let first = |ms: &[Mark], step: &str, after: u64, thread: Option<u64>| {
        ms.iter()
            .find(|m| m.step == step && m.unix_ns >= after && thread.is_none_or(|t| m.thread == t))
            .cloned()
    };
    let called = prev.release_called * 1000;
    let acquired = next.acquired * 1000;
    let sent = first(from, "release_sent", called, None)?;
    let replied = first(from, "release_replied", sent.unix_ns, Some(sent.thread))?;
    let read = first(to, "notice_read", sent.unix_ns, None)?;
    let handled = first(to, "notice_handled", read.unix_ns, Some(read.thread))?;
    // The claim, if any: the next holder's last acquire script before it
    // returned.
    let claim = to.iter().rev().find(|m| {
        m.step == "acquire_sent" && m.unix_ns <= acquired && m.unix_ns >= handled.unix_ns
    });
    let woken = |thread: Option<u64>, until: u64| {
        to.iter().rev().find(|m| {
            m.step == "waiter_woken"
                && thread.is_none_or(|t| m.thread == t)
                && (handled.unix_ns..=until).contains(&m.unix_ns)
        })
    };
    let (woken, claim, claimed) = match claim {
        Some(claim) => {
            let claimed = first(to, "acquire_replied", claim.unix_ns, Some(claim.thread))?;
            if claimed.unix_ns > acquired {
                return None;
            }
            let woken = woken(Some(claim.thread), claim.unix_ns)?.unix_ns;
            (woken, claim.unix_ns, claimed.unix_ns)
        }
        // Taken from the notice: the first waiter woken after it.
        None => {
            let woken = to.iter().find(|m| {
                m.step == "waiter_woken" && (handled.unix_ns..=acquired).contains(&m.unix_ns)
            })?;
            (woken.unix_ns, woken.unix_ns, woken.unix_ns)
        }
    };
    Some([
        sent.unix_ns.saturating_sub(called),
        read.unix_ns - sent.unix_ns,
        handled.unix_ns - read.unix_ns,
        woken - handled.unix_ns,
        claim - woken,
        claimed - claim,
        acquired.saturating_sub(claimed),
        replied.unix_ns - sent.unix_ns,
    ])
}

#[cfg(test)]
mod tests {
    use super::super::contention::Mode;
    use super::*;

    fn rec(process: usize, acquired_us: u64, release_called_us: u64) -> Rec {
        Rec {
            process,
            waiter: 0,
            slot: 0,
            fence: 1,
            mode: Mode::Exclusive,
            called: 0,
            acquired: acquired_us,
            release_called: release_called_us,
            released: release_called_us + 200,
        }
    }

    fn marks(list: &[(&str, u64, u64)]) -> Vec<Mark> {
        list.iter()
            .map(|&(step, us, thread)| Mark {
                step: step.to_owned(),
                unix_ns: us * 1000,
                thread,
            })
            .collect()
    }

    #[test]
    fn a_hand_over_between_processes_is_split_into_its_steps() {
        let prev = rec(0, 0, 1_000);
        let next = rec(1, 1_500, 4_000);
        let mut all = BTreeMap::new();
        all.insert(
            0,
            marks(&[("release_sent", 1_010, 7), ("release_replied", 1_200, 7)]),
        );
        all.insert(
            1,
            marks(&[
                // An earlier attempt of the same thread is not the claim.
                ("acquire_sent", 900, 3),
                ("acquire_replied", 950, 3),
                ("notice_read", 1_300, 9),
                ("notice_handled", 1_310, 9),
                ("waiter_woken", 1_330, 3),
                ("acquire_sent", 1_340, 3),
                ("acquire_replied", 1_480, 3),
            ]),
        );
        let steps = one(&prev, &next, &all).expect("every step is there");
        assert_eq!(
            steps.map(|ns| ns / 1000),
            [10, 290, 10, 20, 10, 140, 20, 190]
        );
        let j = breakdown(&[[prev, next]], &all, 100_000).expect("one hand-over");
        assert_eq!(j.get("hand_overs").and_then(J::as_f64), Some(1.0));
        assert_eq!(j.get("total_p50_idle_rtt").and_then(J::as_f64), Some(5.0));
    }

    #[test]
    fn a_grant_taken_from_its_notice_has_no_claim_terms() {
        let prev = rec(0, 0, 1_000);
        let next = rec(1, 1_400, 4_000);
        let mut all = BTreeMap::new();
        all.insert(
            0,
            marks(&[("release_sent", 1_010, 7), ("release_replied", 1_200, 7)]),
        );
        all.insert(
            1,
            marks(&[
                ("notice_read", 1_300, 9),
                ("notice_handled", 1_310, 9),
                ("waiter_woken", 1_330, 3),
            ]),
        );
        let steps = one(&prev, &next, &all).expect("every step is there");
        assert_eq!(steps.map(|ns| ns / 1000), [10, 290, 10, 20, 0, 0, 70, 190]);
        let j = breakdown(&[[prev, next]], &all, 100_000).expect("one hand-over");
        assert_eq!(j.get("claimed").and_then(J::as_f64), Some(0.0));
    }

    #[test]
    fn a_hand_over_within_a_process_or_without_marks_is_left_out() {
        let prev = rec(0, 0, 1_000);
        let same = rec(0, 1_500, 4_000);
        assert!(breakdown(&[[prev, same]], &BTreeMap::new(), 100_000).is_none());
        let other = rec(1, 1_500, 4_000);
        assert!(breakdown(&[[prev, other]], &BTreeMap::new(), 100_000).is_none());
    }
}
