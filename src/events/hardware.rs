//! perf's generalized event names: hardware, software and hardware-cache
//! events, with the spellings and aliases perf accepts (its `parse-events.l`
//! and the `evsel__hw_cache*` tables of `evsel.c`).

use crate::events::{EventKind, EventSyntaxError};

// enum perf_hw_id (include/uapi/linux/perf_event.h)
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_HW_CACHE_REFERENCES: u64 = 2;
const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
const PERF_COUNT_HW_BRANCH_INSTRUCTIONS: u64 = 4;
const PERF_COUNT_HW_BRANCH_MISSES: u64 = 5;
const PERF_COUNT_HW_BUS_CYCLES: u64 = 6;
const PERF_COUNT_HW_STALLED_CYCLES_FRONTEND: u64 = 7;
const PERF_COUNT_HW_STALLED_CYCLES_BACKEND: u64 = 8;
pub(crate) const PERF_COUNT_HW_REF_CPU_CYCLES: u64 = 9;

// enum perf_sw_ids (include/uapi/linux/perf_event.h)
pub(crate) const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
pub(crate) const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_PAGE_FAULTS: u64 = 2;
pub(crate) const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
const PERF_COUNT_SW_CPU_MIGRATIONS: u64 = 4;
const PERF_COUNT_SW_PAGE_FAULTS_MIN: u64 = 5;
const PERF_COUNT_SW_PAGE_FAULTS_MAJ: u64 = 6;
const PERF_COUNT_SW_ALIGNMENT_FAULTS: u64 = 7;
const PERF_COUNT_SW_EMULATION_FAULTS: u64 = 8;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const PERF_COUNT_SW_BPF_OUTPUT: u64 = 10;
const PERF_COUNT_SW_CGROUP_SWITCHES: u64 = 11;

// enum perf_hw_cache_id (include/uapi/linux/perf_event.h)
const PERF_COUNT_HW_CACHE_L1D: u64 = 0;
const PERF_COUNT_HW_CACHE_L1I: u64 = 1;
const PERF_COUNT_HW_CACHE_LL: u64 = 2;
const PERF_COUNT_HW_CACHE_DTLB: u64 = 3;
const PERF_COUNT_HW_CACHE_ITLB: u64 = 4;
const PERF_COUNT_HW_CACHE_BPU: u64 = 5;
const PERF_COUNT_HW_CACHE_NODE: u64 = 6;

// enum perf_hw_cache_op_id (include/uapi/linux/perf_event.h)
const PERF_COUNT_HW_CACHE_OP_READ: u64 = 0;
const PERF_COUNT_HW_CACHE_OP_WRITE: u64 = 1;
const PERF_COUNT_HW_CACHE_OP_PREFETCH: u64 = 2;

// enum perf_hw_cache_op_result_id (include/uapi/linux/perf_event.h)
const PERF_COUNT_HW_CACHE_RESULT_ACCESS: u64 = 0;
const PERF_COUNT_HW_CACHE_RESULT_MISS: u64 = 1;

/// Generalized hardware event names and their perf_hw_id.
const HARDWARE: &[(&str, u64)] = &[
    ("cpu-cycles", PERF_COUNT_HW_CPU_CYCLES),
    ("cycles", PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", PERF_COUNT_HW_INSTRUCTIONS),
    ("cache-references", PERF_COUNT_HW_CACHE_REFERENCES),
    ("cache-misses", PERF_COUNT_HW_CACHE_MISSES),
    ("branch-instructions", PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    ("branches", PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    ("branch-misses", PERF_COUNT_HW_BRANCH_MISSES),
    ("bus-cycles", PERF_COUNT_HW_BUS_CYCLES),
    (
        "stalled-cycles-frontend",
        PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "idle-cycles-frontend",
        PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "stalled-cycles-backend",
        PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    ),
    ("idle-cycles-backend", PERF_COUNT_HW_STALLED_CYCLES_BACKEND),
    ("ref-cycles", PERF_COUNT_HW_REF_CPU_CYCLES),
];

/// Software event names and their perf_sw_ids.
const SOFTWARE: &[(&str, u64)] = &[
    ("cpu-clock", PERF_COUNT_SW_CPU_CLOCK),
    ("task-clock", PERF_COUNT_SW_TASK_CLOCK),
    ("page-faults", PERF_COUNT_SW_PAGE_FAULTS),
    ("faults", PERF_COUNT_SW_PAGE_FAULTS),
    ("context-switches", PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cs", PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cpu-migrations", PERF_COUNT_SW_CPU_MIGRATIONS),
    ("migrations", PERF_COUNT_SW_CPU_MIGRATIONS),
    ("minor-faults", PERF_COUNT_SW_PAGE_FAULTS_MIN),
    ("major-faults", PERF_COUNT_SW_PAGE_FAULTS_MAJ),
    ("alignment-faults", PERF_COUNT_SW_ALIGNMENT_FAULTS),
    ("emulation-faults", PERF_COUNT_SW_EMULATION_FAULTS),
    ("dummy", PERF_COUNT_SW_DUMMY),
    ("bpf-output", PERF_COUNT_SW_BPF_OUTPUT),
    ("cgroup-switches", PERF_COUNT_SW_CGROUP_SWITCHES),
];

/// perf's own name of each generalized hardware event, by perf_hw_id: the
/// name it gives an event it did not parse (its `evsel__hw_names`). The one
/// `event` label of an event, whichever alias the config wrote.
const HARDWARE_NAMES: &[&str] = &[
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branches",
    "branch-misses",
    "bus-cycles",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "ref-cycles",
];

/// perf's own name of each software event, by perf_sw_ids
/// (`evsel__sw_names`).
const SOFTWARE_NAMES: &[&str] = &[
    "cpu-clock",
    "task-clock",
    "page-faults",
    "context-switches",
    "cpu-migrations",
    "minor-faults",
    "major-faults",
    "alignment-faults",
    "emulation-faults",
    "dummy",
    "bpf-output",
    "cgroup-switches",
];

/// Bits of [`Cache::ops`]: one per perf_hw_cache_op_id.
const READ: u8 = 1 << PERF_COUNT_HW_CACHE_OP_READ;
const WRITE: u8 = 1 << PERF_COUNT_HW_CACHE_OP_WRITE;
const PREFETCH: u8 = 1 << PERF_COUNT_HW_CACHE_OP_PREFETCH;

/// A generalized cache and the names perf accepts for it.
struct Cache {
    id: u64,
    /// The name `perf list` shows.
    name: &'static str,
    aliases: &'static [&'static str],
    /// The operations perf allows on it (its `evsel__hw_cache_stat`).
    ops: u8,
}

const CACHES: &[Cache] = &[
    Cache {
        id: PERF_COUNT_HW_CACHE_L1D,
        name: "L1-dcache",
        aliases: &["l1-d", "l1d", "L1-data"],
        ops: READ | WRITE | PREFETCH,
    },
    Cache {
        id: PERF_COUNT_HW_CACHE_L1I,
        name: "L1-icache",
        aliases: &["l1-i", "l1i", "L1-instruction"],
        ops: READ | PREFETCH,
    },
    Cache {
        id: PERF_COUNT_HW_CACHE_LL,
        name: "LLC",
        aliases: &["L2"],
        ops: READ | WRITE | PREFETCH,
    },
    Cache {
        id: PERF_COUNT_HW_CACHE_DTLB,
        name: "dTLB",
        aliases: &["d-tlb", "Data-TLB"],
        ops: READ | WRITE | PREFETCH,
    },
    Cache {
        id: PERF_COUNT_HW_CACHE_ITLB,
        name: "iTLB",
        aliases: &["i-tlb", "Instruction-TLB"],
        ops: READ,
    },
    Cache {
        id: PERF_COUNT_HW_CACHE_BPU,
        name: "branch",
        aliases: &["branches", "bpu", "btb", "bpc"],
        ops: READ,
    },
    Cache {
        id: PERF_COUNT_HW_CACHE_NODE,
        name: "node",
        aliases: &[],
        ops: READ | WRITE | PREFETCH,
    },
];

/// A cache operation: `perf list` writes `<cache>-<plural>` for accesses and
/// `<cache>-<name>-misses` for misses.
struct Op {
    id: u64,
    name: &'static str,
    plural: &'static str,
    aliases: &'static [&'static str],
}

/// The op perf assumes when a cache event names none.
const LOAD: Op = Op {
    id: PERF_COUNT_HW_CACHE_OP_READ,
    name: "load",
    plural: "loads",
    aliases: &["read"],
};

const OPS: &[Op] = &[
    LOAD,
    Op {
        id: PERF_COUNT_HW_CACHE_OP_WRITE,
        name: "store",
        plural: "stores",
        aliases: &["write"],
    },
    Op {
        id: PERF_COUNT_HW_CACHE_OP_PREFETCH,
        name: "prefetch",
        plural: "prefetches",
        aliases: &["speculative-read", "speculative-load"],
    },
];

/// Cache results and the names perf accepts for them.
const RESULTS: &[(u64, &[&str])] = &[
    (
        PERF_COUNT_HW_CACHE_RESULT_ACCESS,
        &["refs", "Reference", "ops", "access"],
    ),
    (PERF_COUNT_HW_CACHE_RESULT_MISS, &["misses", "miss"]),
];

/// The generalized event `name` names, if any. Hardware and software names
/// win over cache names (`branches`, `branch-misses`), as in perf's lexer.
pub(crate) fn lookup(name: &str) -> Result<Option<EventKind>, EventSyntaxError> {
    if let Some((_, id)) = HARDWARE.iter().find(|(n, _)| *n == name) {
        return Ok(Some(EventKind::Hardware(*id)));
    }
    if let Some((_, id)) = SOFTWARE.iter().find(|(n, _)| *n == name) {
        return Ok(Some(EventKind::Software(*id)));
    }
    cache_event(name)
}

/// Parses `<cache>`, `<cache>-<op>`, `<cache>-<result>`, `<cache>-<op>-<result>`
/// (and `<cache>-<result>-<op>`, which perf also takes); op defaults to read
/// and result to access. Names may contain `-`, so each split is tried.
fn cache_event(name: &str) -> Result<Option<EventKind>, EventSyntaxError> {
    for cache in CACHES {
        for alias in std::iter::once(&cache.name).chain(cache.aliases) {
            let Some(rest) = name.strip_prefix(alias) else {
                continue;
            };
            let parsed = match rest.strip_prefix('-') {
                None if rest.is_empty() => Some((None, None)),
                None => None,
                Some(rest) => op_and_result(rest),
            };
            let Some((op, result)) = parsed else {
                continue;
            };
            let op = op.unwrap_or(&LOAD);
            if cache.ops & (1 << op.id) == 0 {
                return Err(unsupported(name, cache, op));
            }
            return Ok(Some(EventKind::HardwareCache {
                cache: cache.id,
                op: op.id,
                result: result.unwrap_or(PERF_COUNT_HW_CACHE_RESULT_ACCESS),
            }));
        }
    }
    Ok(None)
}

/// Splits what follows `<cache>-` into an op and/or a result.
fn op_and_result(text: &str) -> Option<(Option<&'static Op>, Option<u64>)> {
    if let Some(op) = find_op(text) {
        return Some((Some(op), None));
    }
    if let Some(result) = find_result(text) {
        return Some((None, Some(result)));
    }
    text.match_indices('-').find_map(|(i, _)| {
        let (first, second) = (text.get(..i)?, text.get(i + 1..)?);
        match (find_op(first), find_result(second)) {
            (Some(op), Some(result)) => Some((Some(op), Some(result))),
            _ => Some((Some(find_op(second)?), Some(find_result(first)?))),
        }
    })
}

fn find_op(name: &str) -> Option<&'static Op> {
    OPS.iter()
        .find(|op| op.name == name || op.plural == name || op.aliases.contains(&name))
}

fn find_result(name: &str) -> Option<u64> {
    RESULTS
        .iter()
        .find(|(_, names)| names.contains(&name))
        .map(|(id, _)| *id)
}

/// The error for an op the cache does not have, e.g. `L1-icache-stores`.
fn unsupported(name: &str, cache: &Cache, op: &Op) -> EventSyntaxError {
    let supported: Vec<&str> = OPS
        .iter()
        .filter(|o| cache.ops & (1 << o.id) != 0)
        .map(|o| o.name)
        .collect();
    EventSyntaxError::UnsupportedCacheOp {
        name: name.to_string(),
        cache: cache.name.to_string(),
        op: op.name.to_string(),
        supported: supported.join(", "),
    }
}

/// perf's own name of a generalized event, whatever alias named it: `cs`
/// and `context-switches` are both `context-switches`, `cpu-cycles` and
/// `cycles` both `cycles`, `l1d-read-miss` is `L1-dcache-load-misses` (as
/// perf names events it did not parse, and as `perf list` shows them first).
/// `None` for raw and PMU events, whose names are what the user wrote.
pub(crate) fn canonical_name(kind: &EventKind) -> Option<String> {
    let name = |names: &[&str], id: &u64| {
        usize::try_from(*id)
            .ok()
            .and_then(|i| names.get(i))
            .map(|n| n.to_string())
    };
    match kind {
        EventKind::Hardware(id) => name(HARDWARE_NAMES, id),
        EventKind::Software(id) => name(SOFTWARE_NAMES, id),
        EventKind::HardwareCache { cache, op, result } => {
            let cache = CACHES.iter().find(|c| c.id == *cache)?;
            let op = OPS.iter().find(|o| o.id == *op)?;
            Some(if *result == PERF_COUNT_HW_CACHE_RESULT_MISS {
                format!("{}-{}-misses", cache.name, op.name)
            } else {
                format!("{}-{}", cache.name, op.plural)
            })
        }
        EventKind::Raw(_) | EventKind::Pmu { .. } | EventKind::Named(_) => None,
    }
}

/// The names `perf list` shows for these events, for did-you-mean suggestions.
pub(crate) fn known_names() -> Vec<String> {
    let mut names: Vec<String> = HARDWARE
        .iter()
        .chain(SOFTWARE)
        .map(|(name, _)| name.to_string())
        .collect();
    for cache in CACHES {
        for op in OPS.iter().filter(|op| cache.ops & (1 << op.id) != 0) {
            names.push(format!("{}-{}", cache.name, op.plural));
            names.push(format!("{}-{}-misses", cache.name, op.name));
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::parse_event;
    use crate::events::tests::kind;

    fn cache(cache: u64, op: u64, result: u64) -> EventKind {
        EventKind::HardwareCache { cache, op, result }
    }

    #[test]
    fn every_hardware_and_software_name_round_trips() {
        for (name, id) in HARDWARE {
            assert_eq!(kind(name), EventKind::Hardware(*id), "{name}");
        }
        for (name, id) in SOFTWARE {
            assert_eq!(kind(name), EventKind::Software(*id), "{name}");
        }
        assert_eq!(HARDWARE.len(), 14);
        assert_eq!(SOFTWARE.len(), 15);
    }

    /// The one name of an event, from the text of any alias.
    fn canonical(text: &str) -> String {
        canonical_name(&kind(text)).unwrap_or_else(|| panic!("{text} has a canonical name"))
    }

    #[test]
    fn every_alias_has_perfs_own_name_as_its_label() {
        for (name, id) in HARDWARE {
            let canonical = canonical(name);
            assert_eq!(canonical, HARDWARE_NAMES[*id as usize], "{name}");
            assert_eq!(kind(&canonical), EventKind::Hardware(*id), "{name}");
        }
        for (name, id) in SOFTWARE {
            let canonical = canonical(name);
            assert_eq!(canonical, SOFTWARE_NAMES[*id as usize], "{name}");
            assert_eq!(kind(&canonical), EventKind::Software(*id), "{name}");
        }
        for (alias, name) in [
            ("cpu-cycles", "cycles"),
            ("branch-instructions", "branches"),
            ("cs", "context-switches"),
            ("faults", "page-faults"),
            ("migrations", "cpu-migrations"),
            ("idle-cycles-frontend", "stalled-cycles-frontend"),
            ("idle-cycles-backend", "stalled-cycles-backend"),
            ("l1d", "L1-dcache-loads"),
            ("L1-data-read-miss", "L1-dcache-load-misses"),
            ("l1-d-miss-read", "L1-dcache-load-misses"),
            ("L2-write-refs", "LLC-stores"),
            ("Data-TLB-speculative-load-misses", "dTLB-prefetch-misses"),
            ("bpu-misses", "branch-load-misses"),
            ("node-stores", "node-stores"),
        ] {
            assert_eq!(canonical(alias), name, "{alias}");
        }
        // Every cache name `perf list` shows is its own canonical name.
        let generalized = |n: &str| HARDWARE.iter().chain(SOFTWARE).any(|(h, _)| *h == n);
        for name in known_names().iter().filter(|n| !generalized(n)) {
            assert_eq!(&canonical(name), name);
        }
    }

    #[test]
    fn kernel_ids() {
        assert_eq!(kind("cycles"), EventKind::Hardware(0));
        assert_eq!(kind("branches"), EventKind::Hardware(4));
        assert_eq!(kind("branch-misses"), EventKind::Hardware(5));
        assert_eq!(kind("idle-cycles-backend"), EventKind::Hardware(8));
        assert_eq!(kind("ref-cycles"), EventKind::Hardware(9));
        assert_eq!(kind("task-clock"), EventKind::Software(1));
        assert_eq!(kind("cs"), EventKind::Software(3));
        assert_eq!(kind("major-faults"), EventKind::Software(6));
        assert_eq!(kind("cgroup-switches"), EventKind::Software(11));
    }

    #[test]
    fn every_cache_op_result_combination() {
        let mut accepted = 0;
        for c in CACHES {
            for cache_name in std::iter::once(&c.name).chain(c.aliases) {
                if HARDWARE.iter().any(|(n, _)| n == cache_name) {
                    continue; // `branches` alone is the hardware event.
                }
                assert_eq!(kind(cache_name), cache(c.id, 0, 0), "{cache_name}");
                for (result, result_names) in RESULTS {
                    for r in *result_names {
                        let text = format!("{cache_name}-{r}");
                        if HARDWARE.iter().any(|(n, _)| *n == text) {
                            continue; // `branch-misses` is the hardware event.
                        }
                        assert_eq!(kind(&text), cache(c.id, 0, *result), "{text}");
                    }
                }
                for op in OPS {
                    for op_name in [op.name, op.plural].iter().chain(op.aliases) {
                        let text = format!("{cache_name}-{op_name}");
                        let supported = c.ops & (1 << op.id) != 0;
                        match parse_event(&text) {
                            Ok(e) => {
                                assert!(supported, "{text}");
                                assert_eq!(e.kind, cache(c.id, op.id, 0), "{text}");
                                accepted += 1;
                            }
                            Err(EventSyntaxError::UnsupportedCacheOp { .. }) => {
                                assert!(!supported, "{text}")
                            }
                            Err(e) => panic!("{text}: {e}"),
                        }
                        for (result, result_names) in RESULTS {
                            for r in *result_names {
                                for text in [
                                    format!("{cache_name}-{op_name}-{r}"),
                                    format!("{cache_name}-{r}-{op_name}"),
                                ] {
                                    match parse_event(&text) {
                                        Ok(e) => {
                                            assert!(supported, "{text}");
                                            assert_eq!(
                                                e.kind,
                                                cache(c.id, op.id, *result),
                                                "{text}"
                                            );
                                        }
                                        Err(EventSyntaxError::UnsupportedCacheOp { .. }) => {
                                            assert!(!supported, "{text}")
                                        }
                                        Err(e) => panic!("{text}: {e}"),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(accepted > 100);
    }

    #[test]
    fn perf_list_cache_names() {
        assert_eq!(kind("L1-dcache-loads"), cache(0, 0, 0));
        assert_eq!(kind("L1-dcache-load-misses"), cache(0, 0, 1));
        assert_eq!(kind("L1-dcache-stores"), cache(0, 1, 0));
        assert_eq!(kind("L1-icache-load-misses"), cache(1, 0, 1));
        assert_eq!(kind("LLC-loads"), cache(2, 0, 0));
        assert_eq!(kind("LLC-load-misses"), cache(2, 0, 1));
        assert_eq!(kind("LLC-store-misses"), cache(2, 1, 1));
        assert_eq!(kind("dTLB-load-misses"), cache(3, 0, 1));
        assert_eq!(kind("iTLB-load-misses"), cache(4, 0, 1));
        assert_eq!(kind("branch-loads"), cache(5, 0, 0));
        assert_eq!(kind("branch-load-misses"), cache(5, 0, 1));
        assert_eq!(kind("node-loads"), cache(6, 0, 0));
        assert_eq!(kind("node-store-misses"), cache(6, 1, 1));
        assert_eq!(kind("L1-dcache-misses"), cache(0, 0, 1));
        assert_eq!(kind("Data-TLB-speculative-read-miss"), cache(3, 2, 1));
        assert_eq!(kind("L2"), cache(2, 0, 0));
        assert_eq!(kind("bpu"), cache(5, 0, 0));
        for name in known_names() {
            assert!(parse_event(&name).is_ok(), "{name}");
        }
    }

    #[test]
    fn rejects_what_perf_rejects() {
        let e = parse_event("L1-icache-stores").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`L1-icache-stores`: the L1-icache cache has no store events (it has: load, prefetch)"
        );
        for text in ["iTLB-store-misses", "branch-prefetches", "bpu-write"] {
            assert!(
                matches!(
                    parse_event(text),
                    Err(EventSyntaxError::UnsupportedCacheOp { .. })
                ),
                "{text}"
            );
        }
        // Case-sensitive like perf's lexer, and no partial or doubled parts.
        for text in [
            "l1-dcache-loads",
            "LLC-",
            "LLC-loads-",
            "LLC-loads-loads",
            "LLC-misses-misses",
            "LLC-load-misses-x",
            "LLCloads",
            "nodes",
            "L1-dcache-Loads",
        ] {
            assert!(
                matches!(
                    parse_event(text),
                    Err(EventSyntaxError::UnknownEvent { .. })
                ),
                "{text}: {:?}",
                parse_event(text)
            );
        }
    }
}
