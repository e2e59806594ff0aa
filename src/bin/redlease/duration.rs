//! Durations on the command line and short human-readable renderings.
//!
//! Accepted: bare seconds as `timeout(1)` and `flock -w` take them (`5`,
//! `1.5`), a number with a unit (`500ms`, `10s`, `2m`, `1h`, `1d`, also
//! `0.5s`), and several such parts in a row (`1m30s`, `1h 30m`); `forever`
//! for `--wait`. No crate of the field does all of this: `humantime` and
//! `jiff` refuse a bare number, and `humantime` refuses fractions.

use std::time::Duration;

/// Shortest lease accepted: below it every renewal would be a race with
/// the lease's own end (each command may take a quarter of the lease).
pub(crate) const MIN_LEASE: Duration = Duration::from_millis(100);

const UNITS: &str = "ms, s, m, h or d";

/// Parses a duration (see the module docs).
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("an empty duration: write e.g. 10s, 1.5s, 1m30s or 5 (seconds)".to_owned());
    }
    let too_large = || format!("'{trimmed}' is too large");
    let mut rest = trimmed;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (number, after) = split_while(rest, |c| c.is_ascii_digit() || c == '.');
        if number.is_empty() {
            return Err(format!(
                "'{trimmed}' is not a duration: expected a number before '{after}' \
                 (e.g. 10s, 1.5s, 1m30s, or 5 for seconds)"
            ));
        }
        let (unit, after) = split_while(after, |c| c.is_ascii_alphabetic());
        let nanos_per_unit: u128 = match unit {
            // A bare number is seconds, but only on its own: `1m30` is
            // more likely a typo than 1 minute 30 seconds.
            "" if number == trimmed => 1_000_000_000,
            "" => {
                return Err(format!(
                    "'{trimmed}': '{number}' has no unit; use {UNITS} (e.g. 1m30s)"
                ))
            }
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            other => {
                return Err(format!(
                    "'{trimmed}' has an unknown unit '{other}': use {UNITS} \
                     (500ms, 10s, 2m, 1h, 1d)"
                ))
            }
        };
        let nanos = scaled(number, nanos_per_unit)
            .ok_or_else(|| format!("'{trimmed}' is not a duration: '{number}' is not a number"))?;
        total = total.checked_add(nanos).ok_or_else(too_large)?;
        rest = after.trim_start();
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| too_large())?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// `s` split after its longest prefix of characters that `keep`.
fn split_while(s: &str, keep: impl Fn(char) -> bool) -> (&str, &str) {
    s.split_at(s.find(|c| !keep(c)).unwrap_or(s.len()))
}

/// `number` (digits, at most one `.`) times `per_unit` nanoseconds,
/// exactly, dropping digits below one nanosecond. `None` if it is not
/// such a number or too large.
fn scaled(number: &str, per_unit: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = whole.checked_mul(per_unit)?;
    let mut scale = per_unit;
    for digit in fraction.bytes() {
        scale /= 10;
        nanos = nanos.checked_add(u128::from(digit - b'0') * scale)?;
    }
    Some(nanos)
}

/// `--wait`: a duration, or `forever` for no deadline.
pub(crate) fn parse_wait(text: &str) -> Result<Duration, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(Duration::MAX);
    }
    parse(text).map_err(|e| format!("{e}, or 'forever'"))
}

/// `--lease`: a duration of at least [`MIN_LEASE`].
pub(crate) fn parse_lease(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d < MIN_LEASE {
        let (text, min) = (text.trim(), human(MIN_LEASE));
        return Err(format!(
            "'{text}' is shorter than the shortest lease, {min}: a lease that short \
             would be lost before its first renewal could be answered"
        ));
    }
    Ok(d)
}

/// A short rendering: `250ms`, `4.2s`, `3m05s`, `2h07m`, `forever`.
pub(crate) fn human(d: Duration) -> String {
    if d == Duration::MAX {
        return "forever".to_owned();
    }
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1_000, (ms % 1_000) / 100)
    } else if ms < 3_600_000 {
        let s = ms / 1_000;
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let m = ms / 60_000;
        format!("{}h{:02}m", m / 60, m % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Result<Duration, String> {
        Ok(Duration::from_millis(n))
    }

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), ms(500));
        assert_eq!(parse("10s"), ms(10_000));
        assert_eq!(parse("2m"), ms(120_000));
        assert_eq!(parse("1h"), ms(3_600_000));
        assert_eq!(parse("1d"), ms(86_400_000));
        assert_eq!(parse("0"), ms(0));
        assert_eq!(parse("0s"), ms(0));
    }

    #[test]
    fn bare_seconds_fractions_and_compounds() {
        assert_eq!(parse("5"), ms(5_000));
        assert_eq!(parse("1.5"), ms(1_500));
        assert_eq!(parse(".25"), ms(250));
        assert_eq!(parse("1.5s"), ms(1_500));
        assert_eq!(parse("0.1s"), ms(100));
        assert_eq!(parse("1.5h"), ms(5_400_000));
        assert_eq!(parse("1m30s"), ms(90_000));
        assert_eq!(parse("1h 30m"), ms(5_400_000));
        assert_eq!(parse("1d2h3m4s5ms"), ms(93_784_005));
        assert_eq!(parse(" 10s "), ms(10_000));
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            " ",
            "s",
            "1..5s",
            "1.5.2s",
            ".",
            "10x",
            "-1s",
            "1m30",
            "5 5",
            "1sec",
            "forever",
            "99999999999999999999999999999999999999999d",
            "18446744073709551615d",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn the_lease_has_a_minimum_with_a_reason() {
        assert!(parse_lease("0").is_err());
        let e = parse_lease("50ms").unwrap_err();
        assert!(e.contains("shortest lease, 100ms"), "{e}");
        assert_eq!(parse_lease("100ms"), ms(100));
        assert_eq!(parse_lease("0.1"), ms(100));
    }

    #[test]
    fn forever_only_for_wait() {
        assert_eq!(parse_wait("forever"), Ok(Duration::MAX));
        assert!(parse_lease("forever").is_err());
    }

    #[test]
    fn human_forms() {
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_millis(4_250)), "4.2s");
        assert_eq!(human(Duration::from_secs(185)), "3m05s");
        assert_eq!(human(Duration::from_secs(2 * 3600 + 7 * 60)), "2h07m");
        assert_eq!(human(Duration::MAX), "forever");
    }

    proptest! {
        #[test]
        fn never_panics(text in ".{0,40}") {
            let _ = parse(&text);
            let _ = parse_wait(&text);
            let _ = parse_lease(&text);
        }

        #[test]
        fn parts_add_up(
            d in 0u64..1000, h in 0u64..1000, m in 0u64..1000,
            s in 0u64..1000, milli in 0u64..1000, spaced: bool,
        ) {
            let sep = if spaced { " " } else { "" };
            let text = format!("{d}d{sep}{h}h{sep}{m}m{sep}{s}s{sep}{milli}ms");
            let expected = Duration::from_millis(
                (((d * 24 + h) * 60 + m) * 60 + s) * 1000 + milli,
            );
            prop_assert_eq!(parse(&text), Ok(expected));
        }

        #[test]
        fn fractions_of_seconds_are_exact(whole in 0u64..100_000, frac in 0u32..1000) {
            let text = format!("{whole}.{frac:03}");
            let expected = Duration::from_millis(whole * 1000 + u64::from(frac));
            prop_assert_eq!(parse(&text), Ok(expected));
            prop_assert_eq!(parse(&format!("{text}s")), Ok(expected));
        }

        #[test]
        fn human_renders_what_parse_reads_back_within_its_rounding(ms_in in 0u64..86_400_000) {
            let d = Duration::from_millis(ms_in);
            let back = parse(&human(d)).unwrap();
            // human() truncates: to 100 ms under a minute, to 1 s under an
            // hour, to 1 min above.
            let step = if ms_in < 1_000 { 0 } else if ms_in < 60_000 { 100 } else if ms_in < 3_600_000 { 1_000 } else { 60_000 };
            prop_assert!(back <= d && d - back <= Duration::from_millis(step), "{:?} -> {} -> {:?}", d, human(d), back);
        }
    }
}
