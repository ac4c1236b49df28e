//! Named events resolved on recorded PMU sysfs trees of the four kinds of
//! machine cgperf's users run (an Intel server with top-down events, an
//! Intel hybrid CPU, an AMD Zen, an Arm Neoverse), built from the kernel's
//! documented sysfs layout (`Documentation/ABI/testing/sysfs-bus-event_source-devices-format`
//! and the drivers' format attributes), and compared with the encodings the
//! tables give.

use super::*;
use crate::events::{Event, EventAttr, ResolveError, parse_event};
use std::path::PathBuf;

/// A core PMU directory: `type`, `format/` files, optional `cpus` and
/// `events/` aliases.
fn pmu(
    root: &Path,
    name: &str,
    type_: u32,
    cpus: Option<&str>,
    format: &[(&str, &str)],
    aliases: &[(&str, &str)],
) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("format")).unwrap();
    std::fs::create_dir_all(dir.join("events")).unwrap();
    std::fs::write(dir.join("type"), format!("{type_}\n")).unwrap();
    if let Some(cpus) = cpus {
        std::fs::write(dir.join("cpus"), format!("{cpus}\n")).unwrap();
    }
    for (term, bits) in format {
        std::fs::write(dir.join("format").join(term), format!("{bits}\n")).unwrap();
    }
    for (alias, terms) in aliases {
        std::fs::write(dir.join("events").join(alias), format!("{terms}\n")).unwrap();
    }
}

/// The format of Intel's core PMU (arch/x86/events/intel/core.c).
const INTEL_FORMAT: [(&str, &str); 9] = [
    ("event", "config:0-7"),
    ("umask", "config:8-15,40-47"),
    ("edge", "config:18"),
    ("inv", "config:23"),
    ("cmask", "config:24-31"),
    ("any", "config:21"),
    ("offcore_rsp", "config1:0-63"),
    ("ldlat", "config1:0-15"),
    ("frontend", "config1:0-23"),
];

/// The format of AMD's core PMU (arch/x86/events/amd/core.c).
const AMD_FORMAT: [(&str, &str); 5] = [
    ("event", "config:0-7,32-35"),
    ("umask", "config:8-15"),
    ("edge", "config:18"),
    ("inv", "config:23"),
    ("cmask", "config:24-31"),
];

fn resolve(root: &Path, tables: &EventTables, text: &str) -> Result<EventAttr, ResolveError> {
    let event: Event = parse_event(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    event.resolve(root, tables)
}

fn config(root: &Path, tables: &EventTables, text: &str) -> (u32, u64, u64) {
    let attr = resolve(root, tables, text).unwrap_or_else(|e| panic!("{text}: {e}"));
    (attr.type_, attr.config, attr.config1)
}

fn x86(id: &str) -> CpuIdent {
    CpuIdent::X86(id.into())
}

#[test]
fn every_embedded_table_reads_and_encodes() {
    for (arch, min_rows, min_events) in [("x86", 90, 18_000), ("arm64", 45, 5_000)] {
        let mapfile = format!("{arch}/mapfile.csv");
        let text = Source::Embedded.read(&mapfile).unwrap().unwrap();
        let rows = mapfile::parse(&mapfile, &text).unwrap();
        assert!(rows.len() >= min_rows, "{arch}: {} rows", rows.len());
        // Every pattern compiles (each is compiled only for a CPU it may be).
        for row in &rows {
            row.check_pattern().unwrap();
        }
        let mut events = 0;
        for row in rows.iter().filter(|r| r.kind != RowKind::Other) {
            let path = format!("{arch}/{}", row.file);
            let entries = read_entries(Source::Embedded, &path).unwrap();
            for entry in &entries {
                match encode::event(entry, &[]) {
                    Some((_, event)) => {
                        assert_eq!(
                            event.terms.first().map(|(t, _)| t.as_str()),
                            Some("event"),
                            "{path}: {entry:?}"
                        );
                        events += 1;
                    }
                    // Only events of an MSR cgperf cannot set are left out
                    // (Nova Lake's 0x3E0-0x3E3).
                    None => {
                        let msr = encode::field(entry, "MSRIndex").unwrap_or_default();
                        assert!(msr.starts_with("0x3E"), "{path}: not encoded: {entry:?}");
                    }
                }
            }
        }
        assert!(events > min_events, "{arch}: {events} events");
    }
}

#[test]
fn intel_server_events_resolve_to_the_tables_encodings() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let topdown = [
        ("slots", "event=0x00,umask=0x4"),
        ("topdown-retiring", "event=0x00,umask=0x80"),
    ];
    pmu(root, "cpu", 4, None, &INTEL_FORMAT, &topdown);
    let tables = EventTables::load(root, &x86("GenuineIntel-6-8F-8"), None).unwrap();
    assert_eq!(tables.tables().len(), 1);
    assert_eq!(
        tables.tables()[0].files,
        [
            "cgperf's x86/SPR/events/sapphirerapids_core.json",
            "cgperf's x86/SPR/metrics/perf/sapphirerapids_metrics_perf.json",
            "cgperf's x86/SPR/metrics/perf/sapphirerapidshbm_metrics_perf.json"
        ]
    );
    let c = |text| config(root, &tables, text);
    assert_eq!(c("BR_INST_RETIRED.NEAR_TAKEN"), (4, 0x20c4, 0));
    assert_eq!(
        c("br_inst_retired.near_taken"),
        (4, 0x20c4, 0),
        "any case, as perf"
    );
    assert_eq!(c("CYCLE_ACTIVITY.STALLS_L3_MISS"), (4, 6 << 24 | 0x06a3, 0));
    assert_eq!(c("OCR.DEMAND_DATA_RD.ANY_RESPONSE"), (4, 0x012a, 0x10001));
    assert_eq!(
        c("MEM_TRANS_RETIRED.LOAD_LATENCY_GT_128"),
        (4, 0x01cd, 0x80)
    );
    assert_eq!(c("FRONTEND_RETIRED.DSB_MISS"), (4, 0x01c6, 0x11));
    assert_eq!(
        c("INST_RETIRED.ANY"),
        (4, 0xc0, 0),
        "perf's programmable encoding"
    );
    // Terms after a table event change it; modifiers apply as to any event.
    assert_eq!(
        c("cpu/BR_INST_RETIRED.NEAR_TAKEN,cmask=1,edge/"),
        (4, 1 << 24 | 1 << 18 | 0x20c4, 0)
    );
    let user = resolve(root, &tables, "BR_INST_RETIRED.NEAR_TAKEN:u").unwrap();
    assert!(user.exclude_kernel && user.exclude_hv && !user.exclude_user && user.exclude_guest);
    // perf's bare top-down names are the core PMU's sysfs aliases, and
    // each names the `slots` that must lead its group.
    assert_eq!(c("topdown-retiring"), (4, 0x8000, 0));
    let slots = parse_event("topdown-retiring")
        .unwrap()
        .topdown_slots()
        .unwrap();
    assert_eq!(slots.resolve(root, &tables).unwrap().config, 0x0400);
    assert!(
        parse_event("BR_INST_RETIRED.NEAR_TAKEN")
            .unwrap()
            .topdown_slots()
            .is_none()
    );
    // The top-down events are sysfs aliases of `cpu`, as before.
    assert_eq!(c("cpu/slots/"), (4, 0x0400, 0));
    assert_eq!(c("cpu/topdown-retiring/"), (4, 0x8000, 0));
    // A misspelt name: where cgperf looked, and the closest.
    let e = resolve(root, &tables, "BR_INST_RETIRED.NEAR_TAKN")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("no event `BR_INST_RETIRED.NEAR_TAKN` in the event tables of this CPU (GenuineIntel-6-8F-8; cpu: cgperf's x86/SPR/events/sapphirerapids_core.json, cgperf's x86/SPR/metrics/perf/"), "{e}");
    assert!(
        e.contains("did you mean `BR_INST_RETIRED.NEAR_TAKEN`?"),
        "{e}"
    );
}

#[test]
fn skylake_and_cascade_lake_are_told_apart_by_stepping() {
    let dir = tempfile::tempdir().unwrap();
    pmu(dir.path(), "cpu", 4, None, &INTEL_FORMAT, &[]);
    let file = |id| {
        EventTables::load(dir.path(), &x86(id), None)
            .unwrap()
            .tables()[0]
            .files
            .clone()
    };
    assert_eq!(
        file("GenuineIntel-6-55-4"),
        [
            "cgperf's x86/SKX/events/skylakex_core.json",
            "cgperf's x86/SKX/metrics/perf/skylakex_metrics_perf.json"
        ]
    );
    assert_eq!(
        file("GenuineIntel-6-55-7"),
        [
            "cgperf's x86/CLX/events/cascadelakex_core.json",
            "cgperf's x86/CLX/metrics/perf/cascadelakex_metrics_perf.json"
        ]
    );
}

#[test]
fn intel_hybrid_events_go_to_the_core_type_whose_table_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    pmu(root, "cpu_core", 4, Some("0-7"), &INTEL_FORMAT, &[]);
    pmu(root, "cpu_atom", 10, Some("8-15"), &INTEL_FORMAT, &[]);
    let tables = EventTables::load(root, &x86("GenuineIntel-6-97-2"), None).unwrap();
    let pmus: Vec<&str> = tables.tables().iter().map(|t| t.pmu.as_str()).collect();
    assert_eq!(pmus, ["cpu_core", "cpu_atom"]);
    assert_eq!(
        tables.tables()[1].files,
        ["cgperf's x86/ADL/events/alderlake_gracemont_core.json"]
    );
    let c = |text| config(root, &tables, text);
    // Both define it: a bare name is opened on every core with its core
    // type's encoding, as perf opens it (and as `cycles` is); a PMU written
    // keeps it to that type.
    let cores = crate::events::CorePmus::discover(root).unwrap();
    let taken = resolve(root, &tables, "BR_INST_RETIRED.NEAR_TAKEN").unwrap();
    assert_eq!((taken.type_, taken.config), (4, 0x20c4));
    let on = |attr: &EventAttr, cpu| cores.on_cpu(attr, cpu).map(|a| (a.type_, a.config));
    assert_eq!(on(&taken, 3), Some((4, 0x20c4)), "a P-core");
    assert_eq!(on(&taken, 9), Some((10, 0xc0c4)), "an E-core");
    let atom = resolve(root, &tables, "cpu_atom/BR_INST_RETIRED.NEAR_TAKEN/").unwrap();
    assert_eq!(on(&atom, 9), Some((10, 0xc0c4)));
    assert_eq!(on(&atom, 3), None);
    let core = resolve(root, &tables, "cpu_core/BR_INST_RETIRED.NEAR_TAKEN/").unwrap();
    assert_eq!(on(&core, 9), None);
    // Only the E-cores define it.
    assert_eq!(c("TOPDOWN_BE_BOUND.ALL"), (10, 0x74, 0));
    // And it is opened only on the E-cores.
    let attr = resolve(root, &tables, "TOPDOWN_BE_BOUND.ALL").unwrap();
    assert!(cores.on_cpu(&attr, 3).is_none());
    assert_eq!(cores.on_cpu(&attr, 9), Some(attr));
    let e = resolve(root, &tables, "cpu_core/TOPDOWN_BE_BOUND.ALL/").unwrap_err();
    assert!(matches!(e, ResolveError::NoEvent { .. }), "{e}");
}

/// A perf pmu-events tree (the kernel's tools/perf/pmu-events/arch) with
/// an AMD Zen 3 table, written as perf's files are.
fn amd_tree(dir: &Path) -> PathBuf {
    let arch = dir.join("arch");
    std::fs::create_dir_all(arch.join("x86/amdzen3")).unwrap();
    std::fs::write(
        arch.join("x86/mapfile.csv"),
        "Family-model,Version,Filename,EventType\nGenuineIntel-6-8F,v1.27,sapphirerapids,core\nAuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]]),v1,amdzen3,core\n",
    )
    .unwrap();
    std::fs::write(
        arch.join("x86/amdzen3/core.json"),
        r#"[
  {"EventName": "ex_ret_instr", "EventCode": "0xc0", "BriefDescription": "Retired Instructions."},
  {"EventName": "ex_ret_ucode_instr", "EventCode": "0x1c1", "BriefDescription": "Retired Microcoded Instructions."}
]"#,
    )
    .unwrap();
    std::fs::write(
        arch.join("x86/amdzen3/load-store.json"),
        r#"[
  {"EventName": "ls_dispatch.ld_dispatch", "EventCode": "0x29", "UMask": "0x01", "BriefDescription": "Dispatch of a single op that performs a memory load."},
  {"EventName": "ls_not_halted_cyc", "EventCode": "0x76", "BriefDescription": "Cycles not in Halt."}
]"#,
    )
    .unwrap();
    std::fs::create_dir_all(arch.join("x86/sapphirerapids")).unwrap();
    std::fs::write(
        arch.join("x86/sapphirerapids/pipeline.json"),
        r#"[{"EventName": "BR_INST_RETIRED.NEAR_TAKEN", "EventCode": "0xc4", "UMask": "0x20"}]"#,
    )
    .unwrap();
    std::fs::write(
        arch.join("x86/amdzen3/recommended.json"),
        r#"[{"MetricName": "ipc", "MetricExpr": "ex_ret_instr / ls_not_halted_cyc"},
  {"MetricName": "dram_bw", "MetricExpr": "umc@x@ / duration_time", "Unit": "umc"},
  {"MetricName": "atom_ipc", "MetricExpr": "a / b", "Unit": "cpu_atom"}]"#,
    )
    .unwrap();
    arch
}

#[test]
fn amd_events_come_from_a_perf_tree_given_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("pmu");
    pmu(&root, "cpu", 4, None, &AMD_FORMAT, &[]);
    let zen3 = x86("AuthenticAMD-25-21-0");
    // Nothing embedded for AMD: the error says where to get tables.
    let none = EventTables::load(&root, &zen3, None).unwrap();
    assert!(none.tables().is_empty());
    let e = resolve(&root, &none, "ex_ret_instr")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cgperf's event tables (none is for this CPU, AuthenticAMD-25-21-0), nor"),
        "{e}"
    );
    assert!(
        e.contains("--event-tables DIR: perf's tools/perf/pmu-events/arch"),
        "{e}"
    );
    let arch = amd_tree(dir.path());
    let tables = EventTables::load(&root, &zen3, Some(&arch)).unwrap();
    let c = |text| config(&root, &tables, text);
    assert_eq!(c("ex_ret_instr"), (4, 0xc0, 0));
    assert_eq!(c("ls_dispatch.ld_dispatch"), (4, 0x0129, 0));
    assert_eq!(
        c("ex_ret_ucode_instr"),
        (4, 1 << 32 | 0xc1, 0),
        "event bits 8-11 go to config 32-35"
    );
    assert_eq!(tables.tables()[0].events.len(), 4, "metrics are not events");
    // perf lists an uncore unit's metrics too (they do not count per
    // cgroup: their events say why); another core type's are its own.
    let metrics: Vec<&str> = tables.tables()[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(metrics, ["dram_bw", "ipc"]);
    // The tree wins over the embedded tables where it has the CPU's row.
    let spr = EventTables::load(&root, &x86("GenuineIntel-6-8F-8"), Some(&arch)).unwrap();
    let files = &spr.tables()[0].files;
    assert!(
        files[0].ends_with("arch/x86/sapphirerapids/pipeline.json"),
        "{files:?}"
    );
}

#[test]
fn named_events_on_a_machine_without_a_core_pmu_fail_with_the_reason() {
    // This is a VM without a vPMU: no `cpu` directory at all.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("pmu");
    pmu(&root, "software", 1, None, &[], &[]);
    let tables = EventTables::load(&root, &x86("GenuineIntel-6-8F-8"), None).unwrap();
    assert_eq!(
        tables.tables()[0].pmu,
        "cpu",
        "still listed, for `cgperf list --all`"
    );
    let e = resolve(&root, &tables, "BR_INST_RETIRED.NEAR_TAKEN").unwrap_err();
    assert!(
        matches!(e, ResolveError::NoPmu { ref pmu, .. } if pmu == "cpu"),
        "{e}"
    );
    assert!(
        e.is_missing_hardware_pmu(&root),
        "no core PMU at all: not_supported"
    );
    // With a core PMU, another's absence is the config's to fix.
    pmu(&root, "cpu", 4, None, &AMD_FORMAT, &[]);
    let e = resolve(&root, &tables, "cpu_atom/event=0xc0/").unwrap_err();
    assert!(!e.is_missing_hardware_pmu(&root), "{e}");
}

#[test]
fn arm_events_by_midr_standard_events_and_sysfs_aliases() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("pmu");
    let format = [("event", "config:0-15"), ("long", "config1:0")];
    let aliases = [
        ("l1d_cache_refill", "event=0x0003"),
        ("cpu_cycles", "event=0x0011"),
    ];
    pmu(&root, "armv8_pmuv3_0", 8, Some("0-3"), &format, &aliases);
    let n1 = CpuIdent::Arm(std::collections::BTreeMap::from([
        (0, 0x413f_d0c1),
        (1, 0x413f_d0c1),
    ]));
    // The embedded table of its part, whatever its variant and revision.
    let embedded = EventTables::load(&root, &n1, None).unwrap();
    assert_eq!(embedded.tables()[0].pmu, "armv8_pmuv3_0");
    assert_eq!(
        embedded.tables()[0].files,
        ["cgperf's arm64/neoverse-n1.json"]
    );
    assert_eq!(config(&root, &embedded, "STALL_BACKEND"), (8, 0x24, 0));
    assert_eq!(config(&root, &embedded, "inst_retired"), (8, 0x8, 0));
    // A CPU no table has: the core PMU's sysfs aliases, in any case.
    let unknown = CpuIdent::Arm(std::collections::BTreeMap::from([(0, 0x610f_0220)]));
    let none = EventTables::load(&root, &unknown, None).unwrap();
    assert!(none.tables().is_empty());
    assert_eq!(config(&root, &none, "L1D_CACHE_REFILL"), (8, 0x3, 0));
    assert_eq!(config(&root, &none, "CPU_CYCLES"), (8, 0x11, 0));
    let e = resolve(&root, &none, "STALL_BACKEND")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("(none is for this CPU, MIDR 0x00000000610f0220)"),
        "{e}"
    );
    // With perf's arm64 tree: standard events named by ArchStdEvent.
    let arch = dir.path().join("arch");
    std::fs::create_dir_all(arch.join("arm64/arm/neoverse-n1")).unwrap();
    std::fs::write(
        arch.join("arm64/mapfile.csv"),
        "0x00000000410fd0c0,v1,arm/neoverse-n1,core\n",
    )
    .unwrap();
    std::fs::write(
        arch.join("arm64/common-and-microarch.json"),
        r#"[{"EventCode": "0x24", "EventName": "STALL_BACKEND", "BriefDescription": "No operation issued due to the backend"},
            {"EventCode": "0x03", "EventName": "L1D_CACHE_REFILL", "BriefDescription": "Level 1 data cache refill"}]"#,
    )
    .unwrap();
    std::fs::write(
        arch.join("arm64/arm/neoverse-n1/pipeline.json"),
        r#"[{"ArchStdEvent": "STALL_BACKEND"}, {"EventCode": "0xC1", "EventName": "L1D_CACHE_RD_X", "BriefDescription": "made up"}]"#,
    )
    .unwrap();
    let tables = EventTables::load(&root, &n1, Some(&arch)).unwrap();
    assert_eq!(config(&root, &tables, "STALL_BACKEND"), (8, 0x24, 0));
    assert_eq!(config(&root, &tables, "L1D_CACHE_RD_X"), (8, 0xc1, 0));
    let stall = tables.find("stall_backend").unwrap().1;
    assert_eq!(stall.description, "No operation issued due to the backend");
    // Another part (a Neoverse V1) gets no table from it: the embedded one.
    let v1 = CpuIdent::Arm(std::collections::BTreeMap::from([(0, 0x411f_d400)]));
    let v1 = EventTables::load(&root, &v1, Some(&arch)).unwrap();
    assert_eq!(v1.tables()[0].files, ["cgperf's arm64/neoverse-v1.json"]);
}

#[test]
fn a_broken_table_directory_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("pmu");
    pmu(&root, "cpu", 4, None, &AMD_FORMAT, &[]);
    let arch = amd_tree(dir.path());
    std::fs::write(
        arch.join("x86/amdzen3/core.json"),
        "[{\"EventName\": \"x\",\n  oops]",
    )
    .unwrap();
    let e = EventTables::load(&root, &x86("AuthenticAMD-25-21-0"), Some(&arch))
        .unwrap_err()
        .to_string();
    assert!(e.contains("arch/x86/amdzen3/core.json:2:"), "{e}");
    let e = EventTables::load(&root, &x86("AuthenticAMD-25-21-0"), Some(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no x86/mapfile.csv"), "{e}");
}

#[test]
fn vendor_names_parse_and_typos_of_generic_names_do_not() {
    use crate::events::EventKind;
    for name in [
        "BR_INST_RETIRED.NEAR_TAKEN",
        "ex_ret_instr",
        "STALL_BACKEND",
        "ls_dispatch.ld_dispatch",
        "CPU_CYCLES",
        "topdown-be-bound",
    ] {
        assert_eq!(
            parse_event(name).unwrap().kind,
            EventKind::Named(name.into()),
            "{name}"
        );
    }
    let named = parse_event("CYCLE_ACTIVITY.STALLS_L3_MISS:u").unwrap();
    assert!(named.modifiers.exclude_kernel);
    for typo in [
        "cylces",
        "Cycles",
        "frobnicate",
        "instrucions:u",
        "task_clock",
        "LLC-",
    ] {
        assert!(parse_event(typo).is_err(), "{typo}");
    }
}

#[test]
fn intels_server_metrics_are_embedded_and_every_event_of_them_encodes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("pmu");
    pmu(&root, "cpu", 4, None, &INTEL_FORMAT, &[]);
    let mut total = 0;
    for id in [
        "GenuineIntel-6-3F-2", // Haswell-X
        "GenuineIntel-6-4F-1", // Broadwell-X
        "GenuineIntel-6-55-4", // Skylake-X
        "GenuineIntel-6-55-7", // Cascade Lake-X
        "GenuineIntel-6-6A-6", // Ice Lake-X
        "GenuineIntel-6-8F-8", // Sapphire Rapids
        "GenuineIntel-6-CF-2", // Emerald Rapids
        "GenuineIntel-6-AD-1", // Granite Rapids
        "GenuineIntel-6-AF-3", // Sierra Forest
        "GenuineIntel-6-B6-0", // Grand Ridge
        "GenuineIntel-6-DD-0", // Clearwater Forest
    ] {
        let tables = EventTables::load(&root, &x86(id), None).unwrap();
        let catalog = crate::metrics::Catalog::of(
            &tables,
            crate::metrics::Literals {
                system_tsc_freq: Some(2e9),
                ..Default::default()
            },
        );
        let metrics = catalog.metrics();
        assert!(
            metrics.iter().any(|(name, _)| name == "cpi"),
            "{id}: {:?}",
            metrics.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        for (name, _) in &metrics {
            for metric in catalog
                .resolve(name)
                .unwrap_or_else(|e| panic!("{id}: {e}"))
            {
                // Literals (`#smt_on`) are the machine's, not events.
                let events = metric.expr.names().iter().filter(|n| !n.starts_with('#'));
                for event in events {
                    resolve(&root, &tables, event)
                        .unwrap_or_else(|e| panic!("{id} {name}: {event}: {e}"));
                }
                total += 1;
            }
        }
    }
    assert!(total >= 150, "{total} metrics");
}
