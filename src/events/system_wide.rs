//! What sysfs says about PMUs outside the cores (uncore, `power`,
//! `cstate_*`): the kernel counts their events only system-wide, on the
//! CPUs of the PMU's `cpumask` file (one per socket or die), and refuses
//! them per task or cgroup; and an alias may come with `.scale` and `.unit`
//! files that turn its raw count into a physical quantity
//! (`power/energy-pkg/` in Joules). perf reads both the same way
//! (`perf stat -a` opens such an event on the `cpumask` CPUs only).

use std::path::Path;

use super::{Event, EventKind, PmuSpec, ResolveError};

/// The CPUs the kernel counts `event` on, when its PMU counts only
/// system-wide (its sysfs directory under `pmu_root` has a `cpumask`);
/// `None` for every other event (the cores' PMUs, software events,
/// tracepoints, `msr`), which count per task and on every CPU.
pub fn cpumask(pmu_root: &Path, event: &Event) -> Result<Option<Vec<u32>>, ResolveError> {
    let EventKind::Pmu { pmu, .. } = &event.kind else {
        return Ok(None);
    };
    if !super::is_valid_name(pmu) {
        return Ok(None);
    }
    let path = pmu_root.join(pmu).join("cpumask");
    let Some(text) = read_optional(&path)? else {
        return Ok(None);
    };
    let cpus = crate::cpus::parse_list(&text).map_err(|_| ResolveError::BadSysfsFile {
        path: path.clone(),
        content: text.trim().to_owned(),
        problem: "expected a CPU list such as `0,18`",
    })?;
    if cpus.is_empty() {
        return Err(ResolveError::BadSysfsFile {
            path,
            content: text.trim().to_owned(),
            problem: "the PMU names no CPU to count on",
        });
    }
    Ok(Some(cpus))
}

/// What one unit of an alias's raw count is, from its `.scale` and `.unit`
/// files: `value × scale` is in `unit`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleUnit {
    /// The factor; 1 when only `.unit` is there.
    pub scale: f64,
    /// The unit as the kernel writes it (`Joules`, `MiB`); empty when only
    /// `.scale` is there.
    pub unit: String,
}

/// The scale and unit of `event`, when it names an alias of a PMU under
/// `pmu_root` that has either file; `None` for every other event.
pub fn scale_unit(pmu_root: &Path, event: &Event) -> Result<Option<ScaleUnit>, ResolveError> {
    let EventKind::Pmu { pmu, spec } = &event.kind else {
        return Ok(None);
    };
    let names: Vec<&str> = match spec {
        PmuSpec::Alias(name) => vec![name],
        PmuSpec::Terms(terms) => terms
            .iter()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.as_str())
            .collect(),
    };
    if !super::is_valid_name(pmu) {
        return Ok(None);
    }
    let events = pmu_root.join(pmu).join("events");
    for name in names.into_iter().filter(|n| super::is_valid_name(n)) {
        let scale_path = events.join(format!("{name}.scale"));
        let scale = read_optional(&scale_path)?;
        let unit = read_optional(&events.join(format!("{name}.unit")))?;
        if scale.is_none() && unit.is_none() {
            continue;
        }
        let scale = match scale {
            None => 1.0,
            Some(text) => match text.trim().parse::<f64>() {
                Ok(scale) if scale.is_finite() && scale > 0.0 => scale,
                _ => {
                    return Err(ResolveError::BadSysfsFile {
                        path: scale_path,
                        content: text.trim().to_owned(),
                        problem: "expected a positive number such as `2.3283064365386962890625e-10`",
                    });
                }
            },
        };
        let unit = unit.map(|u| u.trim().to_owned()).unwrap_or_default();
        return Ok(Some(ScaleUnit { scale, unit }));
    }
    Ok(None)
}

/// A sysfs file that may be missing, as text.
fn read_optional(path: &Path) -> Result<Option<String>, ResolveError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ResolveError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::parse_event;
    use std::fs;

    /// A PMU root shaped like a two-socket Intel server's (the kernel's
    /// documented sysfs layout): `power` and `uncore_imc_0` count on one
    /// CPU per socket; `cpu` and `msr` on every CPU.
    fn server() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let files = [
            ("cpu/type", "4\n"),
            ("msr/type", "12\n"),
            ("msr/events/tsc", "event=0x00\n"),
            ("power/type", "21\n"),
            ("power/cpumask", "0,28\n"),
            ("power/events/energy-pkg", "event=0x02\n"),
            (
                "power/events/energy-pkg.scale",
                "2.3283064365386962890625e-10\n",
            ),
            ("power/events/energy-pkg.unit", "Joules\n"),
            ("uncore_imc_0/type", "14\n"),
            ("uncore_imc_0/cpumask", "0-0,28\n"),
            (
                "uncore_imc_0/events/cas_count_read",
                "event=0x04,umask=0x0f\n",
            ),
            (
                "uncore_imc_0/events/cas_count_read.scale",
                "6.103515625e-5\n",
            ),
            ("uncore_imc_0/events/cas_count_read.unit", "MiB\n"),
            ("uncore_imc_0/events/clockticks", "event=0x00,umask=0x00\n"),
            ("bad/type", "30\n"),
            ("bad/cpumask", "zero\n"),
            ("bad/events/x", "event=1\n"),
            ("bad/events/x.scale", "-1\n"),
        ];
        for (path, content) in files {
            let path = root.path().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
        root
    }

    fn mask(root: &Path, text: &str) -> Option<Vec<u32>> {
        cpumask(root, &parse_event(text).unwrap()).unwrap()
    }

    fn unit(root: &Path, text: &str) -> Option<ScaleUnit> {
        scale_unit(root, &parse_event(text).unwrap()).unwrap()
    }

    #[test]
    fn the_pmus_with_a_cpumask_count_only_there() {
        let root = server();
        let r = root.path();
        assert_eq!(mask(r, "power/energy-pkg/"), Some(vec![0, 28]));
        assert_eq!(mask(r, "uncore_imc_0/cas_count_read/"), Some(vec![0, 28]));
        assert_eq!(mask(r, "uncore_imc_0/event=0x4/"), Some(vec![0, 28]));
        for per_task in ["msr/tsc/", "cpu/event=0x3c/", "cycles", "context-switches"] {
            assert_eq!(mask(r, per_task), None, "{per_task}");
        }
        let bad = cpumask(r, &parse_event("bad/x/").unwrap()).unwrap_err();
        assert!(bad.to_string().contains("cpumask"), "{bad}");
        assert!(bad.to_string().contains("zero"), "{bad}");
    }

    #[test]
    fn aliases_with_scale_and_unit_files_say_what_a_count_is() {
        let root = server();
        let r = root.path();
        let energy = unit(r, "power/energy-pkg/").unwrap();
        assert_eq!(energy.scale, 2f64.powi(-32));
        assert_eq!(energy.unit, "Joules");
        let read = unit(r, "uncore_imc_0/cas_count_read/").unwrap();
        assert_eq!((read.scale, read.unit.as_str()), (6.103515625e-5, "MiB"));
        // Written as terms too, as perf takes them.
        let read = unit(r, "uncore_imc_0/cas_count_read,umask=0xf/").unwrap();
        assert_eq!(read.unit, "MiB");
        assert_eq!(unit(r, "uncore_imc_0/clockticks/"), None);
        assert_eq!(unit(r, "uncore_imc_0/event=0x4/"), None);
        assert_eq!(unit(r, "msr/tsc/"), None);
        assert_eq!(unit(r, "cycles"), None);
        let bad = scale_unit(r, &parse_event("bad/x/").unwrap()).unwrap_err();
        assert!(bad.to_string().contains("x.scale"), "{bad}");
    }
}
