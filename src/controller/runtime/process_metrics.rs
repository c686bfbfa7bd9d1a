//! The `process_*` metrics every Prometheus client library exports (CPU,
//! memory, file descriptors, threads, start time), read from /proc/self at
//! scrape time. Elsewhere than Linux there is no /proc: nothing is exported.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
    registry::Unit,
};

/// Clock ticks per second in /proc/<pid>/stat: USER_HZ, 100 in the Linux
/// ABI on every architecture Kubernetes runs on.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Default)]
pub(in crate::controller) struct ProcessCollector;

/// One reading of /proc/self.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::controller) struct ProcessSample {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub threads: u64,
    pub start_time_seconds: f64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
}

impl ProcessSample {
    pub(in crate::controller) fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        Self::parse(&stat, &status, &boot, &limits, open_fds)
    }

    /// From the text of /proc/self/stat, /proc/self/status, /proc/stat and
    /// /proc/self/limits.
    pub(in crate::controller) fn parse(
        stat: &str,
        status: &str,
        boot: &str,
        limits: &str,
        open_fds: u64,
    ) -> Option<Self> {
        // The command name may hold spaces and parentheses: fields start
        // after the last ')'. The first after it is field 3 (state).
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        let ticks = field(14)? + field(15)?;
        let threads = field(20)?;
        let start_ticks = field(22)?;
        let virtual_bytes = field(23)?;
        let resident_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?;
        let boot_time =
            boot.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse::<u64>().ok())?;
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|soft| soft.parse::<u64>().ok());
        Some(Self {
            cpu_seconds: ticks as f64 / TICKS_PER_SECOND,
            resident_bytes: resident_kib * 1024,
            virtual_bytes,
            threads,
            start_time_seconds: boot_time as f64 + start_ticks as f64 / TICKS_PER_SECOND,
            open_fds,
            max_fds,
        })
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = ProcessSample::read() else { return Ok(()) };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, Option<Unit>, f64); 5] = [
            ("process_resident_memory", "Resident memory size", Some(Unit::Bytes), s.resident_bytes as f64),
            ("process_virtual_memory", "Virtual memory size", Some(Unit::Bytes), s.virtual_bytes as f64),
            ("process_threads", "OS threads in the process", None, s.threads as f64),
            (
                "process_start_time",
                "Start time of the process since the unix epoch",
                Some(Unit::Seconds),
                s.start_time_seconds,
            ),
            ("process_open_fds", "Open file descriptors", None, s.open_fds as f64),
        ];
        for (name, help, unit, value) in gauges {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?)?;
        }
        if let Some(max) = s.max_fds {
            let g = ConstGauge::new(max as f64);
            g.encode(encoder.encode_descriptor(
                "process_max_fds",
                "Limit of open file descriptors",
                None,
                g.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let stat = "42 (tokio (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 123456789 2000 \
                    18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        let status = "Name:\tbulkhead\nVmRSS:\t   8000 kB\nThreads:\t7\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1048576              1048576              files\n";
        let s = ProcessSample::parse(stat, status, boot, limits, 9).expect("parses");
        assert_eq!(
            s,
            ProcessSample {
                cpu_seconds: 3.0,
                resident_bytes: 8_192_000,
                virtual_bytes: 123_456_789,
                threads: 7,
                start_time_seconds: 1_700_000_010.0,
                open_fds: 9,
                max_fds: Some(1_048_576),
            }
        );
        assert_eq!(ProcessSample::parse("garbage", status, boot, limits, 9), None);
    }

    #[test]
    fn this_process_reads_as_started_recently_with_memory_and_threads() {
        let s = ProcessSample::read().expect("/proc/self on Linux");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
        assert!(s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 3600.0, "{s:?} at {now}");
        assert!(s.resident_bytes > 1 << 20 && s.threads >= 1 && s.open_fds >= 3, "{s:?}");
    }
}
