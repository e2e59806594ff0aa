//! `redlease status KEY`: the lock's remaining time, the fence counter and
//! the holder record, read with plain `PTTL`, `GET` and `MGET` on the
//! stored names (no MULTI/EXEC, so the README's least-privilege ACL is
//! enough). The lock's value is read only to tell a waiting multi-key
//! lease's reservation (`<token>:r<age>`, docs/PROTOCOL.md) from a hold;
//! the owner token in it is neither kept nor shown.
//!
//! `redlease status --permits N KEY`: the same for each slot of KEY's
//! semaphore, and the permit count it is in use with. The slots' values
//! (owner tokens) are never read either.

use std::time::Duration;

use redis::{Connection, RedisResult, Value};
use serde::Serialize;

use crate::cli::{self, exit, StatusArgs};
use crate::connect::{open, TIMEOUT};
use crate::duration::human;
use crate::holder::Holder;
use crate::output::{json, print, Out};
use crate::{describe_redis, Target};

/// Exit code of `status` for a free key (0 is held).
const FREE: u8 = 1;

/// What `status` found; its JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Status {
    held: bool,
    /// `None` when not held, or held without an expiry.
    remaining_ms: Option<u64>,
    /// `None` when the key was never locked.
    fence: Option<u64>,
    /// Who holds it, when held and the holder recorded it for this grant.
    holder: Option<Holder>,
    /// The reservation of a waiting multi-key lease, when the lock's value
    /// is one (then `held` is false: a reservation has no fence, and no
    /// store accepts it). Only a reserved key has the JSON field, so every
    /// other report stays as it was.
    #[serde(rename = "reserved", skip_serializing_if = "Option::is_none")]
    reservation: Option<Reservation>,
}

/// A key reserved by a waiting multi-key lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Reservation {
    /// `None` without an expiry (a reservation always has one; a value
    /// written by hand may not).
    remaining_ms: Option<u64>,
}

/// What `status --permits` found; its JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct PermitsStatus {
    /// Any permit is held.
    held: bool,
    /// The count asked for (`--permits`).
    permits: u32,
    /// The count the semaphore is in use with (its record in Redis), when
    /// there is one.
    permits_in_use: Option<u32>,
    /// How many permits are held.
    held_permits: usize,
    /// Slots `0..max(permits, in_use)`, each as a lock's status.
    slots: Vec<Slot>,
}

/// A slot of a semaphore: never reserved, so its object is a lock's,
/// after its number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Slot {
    slot: u32,
    #[serde(flatten)]
    status: Status,
}

impl PermitsStatus {
    fn new(permits: u32, in_use: Option<u32>, slots: Vec<Status>) -> Self {
        let held_permits = slots.iter().filter(|s| s.held).count();
        let slots = (0..).zip(slots).map(|(slot, status)| Slot { slot, status });
        PermitsStatus {
            held: held_permits > 0,
            permits,
            permits_in_use: in_use,
            held_permits,
            slots: slots.collect(),
        }
    }
}

/// One lease's reply: `PTTL`, fence counter, holder record.
type SlotReply = (i64, Option<String>, Option<String>);

/// Shows `args.key`'s status; `Err` is the exit code of a failure already
/// reported.
pub(crate) fn status(target: Target, args: &StatusArgs, out: Out) -> Result<u8, u8> {
    let key = args.key.as_str();
    // The permit count in use, the replies, and whether the lock is only
    // reserved.
    let read = || -> RedisResult<(Option<u32>, Vec<SlotReply>, bool)> {
        let mut conn = open(&target.client, TIMEOUT)?;
        let Some(permits) = args.permits else {
            let names = ["lock", "lock-fence", "lock-holder"].map(|kind| target.name(kind, key));
            let replies = read_slots(&mut conn, std::slice::from_ref(&names))?;
            // Apart from the pipeline, so that an error here (a value of
            // another type, which no locker writes) leaves the key "held",
            // as before reservations were told apart.
            let reserved = replies[0].0 != -2
                && redis::cmd("GET")
                    .arg(&names[0])
                    .query::<Option<Vec<u8>>>(&mut conn)
                    .is_ok_and(|value| value.as_deref().is_some_and(is_reservation));
            return Ok((None, replies, reserved));
        };
        let stored: Option<String> = redis::cmd("GET")
            .arg(target.name("sem-permits", key))
            .query(&mut conn)?;
        // A count the library could have written; a larger one in use may
        // hold slots past `permits`.
        let in_use = stored.as_deref().and_then(|n| cli::permits(n).ok());
        let names: Vec<_> = (0..permits.max(in_use.unwrap_or(0)))
            .map(|i| ["sem", "sem-fence", "sem-holder"].map(|kind| target.slot_name(kind, key, i)))
            .collect();
        Ok((in_use, read_slots(&mut conn, &names)?, false))
    };
    let (what, fence_counter) = match args.permits {
        Some(_) => ("semaphore's status", "a slot's fence counter"),
        None => ("lock's status", "the fence counter"),
    };
    let (in_use, replies, reserved) =
        read().map_err(|e| target.unreadable(out, what, describe_redis(&e)))?;
    let mut slots = Vec::with_capacity(replies.len());
    for (pttl, fence, holder) in replies {
        let Ok(fence) = fence.map(|f| f.parse::<u64>()).transpose() else {
            out.fatal(format_args!(
                "{fence_counter} in Redis is not a decimal integer"
            ));
            return Err(exit::UNAVAILABLE);
        };
        slots.push(slot_status(pttl, fence, holder.as_deref(), reserved));
    }
    // With --permits: when any permit is held.
    let held = slots.iter().any(|s| s.held);
    let report = match args.permits {
        None if args.json => json(&slots[0]) + "\n",
        None => text(&slots[0]),
        Some(permits) if args.json => json(&PermitsStatus::new(permits, in_use, slots)) + "\n",
        Some(permits) => permits_text(&PermitsStatus::new(permits, in_use, slots)),
    };
    print(&[report.as_bytes()]);
    Ok(if held { 0 } else { FREE })
}

/// The `PTTL` of each lease of `names` (`[lease, fence counter, holder
/// record]`), its fence counter and its holder record in one round trip,
/// not a transaction (a lease can change in between, which the holder
/// record's fence check tolerates). The records are optional: a user
/// whose ACL lacks their names still gets the rest (the pipeline's errors
/// come one a command). A free lease's record is read too, and not shown.
fn read_slots(conn: &mut Connection, names: &[[String; 3]]) -> RedisResult<Vec<SlotReply>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for [lease, _, _] in names {
        pipe.cmd("PTTL").arg(lease);
    }
    let [fences, records] = [1, 2].map(|i| names.iter().map(|n| &n[i]).collect::<Vec<_>>());
    pipe.cmd("MGET").arg(fences).cmd("MGET").arg(records);
    let mut replies: Vec<RedisResult<Value>> = pipe.query(conn)?;
    let holders: Vec<Option<String>> = match replies.pop() {
        Some(Ok(records)) => redis::from_redis_value(records).unwrap_or_default(),
        _ => Vec::new(),
    };
    let fences: Vec<Option<String>> = match replies.pop() {
        Some(fences) => redis::from_redis_value(fences?)?,
        None => Vec::new(),
    };
    let (mut fences, mut holders) = (fences.into_iter(), holders.into_iter());
    replies
        .into_iter()
        .map(|pttl| {
            let (fence, holder) = (fences.next().flatten(), holders.next().flatten());
            Ok((redis::from_redis_value(pttl?)?, fence, holder))
        })
        .collect()
}

/// A lock's (or a slot's) status from its `PTTL`, its fence counter and
/// its holder record: the record counts only for the latest grant. A key
/// `reserved` by a waiting multi-key lease is not held (it has no fence
/// or holder of its own): it has the reservation's time left instead.
fn slot_status(pttl: i64, fence: Option<u64>, holder: Option<&str>, reserved: bool) -> Status {
    // PTTL: -2 no such key, -1 no expiry, otherwise milliseconds left.
    let held = pttl != -2 && !reserved;
    let left = u64::try_from(pttl).ok();
    Status {
        held,
        remaining_ms: left.filter(|_| held),
        fence,
        holder: holder
            .and_then(Holder::decode)
            .filter(|h| held && Some(h.fence) == fence),
        reservation: reserved.then_some(Reservation { remaining_ms: left }),
    }
}

/// Whether a lock's value is a waiting multi-key lease's reservation,
/// `<token>:r<age>`, by the scripts' own rule: `r` right after the first
/// colon (a hold is `<token>:<fence>`).
fn is_reservation(value: &[u8]) -> bool {
    value
        .iter()
        .position(|&b| b == b':')
        .is_some_and(|colon| value.get(colon + 1) == Some(&b'r'))
}

/// A lease's time left, `ms` (`None`: no expiry), with `suffix` after a
/// time.
fn left(ms: Option<u64>, suffix: &str) -> String {
    ms.map_or_else(
        || "no expiry (not set by redlease)".to_owned(),
        |ms| format!("{}{suffix}", human(Duration::from_millis(ms))),
    )
}

/// `pid 77 on web-1 running backup`
fn holder_text(h: &Holder) -> String {
    let host = if h.host.is_empty() { "?" } else { &h.host };
    format!("pid {} on {host} running {}", h.pid, h.command)
}

/// The held slots, one a line; free ones are only counted (the JSON has
/// every slot with its fence).
fn permits_text(s: &PermitsStatus) -> String {
    let mut report = format!("held:      {} of {} permits\n", s.held_permits, s.permits);
    if let Some(in_use) = s.permits_in_use.filter(|&n| n != s.permits) {
        report.push_str(&format!(
            "in use:    with {in_use} permits; runs with --permits {} are refused until \
             every permit is released\n",
            s.permits
        ));
    }
    for Slot { slot, status } in s.slots.iter().filter(|s| s.status.held) {
        let remaining = left(status.remaining_ms, " left");
        let fence = status.fence.map_or("none".into(), |f| f.to_string());
        let holder = status
            .holder
            .as_ref()
            .map_or("holder not recorded".into(), holder_text);
        let label = format!("slot {slot}:");
        report += &format!("{label:<10} {remaining}, fence {fence}, {holder}\n");
    }
    report
}

fn text(s: &Status) -> String {
    let (held, remaining) = match s.held {
        true => ("yes", left(s.remaining_ms, "")),
        false => ("no", "-".to_owned()),
    };
    let fence = s
        .fence
        .map_or_else(|| "none (never locked)".to_owned(), |f| f.to_string());
    let reserved = s.reservation.as_ref().map_or_else(String::new, |r| {
        let left = left(r.remaining_ms, " left unless renewed");
        format!("reserved:  by a waiting multi-key lease, {left}\n")
    });
    let holder = match (&s.holder, s.held) {
        (Some(h), _) => format!("holder:    {}\n", holder_text(h)),
        (None, true) => "holder:    not recorded\n".to_owned(),
        (None, false) => String::new(),
    };
    format!("held:      {held}\n{reserved}remaining: {remaining}\nfence:     {fence}\n{holder}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shapes() {
        let held = Status {
            held: true,
            remaining_ms: Some(1234),
            fence: Some(1_700_000_000_000_001),
            holder: Some(Holder {
                fence: 1_700_000_000_000_001,
                host: "web-1".into(),
                pid: 77,
                command: "backup".into(),
            }),
            reservation: None,
        };
        assert_eq!(
            json(&held),
            r#"{"held":true,"remaining_ms":1234,"fence":1700000000000001,"holder":{"host":"web-1","pid":77,"command":"backup"}}"#
        );
        let free = Status {
            held: false,
            remaining_ms: None,
            fence: None,
            holder: None,
            reservation: None,
        };
        assert_eq!(
            json(&free),
            r#"{"held":false,"remaining_ms":null,"fence":null,"holder":null}"#
        );
    }

    #[test]
    fn text_shapes() {
        let free = Status {
            held: false,
            remaining_ms: None,
            fence: Some(7),
            holder: None,
            reservation: None,
        };
        assert_eq!(text(&free), "held:      no\nremaining: -\nfence:     7\n");
        let held = Status {
            held: true,
            remaining_ms: Some(22_800),
            fence: Some(7),
            holder: None,
            reservation: None,
        };
        assert_eq!(
            text(&held),
            "held:      yes\nremaining: 22.8s\nfence:     7\nholder:    not recorded\n"
        );
    }

    #[test]
    fn a_reserved_key_is_not_held_and_says_so_with_the_reservations_time() {
        let reserved = slot_status(612, Some(7), None, true);
        assert!(!reserved.held);
        assert_eq!(
            json(&reserved),
            r#"{"held":false,"remaining_ms":null,"fence":7,"holder":null,"reserved":{"remaining_ms":612}}"#
        );
        assert_eq!(
            text(&reserved),
            "held:      no\n\
             reserved:  by a waiting multi-key lease, 612ms left unless renewed\n\
             remaining: -\n\
             fence:     7\n"
        );
        let by_hand = slot_status(-1, None, None, true);
        assert_eq!(
            json(&by_hand),
            r#"{"held":false,"remaining_ms":null,"fence":null,"holder":null,"reserved":{"remaining_ms":null}}"#
        );
        assert_eq!(
            text(&by_hand),
            "held:      no\n\
             reserved:  by a waiting multi-key lease, no expiry (not set by redlease)\n\
             remaining: -\n\
             fence:     none (never locked)\n"
        );
    }

    #[test]
    fn only_an_r_right_after_the_first_colon_makes_a_reservation() {
        for value in ["0123abcd:r1700000000000000", "t:r", "ab:r12"] {
            assert!(is_reservation(value.as_bytes()), "{value}");
        }
        for value in [
            "0123abcd:1700000000000001",
            "tok",
            "",
            "tok:",
            "r:5",
            "tok:5:r6",
        ] {
            assert!(!is_reservation(value.as_bytes()), "{value}");
        }
        assert!(!is_reservation(b"\xff:\xfe"));
    }

    fn two_of_three() -> PermitsStatus {
        let free = Status {
            held: false,
            remaining_ms: None,
            fence: Some(4),
            holder: None,
            reservation: None,
        };
        PermitsStatus::new(
            3,
            Some(3),
            vec![
                Status {
                    held: true,
                    remaining_ms: Some(4_200),
                    fence: Some(9),
                    holder: Some(Holder {
                        fence: 9,
                        host: "web-1".into(),
                        pid: 77,
                        command: "backup".into(),
                    }),
                    reservation: None,
                },
                free,
                Status {
                    held: true,
                    remaining_ms: Some(1_100),
                    fence: Some(2),
                    holder: None,
                    reservation: None,
                },
            ],
        )
    }

    #[test]
    fn permits_json_lists_every_slot() {
        assert_eq!(
            json(&two_of_three()),
            concat!(
                r#"{"held":true,"permits":3,"permits_in_use":3,"held_permits":2,"slots":["#,
                r#"{"slot":0,"held":true,"remaining_ms":4200,"fence":9,"holder":{"host":"web-1","pid":77,"command":"backup"}},"#,
                r#"{"slot":1,"held":false,"remaining_ms":null,"fence":4,"holder":null},"#,
                r#"{"slot":2,"held":true,"remaining_ms":1100,"fence":2,"holder":null}]}"#
            )
        );
    }

    #[test]
    fn permits_text_shows_the_held_slots_and_a_count_in_use_that_differs() {
        let mut status = two_of_three();
        assert_eq!(
            permits_text(&status),
            "held:      2 of 3 permits\n\
             slot 0:    4.2s left, fence 9, pid 77 on web-1 running backup\n\
             slot 2:    1.1s left, fence 2, holder not recorded\n"
        );
        let free = status.slots.into_iter().map(|s| Status {
            held: false,
            ..s.status
        });
        status = PermitsStatus::new(2, Some(3), free.collect());
        assert_eq!(
            permits_text(&status),
            "held:      0 of 2 permits\n\
             in use:    with 3 permits; runs with --permits 2 are refused until every \
             permit is released\n"
        );
    }

    #[test]
    fn a_stored_count_counts_only_within_the_librarys_bounds() {
        assert_eq!(cli::permits("3"), Ok(3));
        for bad in ["0", "1025", "-1", "x", ""] {
            assert!(cli::permits(bad).is_err(), "{bad:?}");
        }
    }
}
