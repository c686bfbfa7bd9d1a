//! Durations as every flag reads them, one grammar for all: a number and a
//! unit, or several (`1h30m`, as Prometheus and Go write them): `ms`, `s`,
//! `m`, `h`, `d`, `w`; a number may have a fraction (`1.5s`). A bare `0`
//! needs no unit; any other bare number is refused (is `--window 7` seven
//! seconds or seven days?).
//!
//! What 0 means is the flag's to say, and each says one of two things
//! ([`off_or_duration`], [`positive`], [`whole_seconds`]): the limit is off,
//! where that is safe, or the value is refused at start (clap's message
//! names the flag).

use std::time::Duration;

const EXAMPLES: &str = "a duration such as 500ms, 30s, 15m, 1h30m, 7d or 2w";

/// A duration in the grammar above; 0 is `Duration::ZERO`.
pub fn parse(s: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("{s:?}: {why}; expected {EXAMPLES}");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad("empty"));
    }
    let mut rest = s;
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_end);
        let unit_end = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        if number.is_empty() {
            return Err(bad("a unit without a number"));
        }
        let per_unit: u128 = match unit {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "d" => 86_400 * 1_000_000_000,
            "w" => 604_800 * 1_000_000_000,
            "" => return Err(bad("a number without a unit")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
            return Err(bad(&format!("{number:?} is not a number")));
        }
        let whole: u128 = whole.parse().map_err(|_| bad("too long"))?;
        let mut part = whole.checked_mul(per_unit).ok_or_else(|| bad("too long"))?;
        // Digits past the 18th change nothing at nanosecond precision, and
        // 18 keep `f * per_unit` within u128.
        let digits = fraction.get(..fraction.len().min(18)).unwrap_or(fraction);
        if !digits.is_empty() {
            let scale = 10u128.pow(digits.len() as u32);
            let f: u128 = digits.parse().map_err(|_| bad("not a number"))?;
            part = part.checked_add(f * per_unit / scale).ok_or_else(|| bad("too long"))?;
        }
        nanos = nanos.checked_add(part).ok_or_else(|| bad("too long"))?;
        rest = next;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| bad("too long"))?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// A limit whose 0 turns it off (only where waiting without it is safe).
pub fn off_or_duration(s: &str) -> Result<Duration, String> {
    parse(s)
}

/// A duration that must be longer than 0: off would be unsafe here, or
/// meaningless, so 0 is refused rather than read as "off" or "at once".
pub fn positive(s: &str) -> Result<Duration, String> {
    match parse(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be longer than 0 (0 does not turn this off)")),
        d => Ok(d),
    }
}

/// A whole number of seconds, at least 1 (windows and steps of Prometheus queries).
pub fn whole_seconds(s: &str) -> Result<Duration, String> {
    let d = positive(s)?;
    if d.subsec_nanos() != 0 {
        return Err(format!("{s:?}: must be a whole number of seconds (at least 1s)"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_grammar_reads_every_form_the_flags_and_prometheus_write() {
        let secs = Duration::from_secs;
        for (text, want) in [
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("250ms", Duration::from_millis(250)),
            ("1.5s", Duration::from_millis(1500)),
            ("90s", secs(90)),
            ("2m", secs(120)),
            ("1h30m", secs(5400)),
            ("1h30m15s", secs(5415)),
            ("6h", secs(21_600)),
            ("7d", secs(604_800)),
            ("2w", secs(1_209_600)),
            ("1m500ms", Duration::from_millis(60_500)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
        for bad in ["", "7", "3", "d", "1.5", "-1s", "1h 30m", "7y", "1.s", ".5s", "1..5s", "99999999999999999w", "s1"]
        {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains("expected a duration such as"), "{bad}: {err}");
        }
    }

    #[test]
    fn zero_is_off_or_refused_never_a_tiny_timer() {
        assert_eq!(off_or_duration("0"), Ok(Duration::ZERO));
        for zero in ["0", "0s", "0ms", "0h0m"] {
            assert!(positive(zero).expect_err(zero).contains("must be longer than 0"), "{zero}");
            assert!(whole_seconds(zero).is_err(), "{zero}");
        }
        assert_eq!(positive("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(whole_seconds("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(whole_seconds("1500ms").expect_err("fraction").contains("whole number of seconds"));
    }
}
