//! Spans of time written into messages as a person and Prometheus write
//! them (90s, 30m, 6h, 7d); each reads back as the same span through the
//! one duration grammar of the flags (`crate::duration`).

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
    use std::time::Duration;

    use super::*;
    use crate::duration::whole_seconds;

    #[test]
    fn spans_are_written_in_the_largest_whole_unit() {
        assert_eq!(
            (human_seconds(604_800), human_seconds(90), human_seconds(120), human_seconds(5_400)),
            ("7d".into(), "90s".into(), "2m".into(), "90m".into())
        );
    }

    #[test]
    fn a_written_span_reads_back_as_the_same_span() {
        for s in [1, 59, 90, 120, 3_600, 5_400, 86_400, 604_800, 1_209_600, 700_000] {
            assert_eq!(whole_seconds(&human_seconds(s)), Ok(Duration::from_secs(s)), "{s}s");
        }
    }
}
