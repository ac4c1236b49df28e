//! `scripts/verify-hardware`, run exactly as docs/verifying.md shows it:
//! cgperf against `perf stat -G` on this machine under both backends. The
//! software events are compared on every machine; the hardware events, IPC
//! and the top-down shares where this machine has them, and otherwise the
//! script says in one line that it did not compare them. Then the same run
//! with every tolerance at 0 must fail, saying which counts differ.

mod common;

use common::{as_from_a_shell, has_hardware_pmu, require_root};
use std::path::Path;
use std::process::Command;

fn verify(args: &[&str]) -> (i32, String, String) {
    let out = as_from_a_shell(&mut Command::new("scripts/verify-hardware"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("scripts/verify-hardware runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The verdict of `event`'s row for `backend`.
fn verdict<'a>(out: &'a str, backend: &str, event: &str) -> Option<&'a str> {
    out.lines()
        .find(|l| l.starts_with(&format!("{backend:<8} {event} ")))
        .and_then(|l| l.split_whitespace().last())
}

#[test]
fn verify_hardware_runs_as_written_and_fails_past_its_tolerance() {
    require_root("count other processes' cgroups with perf stat -a -G and cgperf");
    let (code, out, err) = verify(&[]);
    assert_eq!(code, 0, "{out}{err}");
    for backend in ["bpf", "cgroup"] {
        for event in ["task-clock (ms)", "context-switches", "page-faults"] {
            assert_eq!(
                verdict(&out, backend, event),
                Some("ok"),
                "{backend} {event}:\n{out}"
            );
        }
        let hardware = ["cycles", "instructions", "IPC"];
        for event in hardware {
            let row = verdict(&out, backend, event);
            assert_eq!(
                row.is_some(),
                has_hardware_pmu(),
                "{backend} {event}:\n{out}"
            );
        }
        let topdown =
            Path::new("/sys/bus/event_source/devices/cpu/events/topdown-retiring").exists();
        assert_eq!(
            verdict(&out, backend, "tma_sum (%)").is_some(),
            topdown,
            "{out}"
        );
    }
    if !has_hardware_pmu() {
        assert!(
            out.contains("hardware events not compared: this machine has no hardware PMU"),
            "{out}"
        );
    }
    assert!(out.lines().any(|l| l.starts_with("CPU: ")), "{out}");
    assert!(
        out.ends_with("verify-hardware: every count within its tolerance\n"),
        "{out}"
    );

    // Equal counts demanded: every row whose counts differ at all is
    // DIFFERS, and then the script fails (the bpf backend charges at
    // context switches, perf in the kernel's cgroup switch: their
    // task-clocks all but never agree to 10 µs).
    let (code, out, err) = verify(&["--tolerance=0"]);
    let rows: Vec<(f64, &str)> = out
        .lines()
        .filter(|l| l.starts_with("bpf ") || l.starts_with("cgroup "))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let error = words
                .iter()
                .find_map(|w| w.strip_suffix('%').and_then(|n| n.parse::<f64>().ok()))
                .unwrap_or_else(|| panic!("no error in {l}"));
            (error, *words.last().expect("a verdict"))
        })
        .collect();
    assert!(rows.len() >= 6, "{out}");
    for (error, verdict) in &rows {
        assert_eq!(*verdict == "DIFFERS", *error > 0.0, "{out}");
    }
    let differs = rows.iter().any(|(e, _)| *e > 0.0);
    assert_eq!(code, i32::from(differs), "{out}{err}");
    if differs {
        assert!(
            out.ends_with("verify-hardware: some counts differ beyond their tolerance (above)\n"),
            "{out}"
        );
    }
    // A tolerance that is not a number is a usage error, before counting.
    let (code, _, err) = verify(&["--tolerance=lots"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--tolerance takes a number"), "{err}");
}
