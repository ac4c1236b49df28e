//! cgperf's own `process_*` metrics, as every Prometheus client library
//! exports them (CPU seconds, resident and virtual memory, open and maximum
//! file descriptors, start time), read from `/proc/self` when a scrape or
//! push asks.
//!
//! Hand-read rather than through a crate: five numbers from three small
//! files and one directory, in the format `proc(5)` fixes; a general
//! `/proc` crate would bring far more than that.

use crate::exporter::families::{
    Family, Labels, PROCESS_CPU, PROCESS_MAX_FDS, PROCESS_OPEN_FDS, PROCESS_RESIDENT,
    PROCESS_START, PROCESS_VIRTUAL, Point, SelfMetrics,
};
use crate::process::split_stat;
use std::path::Path;

/// This process, whose figures are read from `/proc/self` each time a
/// scrape or push asks for them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Process;

impl SelfMetrics for Process {
    fn families(&self) -> Vec<(&'static Family, Vec<Point<'static>>)> {
        ProcessStats::read().families()
    }
}

/// The process's own figures; a field is `None` when its file could not be
/// read or parsed (the family is then left out, never invented).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, in bytes.
    pub resident_bytes: Option<f64>,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: Option<f64>,
    /// Open file descriptors (perf events included).
    pub open_fds: Option<f64>,
    /// The soft open-files limit.
    pub max_fds: Option<f64>,
    /// Start time, in seconds since the epoch.
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// This process's figures now.
    pub fn read() -> Self {
        Self::read_from(Path::new("/proc"), "self")
    }

    /// The figures of `/proc/<pid>` under `proc` (a directory laid out as
    /// `/proc`, for tests).
    pub fn read_from(proc: &Path, pid: &str) -> Self {
        let dir = proc.join(pid);
        // Bytes: the name cgperf runs under need not be UTF-8.
        let stat = std::fs::read(dir.join("stat")).ok();
        let stat = stat.as_deref().and_then(StatFields::parse);
        let boot_time = std::fs::read_to_string(proc.join("stat"))
            .ok()
            .and_then(|s| boot_time(&s));
        // SAFETY: sysconf has no preconditions.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let (ticks, page) = (
            (ticks > 0).then_some(ticks as f64),
            (page > 0).then_some(page as f64),
        );
        let open_fds = std::fs::read_dir(dir.join("fd"))
            .ok()
            .map(|entries| entries.count() as f64);
        let max_fds = std::fs::read_to_string(dir.join("limits"))
            .ok()
            .and_then(|l| soft_open_files_limit(&l));
        Self {
            cpu_seconds: stat.zip(ticks).map(|(s, t)| (s.utime + s.stime) as f64 / t),
            resident_bytes: stat.zip(page).map(|(s, p)| s.rss as f64 * p),
            virtual_bytes: stat.map(|s| s.vsize as f64),
            open_fds,
            max_fds,
            start_time_seconds: stat
                .zip(ticks)
                .zip(boot_time)
                .map(|((s, t), boot)| boot + s.starttime as f64 / t),
        }
    }
}

impl SelfMetrics for ProcessStats {
    fn families(&self) -> Vec<(&'static Family, Vec<Point<'static>>)> {
        [
            (&PROCESS_CPU, self.cpu_seconds),
            (&PROCESS_RESIDENT, self.resident_bytes),
            (&PROCESS_VIRTUAL, self.virtual_bytes),
            (&PROCESS_OPEN_FDS, self.open_fds),
            (&PROCESS_MAX_FDS, self.max_fds),
            (&PROCESS_START, self.start_time_seconds),
        ]
        .into_iter()
        // A figure /proc did not give is left out, never shown as 0.
        .filter_map(|(family, value)| Some((family, vec![Point::fixed(Labels::NONE, value?)])))
        .collect()
    }
}

/// The fields of `/proc/PID/stat` cgperf exports.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss: u64,
}

impl StatFields {
    /// Parses `/proc/PID/stat`, whose fields are counted from the last
    /// `)` ([`split_stat`]).
    fn parse(bytes: &[u8]) -> Option<Self> {
        let (_, rest) = split_stat(bytes)?;
        // rest starts at field 3 (state).
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Self {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
            vsize: field(23)?,
            rss: field(24)?,
        })
    }
}

/// `btime` of `/proc/stat`: boot time in seconds since the epoch.
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/PID/limits`.
fn soft_open_files_limit(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .strip_prefix("Max open files")?
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(f64::INFINITY);
    }
    soft.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let text = b"4242 (a) b\xff (c)) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 125 0 0 20 0 3 0 98765 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            StatFields::parse(text),
            Some(StatFields {
                utime: 250,
                stime: 125,
                starttime: 98765,
                vsize: 123456789,
                rss: 2048,
            })
        );
        assert_eq!(StatFields::parse(b"12 (x) S 1"), None);
        assert_eq!(StatFields::parse(b""), None);
    }

    #[test]
    fn limits_and_boot_time() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            1024                 524288               files     \n";
        assert_eq!(soft_open_files_limit(limits), Some(1024.0));
        assert_eq!(soft_open_files_limit("nothing"), None);
        assert_eq!(boot_time("cpu 1 2 3\nbtime 1700000000\n"), Some(1.7e9));
    }

    #[test]
    fn this_process_reads_whole() {
        let after = ProcessStats::read();
        let got = |v: Option<f64>| v.unwrap_or_else(|| panic!("missing in {after:?}"));
        assert!(got(after.open_fds) >= 3.0);
        assert!(got(after.resident_bytes) > 0.0 && got(after.virtual_bytes) > 0.0);
        assert!(got(after.max_fds) >= got(after.open_fds));
        assert!(got(after.cpu_seconds) >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        let start = got(after.start_time_seconds);
        assert!(
            start <= now + 1.0 && start > now - 86400.0 * 365.0,
            "{start}"
        );
    }

    #[test]
    fn a_missing_proc_gives_nothing_not_zeros() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(
            ProcessStats::read_from(dir.path(), "self"),
            ProcessStats::default()
        );
        assert!(ProcessStats::default().families().is_empty());
        let half = ProcessStats {
            open_fds: Some(7.0),
            ..ProcessStats::default()
        };
        let families = half.families();
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].0.sample_name(), "process_open_fds");
        assert_eq!(families[0].1[0].value, 7.0);
    }
}
