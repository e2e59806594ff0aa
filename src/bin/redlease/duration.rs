//! Durations on the command line (`500ms`, `10s`, `2m`, `1h`, `0`, and
//! `forever` for `--wait`) and short human-readable renderings of them.

use std::time::Duration;

/// Parses `<digits><unit>` with unit `ms`, `s`, `m` or `h`; a bare `0` is
/// accepted as zero. Any other bare number is refused, so that `--wait 5`
/// cannot silently mean 5 ms or 5 hours.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' has no unit: write e.g. {text}s or {text}ms"))?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "'{text}' is not a duration: expected a whole number and a unit (500ms, 10s, 2m, 1h)"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is too large"))?;
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "'{text}' is not a whole number: use a smaller unit (1500ms rather than 1.5s)"
        ));
    }
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "'{text}' has an unknown unit '{unit}': use ms, s, m or h (500ms, 10s, 2m, 1h)"
            ))
        }
    };
    n.checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// `--wait`: a duration, or `forever` for no deadline.
pub(crate) fn parse_wait(text: &str) -> Result<Duration, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(Duration::MAX);
    }
    parse(text).map_err(|e| format!("{e}, or 'forever'"))
}

/// `--lease`: a duration of at least 1 ms.
pub(crate) fn parse_lease(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d.is_zero() {
        return Err("the lease must be at least 1ms".to_owned());
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

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "5",
            "s",
            "1.5s",
            "10x",
            "-1s",
            "1 s",
            "99999999999999999999s",
            "18446744073709551615h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_lease("0").is_err());
        assert!(parse_lease("0ms").is_err());
    }

    #[test]
    fn forever_only_for_wait() {
        assert_eq!(parse_wait("forever"), Ok(Duration::MAX));
        assert!(parse("forever").is_err());
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
}
