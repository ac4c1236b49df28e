use super::*;

fn metric(name: &str, expr: &str, groups: &[&str], scale_unit: Option<&str>) -> TableMetric {
    TableMetric {
        name: name.into(),
        expr: expr.into(),
        description: format!("about {name}"),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        scale_unit: scale_unit.map(String::from),
        unit: None,
        constraint: None,
    }
}

fn literals() -> Literals {
    Literals {
        smt_on: true,
        num_cpus_online: 8.0,
        num_cores: 4.0,
        num_dies: 1.0,
        num_packages: 1.0,
        system_tsc_freq: None,
        nmi_watchdog: true,
    }
}

/// A Skylake-like table: `IPC` refers to `CLKS`, the level-1 metrics to
/// `SLOTS`, which uses `#SMT_on`.
fn catalog() -> Catalog {
    let mut watchdog = metric("tma_watchdog", "a / b", &[], None);
    watchdog.constraint = Some("NO_NMI_WATCHDOG".into());
    Catalog::new(
        vec![
            metric("CLKS", "CPU_CLK_UNHALTED.THREAD", &["Pipeline"], None),
            metric("IPC", "INST_RETIRED.ANY / CLKS", &["Ret", "Summary"], None),
            metric(
                "SLOTS",
                "4 * (CPU_CLK_UNHALTED.THREAD_ANY / 2 if #SMT_on else CLKS)",
                &["TmaL1"],
                None,
            ),
            metric(
                "tma_retiring",
                "UOPS_RETIRED.RETIRE_SLOTS / SLOTS",
                &["TopdownL1"],
                Some("100%"),
            ),
            metric(
                "tma_frontend_bound",
                "IDQ_UOPS_NOT_DELIVERED.CORE / SLOTS",
                &["TopdownL1", "PGO"],
                Some("100%"),
            ),
            metric("loop", "loop2 + 1", &[], None),
            metric("loop2", "LOOP * 2", &[], None),
            metric("tsc_ghz", "cycles / #SYSTEM_TSC_FREQ", &[], Some("1GHz")),
            watchdog,
        ],
        literals(),
        "the test tables".into(),
    )
}

fn eval(m: &NamedMetric, values: &[(&str, f64)]) -> Option<f64> {
    let inputs: Vec<f64> = m
        .expr
        .names()
        .iter()
        .map(|n| {
            // A literal is the machine's when the metric is computed.
            if let Some(value) = literals().get(n) {
                return value;
            }
            values
                .iter()
                .find(|(k, _)| k == n)
                .unwrap_or_else(|| panic!("no value for {n}"))
                .1
        })
        .collect();
    m.expr.eval(&inputs)
}

#[test]
fn a_metric_is_written_out_with_the_metrics_it_refers_to() {
    let ipc = catalog().resolve("ipc").expect("IPC, in any case");
    assert_eq!(ipc.len(), 1);
    let ipc = &ipc[0];
    assert_eq!(ipc.name, "IPC");
    assert_eq!(ipc.formula, "INST_RETIRED.ANY / CLKS");
    assert_eq!(
        ipc.expr.names(),
        ["INST_RETIRED.ANY", "CPU_CLK_UNHALTED.THREAD"]
    );
    let value = eval(
        ipc,
        &[
            ("INST_RETIRED.ANY", 300.0),
            ("CPU_CLK_UNHALTED.THREAD", 100.0),
        ],
    );
    assert_eq!(value, Some(3.0));
    assert_eq!(ipc.unit, "");
    assert!(ipc.grouped);
}

#[test]
fn a_group_is_its_metrics_with_literals_and_scale_applied() {
    let l1 = catalog().resolve("TopdownL1").expect("a group");
    let names: Vec<&str> = l1.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["tma_retiring", "tma_frontend_bound"]);
    let retiring = &l1[0];
    assert_eq!(retiring.unit, "percent");
    // SMT on: SLOTS = 4 * THREAD_ANY / 2 = 400; 100 of 400 slots retired.
    assert_eq!(
        retiring.expr.names(),
        [
            "UOPS_RETIRED.RETIRE_SLOTS",
            "CPU_CLK_UNHALTED.THREAD_ANY",
            "#SMT_on",
            "CPU_CLK_UNHALTED.THREAD"
        ],
        "a literal stays a name, whose value is the machine's when computed"
    );
    let value = eval(
        retiring,
        &[
            ("UOPS_RETIRED.RETIRE_SLOTS", 100.0),
            ("CPU_CLK_UNHALTED.THREAD_ANY", 200.0),
            ("CPU_CLK_UNHALTED.THREAD", 1.0),
        ],
    );
    assert_eq!(value, Some(25.0));
}

#[test]
fn circles_unknown_literals_and_unknown_names_are_errors_that_say_which() {
    let c = catalog();
    let e = c.resolve("loop").unwrap_err().to_string();
    assert!(e.contains("metric `loop` of the test tables"), "{e}");
    assert!(e.contains("refers to itself"), "{e}");
    let e = c.resolve("tsc_ghz").unwrap_err().to_string();
    assert!(
        e.contains("literal `#SYSTEM_TSC_FREQ` is not known on this machine"),
        "{e}"
    );
    match c.resolve("TopDownL2") {
        Err(NamedError::Unknown { suggestion, .. }) => {
            assert_eq!(suggestion.as_deref(), Some("TopdownL1"))
        }
        other => panic!("{other:?}"),
    }
    assert!(Catalog::none().resolve("IPC").is_err());
}

#[test]
fn the_nmi_watchdog_ungroups_the_metrics_the_table_says_it_breaks() {
    let c = catalog();
    assert!(!c.resolve("tma_watchdog").unwrap()[0].grouped);
    let quiet = Catalog::new(
        c.metrics().into_iter().map(|(_, m)| m.clone()).collect(),
        Literals {
            nmi_watchdog: false,
            ..literals()
        },
        "t".into(),
    );
    assert!(quiet.resolve("tma_watchdog").unwrap()[0].grouped);
}

#[test]
fn scale_units_become_a_factor_and_a_label_value() {
    let cases = [
        ("", (1.0, "")),
        ("100%", (100.0, "percent")),
        ("1per_instr", (1.0, "per_instr")),
        ("9.765625e-4KB", (9.765625e-4, "kb")),
        ("6.103515625E-5MB/sec", (6.103515625e-5, "mb_per_sec")),
        ("1core clocks", (1.0, "core_clocks")),
        ("4", (4.0, "")),
        ("1GHz", (1.0, "ghz")),
    ];
    for (text, (factor, unit)) in cases {
        assert_eq!(scale_unit(text), Some((factor, unit.to_string())), "{text}");
    }
    assert_eq!(scale_unit("1e"), Some((1.0, "e".into())));
}

/// An Alder Lake-like pair of tables: both core types define `IPC` and
/// `tma_retiring` (group `TopdownL1`) over their own events; only the big
/// cores have `CLKS`.
fn hybrid() -> Catalog {
    Catalog::hybrid(
        vec![
            (
                "cpu_core".into(),
                vec![
                    metric("CLKS", "CPU_CLK_UNHALTED.THREAD", &[], None),
                    metric("IPC", "INST_RETIRED.ANY / CLKS", &[], None),
                    metric(
                        "tma_retiring",
                        "topdown\\-retiring / (cycles:k * 6)",
                        &["TopdownL1"],
                        Some("100%"),
                    ),
                ],
            ),
            (
                "cpu_atom".into(),
                vec![
                    metric("IPC", "INST_RETIRED.ANY / CPU_CLK_UNHALTED.CORE", &[], None),
                    metric(
                        "tma_retiring",
                        "TOPDOWN_RETIRING.ALL / (5 * CPU_CLK_UNHALTED.CORE)",
                        &["TopdownL1"],
                        Some("100%"),
                    ),
                ],
            ),
        ],
        literals(),
        "the hybrid tables".into(),
    )
}

#[test]
fn on_a_hybrid_cpu_each_core_type_computes_its_own_over_its_own_events() {
    let c = hybrid();
    let ipc = c.resolve("IPC").expect("both types");
    let summary: Vec<(&str, Vec<&str>)> = ipc
        .iter()
        .map(|m| {
            let names = m.expr.names().iter().map(String::as_str).collect();
            (m.name.as_str(), names)
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "IPC",
                vec![
                    "cpu_core/INST_RETIRED.ANY/",
                    "cpu_core/CPU_CLK_UNHALTED.THREAD/"
                ]
            ),
            (
                "cpu_atom/IPC",
                vec![
                    "cpu_atom/INST_RETIRED.ANY/",
                    "cpu_atom/CPU_CLK_UNHALTED.CORE/"
                ]
            ),
        ]
    );
    // Modifiers stay modifiers.
    let l1 = c.resolve("TopdownL1").expect("both types");
    assert_eq!(l1.len(), 2);
    assert_eq!(
        l1[0].expr.names(),
        ["cpu_core/topdown-retiring/", "cpu_core/cycles/k"]
    );
    // `pmu/NAME` keeps to one core type, a metric or a group.
    let atom = c.resolve("cpu_atom/TopdownL1").expect("the E-cores'");
    let names: Vec<&str> = atom.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["cpu_atom/tma_retiring"]);
    let core = c.resolve("cpu_core/IPC").expect("the P-cores'");
    assert_eq!(core.len(), 1);
    assert_eq!(core[0].name, "IPC");
    // Listed by the names they go by.
    let listed: Vec<String> = c.metrics().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        listed,
        [
            "CLKS",
            "IPC",
            "tma_retiring",
            "cpu_atom/IPC",
            "cpu_atom/tma_retiring"
        ]
    );
    // A misspelt one-type name still gets its did-you-mean.
    match c.resolve("cpu_atom/IPD") {
        Err(NamedError::Unknown { suggestion, .. }) => {
            assert_eq!(suggestion.as_deref(), Some("cpu_atom/IPC"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_table_whose_metrics_refer_to_each_other_widely_is_refused_not_waited_for() {
    // Fifteen levels of ten metrics, each the sum of the ten of the next
    // level, over `cycles` at the bottom: 10^15 uses of `cycles` written
    // out. Each level is measured before it is built, so the writing out
    // stops at the first level too large.
    let mut metrics = Vec::new();
    for level in 0..15 {
        let next: Vec<String> = (0..10).map(|j| format!("m{}_{j}", level + 1)).collect();
        for j in 0..10 {
            metrics.push(metric(
                &format!("m{level}_{j}"),
                &next.join(" + "),
                &[],
                None,
            ));
        }
    }
    for j in 0..10 {
        metrics.push(metric(&format!("m15_{j}"), "cycles", &[], None));
    }
    let c = Catalog::new(metrics, literals(), "wide tables".into());
    let e = c.resolve("m0_0").expect_err("too large").to_string();
    assert!(e.contains("more than a metric may have"), "{e}");
    // Three levels up from the bottom is 1,000 uses of `cycles`: within
    // bounds.
    let m12 = c.resolve("m12_3").expect("within bounds");
    assert_eq!(m12[0].expr.names(), ["cycles"]);
    assert_eq!(m12[0].expr.eval(&[1.0]), Some(1000.0));
}
