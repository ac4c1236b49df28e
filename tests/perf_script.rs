//! cgperf's tracepoint decoding checked against perf itself: `perf record`
//! writes the kernel's samples to a perf.data file, `perf script` prints
//! them with the kernel's `print fmt`, and cgperf's record decoder
//! (`perf::parse_record`) and field formatter (`Field::format_value`) must
//! find the same samples with the same values.
//!
//! Needs root (tracepoints of other tasks' syscalls), `perf` (Debian
//! `linux-perf`) and a C compiler (`cc`) for the workload; without them the
//! tests fail, saying so.

mod common;

use std::path::Path;
use std::process::Command;

use cgperf::events::TracepointFormat;
use cgperf::perf::Sample;
use common::perf_data::PerfData;
use common::require_root;

/// The workload's `getpriority(which, 0)` calls: every fifth one is
/// `PRIO_PGRP` (1), the others `PRIO_PROCESS` (0), so that the order of the
/// samples is checked too.
const CALLS: usize = 250;
const PGRP_EVERY: usize = 5;
const PRIO_PROCESS_CALLS: usize = 200;
const PRIO_PGRP_CALLS: usize = 50;

/// The workload in C: raw syscalls, nothing else that could call getpriority.
fn workload_source() -> String {
    format!(
        "#include <sys/resource.h>\n\
         #include <sys/syscall.h>\n\
         #include <unistd.h>\n\
         int main(void) {{\n\
             for (int i = 0; i < {CALLS}; i++)\n\
                 syscall(SYS_getpriority, i % {PGRP_EVERY} == {PGRP_EVERY} - 1 ? PRIO_PGRP : PRIO_PROCESS, 0);\n\
             return 0;\n\
         }}\n"
    )
}

fn require_root_and_perf() {
    require_root("record tracepoints with perf");
    let version = Command::new("perf").arg("--version").output();
    assert!(
        version.is_ok_and(|out| out.status.success()),
        "these tests need `perf` in PATH (Debian: apt-get install linux-perf)"
    );
}

/// The format of `subsystem:name` from this machine's tracefs.
fn tracepoint_format(subsystem: &str, name: &str) -> TracepointFormat {
    let tracefs = cgperf::tracefs::Tracefs::locate()
        .unwrap_or_else(|e| panic!("these tests need tracefs mounted: {e}"));
    let path = tracefs
        .root()
        .join("events")
        .join(subsystem)
        .join(name)
        .join("format");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    TracepointFormat::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `perf record -e event -o data -- command...`.
fn perf_record(event: &str, data: &Path, command: &[&str]) {
    let out = Command::new("perf")
        .args(["record", "-q", "-e", event, "-o"])
        .arg(data)
        .arg("--")
        .args(command)
        .output()
        .expect("perf runs");
    assert!(
        out.status.success(),
        "perf record -e {event} -- {command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `perf script` of the tracepoint samples in `data`, one `(time, trace)`
/// per sample: the time as perf prints it with `--ns`, and the `print fmt`
/// output of the kernel's format.
fn perf_script(data: &Path) -> Vec<(String, String)> {
    let out = Command::new("perf")
        .args(["script", "--ns", "-F", "trace:time,trace", "-i"])
        .arg(data)
        .output()
        .expect("perf runs");
    assert!(
        out.status.success(),
        "perf script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("perf script prints UTF-8 here")
        .lines()
        .map(|line| {
            let (time, trace) = line
                .trim_start()
                .split_once(": ")
                .unwrap_or_else(|| panic!("perf script line without `time: `: {line:?}"));
            (time.to_string(), trace.to_string())
        })
        .collect()
}

/// The samples of `data` in time order, which is the order `perf script`
/// prints them in.
fn samples_by_time(data: &PerfData) -> Vec<Sample<'_>> {
    let mut samples = data.samples();
    samples.sort_by_key(|s| s.time.expect("perf record samples have PERF_SAMPLE_TIME"));
    samples
}

/// A sample's time as `perf script --ns` prints it: seconds, 9 decimals.
fn perf_time(sample: &Sample<'_>) -> String {
    let ns = sample
        .time
        .expect("perf record samples have PERF_SAMPLE_TIME");
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// `field` of the sample's raw data, formatted by cgperf.
fn value(format: &TracepointFormat, field: &str, sample: &Sample<'_>) -> String {
    let raw = sample.raw.expect("tracepoint samples have PERF_SAMPLE_RAW");
    let mut out = String::new();
    format
        .field(field)
        .unwrap_or_else(|| panic!("no field {field}"))
        .format_value(raw, &mut out)
        .unwrap_or_else(|e| panic!("{field}: {e}"));
    out
}

/// `0x00000001` as perf prints `%08lx`.
fn hex(text: &str) -> u64 {
    let digits = text
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("not hex: {text:?}"));
    u64::from_str_radix(digits, 16).unwrap()
}

fn build_workload(dir: &Path) -> std::path::PathBuf {
    common::compile_c(dir, "getpriority", &workload_source(), &[])
}

#[test]
fn getpriority_fields_match_perf_script() {
    require_root_and_perf();
    let dir = tempfile::tempdir().unwrap();
    let workload = build_workload(dir.path());
    let data_path = dir.path().join("perf.data");
    perf_record(
        "syscalls:sys_enter_getpriority",
        &data_path,
        &[workload.to_str().unwrap()],
    );
    let format = tracepoint_format("syscalls", "sys_enter_getpriority");
    let data = PerfData::read(&data_path);
    let samples = samples_by_time(&data);
    let printed = perf_script(&data_path);
    assert_eq!(samples.len(), CALLS);
    assert_eq!(
        printed.len(),
        samples.len(),
        "perf script and cgperf see different samples"
    );

    let mut which_values = Vec::new();
    for (i, (sample, (time, trace))) in samples.iter().zip(&printed).enumerate() {
        assert_eq!(&perf_time(sample), time, "sample {i}: not the same sample");
        let (which, who) = trace
            .strip_prefix("which: ")
            .and_then(|rest| rest.split_once(", who: "))
            .unwrap_or_else(|| panic!("unexpected perf script output {trace:?}"));
        let ours = value(&format, "which", sample);
        assert_eq!(
            ours.parse::<u64>().unwrap(),
            hex(which),
            "sample {i}: which"
        );
        assert_eq!(
            value(&format, "who", sample).parse::<u64>().unwrap(),
            hex(who),
            "sample {i}: who"
        );
        assert_eq!(
            value(&format, "__syscall_nr", sample),
            libc::SYS_getpriority.to_string()
        );
        assert_eq!(
            value(&format, "common_pid", sample),
            sample.pid.unwrap().to_string()
        );
        which_values.push(ours);
    }
    let expected: Vec<&str> = (0..CALLS)
        .map(|i| {
            if i % PGRP_EVERY == PGRP_EVERY - 1 {
                "1"
            } else {
                "0"
            }
        })
        .collect();
    assert_eq!(which_values, expected);
    assert_eq!(
        which_values.iter().filter(|v| *v == "0").count(),
        PRIO_PROCESS_CALLS
    );
    assert_eq!(
        which_values.iter().filter(|v| *v == "1").count(),
        PRIO_PGRP_CALLS
    );
}

/// `__data_loc char[]`: the exec'd file names, one with a space and a
/// non-ASCII letter.
#[test]
fn exec_filenames_match_perf_script() {
    require_root_and_perf();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tr\u{fc}e copy");
    std::fs::copy("/bin/true", &copy).unwrap();
    let copy = copy.to_str().unwrap();
    let data_path = dir.path().join("perf.data");
    let script = format!("/bin/true; '{copy}'");
    perf_record(
        "sched:sched_process_exec",
        &data_path,
        &["/bin/sh", "-c", &script],
    );
    let format = tracepoint_format("sched", "sched_process_exec");
    let data = PerfData::read(&data_path);
    let samples = samples_by_time(&data);
    let printed = perf_script(&data_path);
    assert_eq!(
        printed.len(),
        samples.len(),
        "perf script and cgperf see different samples"
    );

    let mut filenames = Vec::new();
    for (i, (sample, (time, trace))) in samples.iter().zip(&printed).enumerate() {
        assert_eq!(&perf_time(sample), time, "sample {i}: not the same sample");
        let (filename, pids) = trace
            .strip_prefix("filename=")
            .and_then(|rest| rest.rsplit_once(" pid="))
            .unwrap_or_else(|| panic!("unexpected perf script output {trace:?}"));
        let ours = value(&format, "filename", sample);
        assert_eq!(ours, filename, "sample {i}");
        let (pid, old_pid) = pids.split_once(" old_pid=").unwrap();
        assert_eq!(value(&format, "pid", sample), pid, "sample {i}");
        assert_eq!(value(&format, "old_pid", sample), old_pid, "sample {i}");
        filenames.push(ours);
    }
    assert_eq!(filenames, ["/bin/sh", "/bin/true", copy]);
}
