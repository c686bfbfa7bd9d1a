//! Spans of time as a person and Prometheus write them (90s, 30m, 6h, 7d,
//! 2w): read from flags, written into messages, and each written span reads
//! back as the same span.

use std::time::Duration;

/// A Prometheus-style duration: 90s, 30m, 6h, 7d, 2w (one unit).
pub fn parse_window(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?}: expected a duration such as 30s, 15m, 6h, 7d or 2w");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = s.split_at(split);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    match n.checked_mul(unit) {
        Some(0) | None => Err(bad()),
        Some(secs) => Ok(Duration::from_secs(secs)),
    }
}

/// A span of seconds as a person writes it (7d, 6h, 90s).
pub fn human_seconds(s: u64) -> String {
    // Days, not weeks: windows are written 7d, as the flags default to.
    for (unit, len) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if s >= len && s.is_multiple_of(len) {
            return format!("{}{unit}", s / len);
        }
    }
    format!("{s}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_like_prometheus_durations() {
        assert_eq!(parse_window("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_window("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_window("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in ["", "7", "d", "0s", "1.5h", "7y", "-1d", "99999999999999999w"] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
        assert_eq!(
            (human_seconds(604_800), human_seconds(90), human_seconds(120)),
            ("7d".into(), "90s".into(), "2m".into())
        );
    }

    #[test]
    fn a_written_span_reads_back_as_the_same_span() {
        for s in [1, 59, 90, 120, 3_600, 5_400, 86_400, 604_800, 1_209_600, 700_000] {
            assert_eq!(parse_window(&human_seconds(s)), Ok(Duration::from_secs(s)), "{s}s");
        }
    }
}
