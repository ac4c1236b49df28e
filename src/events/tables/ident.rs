//! Which CPU this is, in the terms event tables match on: perf's x86 CPU id
//! (`GenuineIntel-6-8F-8`: vendor, family in decimal, model and stepping in
//! hex) or, on Arm, each CPU's MIDR (implementer, variant, architecture,
//! part number, revision), since the cores of one Arm machine may differ.

use std::collections::BTreeMap;
use std::path::Path;

/// The CPU as the event tables' `mapfile.csv` rows name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuIdent {
    /// perf's x86 id: `Vendor-Family-Model-Stepping`.
    X86(String),
    /// The MIDR_EL1 of each CPU that has one, by CPU number.
    Arm(BTreeMap<u32, u64>),
    /// Neither could be read.
    Unknown,
}

impl CpuIdent {
    /// Reads the x86 id from `cpuinfo` (normally `/proc/cpuinfo`) or the
    /// Arm MIDRs from `cpu_sysfs` (normally `/sys/devices/system/cpu`).
    pub fn read(cpuinfo: &Path, cpu_sysfs: &Path) -> Self {
        if let Some(id) = std::fs::read_to_string(cpuinfo)
            .ok()
            .and_then(|text| x86_id(&text))
        {
            return Self::X86(id);
        }
        let midrs = arm_midrs(cpu_sysfs);
        if midrs.is_empty() {
            Self::Unknown
        } else {
            Self::Arm(midrs)
        }
    }

    /// The directory of the architecture's tables in perf's layout.
    pub fn arch(&self) -> Option<&'static str> {
        match self {
            Self::X86(_) => Some("x86"),
            Self::Arm(_) => Some("arm64"),
            Self::Unknown => None,
        }
    }
}

impl std::fmt::Display for CpuIdent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::X86(id) => f.write_str(id),
            Self::Arm(midrs) => {
                let mut seen: Vec<u64> = midrs.values().copied().collect();
                seen.dedup();
                let list: Vec<String> = seen.iter().map(|m| format!("{m:#018x}")).collect();
                write!(f, "MIDR {}", list.join(", "))
            }
            Self::Unknown => f.write_str("an unknown CPU"),
        }
    }
}

/// perf's x86 id from the first processor of `/proc/cpuinfo`.
fn x86_id(cpuinfo: &str) -> Option<String> {
    let block = cpuinfo.split("\n\n").next()?;
    let field = |key: &str| {
        block.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let vendor = field("vendor_id")?;
    let family: u32 = field("cpu family")?.parse().ok()?;
    let model: u32 = field("model")?.parse().ok()?;
    let stepping: u32 = field("stepping")?.parse().ok()?;
    Some(format!("{vendor}-{family}-{model:X}-{stepping:X}"))
}

/// `cpuN/regs/identification/midr_el1` of every CPU that has one.
fn arm_midrs(cpu_sysfs: &Path) -> BTreeMap<u32, u64> {
    let Ok(entries) = std::fs::read_dir(cpu_sysfs) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let cpu: u32 = name.strip_prefix("cpu")?.parse().ok()?;
            let path = entry.path().join("regs/identification/midr_el1");
            let text = std::fs::read_to_string(path).ok()?;
            let midr = u64::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()?;
            Some((cpu, midr))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_id_is_perfs() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\n\nprocessor\t: 1\nvendor_id\t: Other\n";
        assert_eq!(x86_id(cpuinfo).as_deref(), Some("GenuineIntel-6-8F-8"));
        let zen5 = "vendor_id : AuthenticAMD\ncpu family : 26\nmodel : 2\nstepping : 1\n";
        assert_eq!(x86_id(zen5).as_deref(), Some("AuthenticAMD-26-2-1"));
        assert_eq!(x86_id("vendor_id : X\ncpu family : six\n"), None);
    }

    #[test]
    fn arm_midrs_are_read_per_cpu() {
        let dir = tempfile::tempdir().unwrap();
        for (cpu, midr) in [(0, "0x00000000410fd0c0\n"), (4, "0x00000000414fd0b1")] {
            let path = dir.path().join(format!("cpu{cpu}/regs/identification"));
            std::fs::create_dir_all(&path).unwrap();
            std::fs::write(path.join("midr_el1"), midr).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("cpufreq")).unwrap();
        let ident = CpuIdent::read(&dir.path().join("no-cpuinfo"), dir.path());
        let want = BTreeMap::from([(0, 0x410f_d0c0), (4, 0x414f_d0b1)]);
        assert_eq!(ident, CpuIdent::Arm(want));
        assert_eq!(
            ident.to_string(),
            "MIDR 0x00000000410fd0c0, 0x00000000414fd0b1"
        );
    }
}
