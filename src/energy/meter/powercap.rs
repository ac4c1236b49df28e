//! RAPL through powercap: `/sys/class/powercap/intel-rapl:N` is package N
//! (its `name` is `package-N`, or `psys` for the platform), its subzones
//! `intel-rapl:N:M` the package's `core`, `dram` (and `uncore`, which
//! cgperf leaves out). Each zone's `energy_uj` counts micro-Joules and
//! wraps to 0 after `max_energy_range_uj`.

use super::{Busy, Channel, Meter};
use std::path::{Path, PathBuf};

/// Where the kernel shows powercap zones.
pub const POWERCAP: &str = "/sys/class/powercap";

/// One zone being read.
#[derive(Debug)]
struct Zone {
    dir: PathBuf,
    /// The counter's range: it wraps to 0 past it.
    max: u64,
    /// The last value read; `None` before the first read.
    last: Option<u64>,
}

/// The RAPL zones of powercap.
#[derive(Debug)]
pub struct Powercap {
    channels: Vec<Channel>,
    zones: Vec<Zone>,
}

/// The domain of a zone's `name`, and the socket a package's name gives.
fn domain_of(name: &str) -> Option<(&'static str, Option<u32>)> {
    if let Some(n) = name.strip_prefix("package-") {
        return Some(("pkg", n.parse().ok()));
    }
    match name {
        "core" => Some(("cores", None)),
        "dram" => Some(("ram", None)),
        "psys" => Some(("psys", Some(0))),
        _ => None,
    }
}

fn read_u64(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Micro-Joules between two readings of a counter that wraps to 0 past
/// `max`.
pub(crate) fn since(last: u64, now: u64, max: u64) -> u64 {
    match now.checked_sub(last) {
        Some(delta) => delta,
        None => max.saturating_sub(last).saturating_add(now),
    }
}

impl Powercap {
    /// The zones under `root` ([`POWERCAP`]), packages then their
    /// subzones, in name order; an error when there is none or one cannot
    /// be read.
    pub fn open(root: &Path) -> Result<Self, String> {
        let entries = std::fs::read_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("intel-rapl:"))
            .collect();
        names.sort_by_key(|n| (n.matches(':').count(), n.clone()));
        let mut channels = Vec::new();
        let mut zones = Vec::new();
        // Package zone id (`intel-rapl:N`) → its socket.
        let mut sockets = std::collections::BTreeMap::new();
        for name in names {
            let dir = root.join(&name);
            let Ok(zone_name) = std::fs::read_to_string(dir.join("name")) else {
                continue;
            };
            let Some((domain, socket)) = domain_of(zone_name.trim()) else {
                continue;
            };
            let ids: Vec<&str> = name["intel-rapl:".len()..].split(':').collect();
            let socket = match (socket, ids.as_slice()) {
                (Some(s), [id]) => {
                    sockets.insert(id.to_string(), s);
                    s
                }
                (_, [package, _]) => match sockets.get(*package) {
                    Some(s) => *s,
                    None => continue,
                },
                _ => continue,
            };
            let max = read_u64(&dir.join("max_energy_range_uj"))?;
            read_u64(&dir.join("energy_uj"))?;
            channels.push(Channel { domain, socket });
            zones.push(Zone {
                dir,
                max,
                last: None,
            });
        }
        if zones.is_empty() {
            return Err(format!("{} has no RAPL zone", root.display()));
        }
        Ok(Self { channels, zones })
    }
}

impl Meter for Powercap {
    fn source(&self) -> &'static str {
        "powercap"
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    fn read(&mut self, _busy: &Busy) -> (Vec<u64>, Option<String>) {
        let mut error = None;
        let deltas = self
            .zones
            .iter_mut()
            .map(|zone| match read_u64(&zone.dir.join("energy_uj")) {
                Ok(now) => {
                    let delta = zone.last.map_or(0, |last| since(last, now, zone.max));
                    zone.last = Some(now);
                    delta
                }
                Err(e) => {
                    error.get_or_insert(e);
                    0
                }
            })
            .collect();
        (deltas, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-socket machine's powercap as the kernel lays it out: two
    /// packages with `core` and `dram`, a `psys` zone, and `uncore` (left
    /// out).
    fn two_sockets() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let zone = |id: &str, name: &str, uj: u64| {
            let dir = root.path().join(format!("intel-rapl:{id}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("name"), format!("{name}\n")).unwrap();
            std::fs::write(dir.join("energy_uj"), format!("{uj}\n")).unwrap();
            std::fs::write(dir.join("max_energy_range_uj"), "262143328850\n").unwrap();
        };
        zone("0", "package-0", 1000);
        zone("0:0", "core", 500);
        zone("0:1", "dram", 200);
        zone("0:2", "uncore", 1);
        zone("1", "package-1", 3000);
        zone("1:0", "core", 10);
        zone("2", "psys", 7);
        std::fs::write(root.path().join("intel-rapl"), "not a zone").unwrap();
        root
    }

    fn set(root: &Path, id: &str, uj: u64) {
        let path = root.join(format!("intel-rapl:{id}/energy_uj"));
        std::fs::write(path, format!("{uj}\n")).unwrap();
    }

    #[test]
    fn zones_are_packages_and_their_domains_by_socket() {
        let root = two_sockets();
        let meter = Powercap::open(root.path()).unwrap();
        let got: Vec<(&str, u32)> = meter
            .channels()
            .iter()
            .map(|c| (c.domain, c.socket))
            .collect();
        assert_eq!(
            got,
            [
                ("pkg", 0),
                ("pkg", 1),
                ("psys", 0),
                ("cores", 0),
                ("ram", 0),
                ("cores", 1)
            ]
        );
    }

    #[test]
    fn readings_wrap_at_the_range_and_an_idle_socket_reads_zero() {
        let root = two_sockets();
        let mut meter = Powercap::open(root.path()).unwrap();
        let busy = Busy::default();
        assert_eq!(
            meter.read(&busy).0,
            [0; 6],
            "the first read starts counting"
        );
        // Socket 0's package wraps: 100 µJ before the range, 50 after.
        set(root.path(), "0", 262_143_328_850 - 100);
        meter.read(&busy);
        set(root.path(), "0", 50);
        set(root.path(), "0:0", 600);
        let (deltas, error) = meter.read(&busy);
        assert_eq!(error, None);
        // Socket 1 did nothing: zeros, not an error.
        assert_eq!(deltas, [150, 0, 0, 100, 0, 0]);
        set(root.path(), "0:0", 700);
        assert_eq!(meter.read(&busy).0[3], 100);
    }

    #[test]
    fn a_zone_that_cannot_be_read_counts_nothing_and_says_why() {
        let root = two_sockets();
        let mut meter = Powercap::open(root.path()).unwrap();
        meter.read(&Busy::default());
        std::fs::remove_file(root.path().join("intel-rapl:1/energy_uj")).unwrap();
        let (deltas, error) = meter.read(&Busy::default());
        assert_eq!(deltas[1], 0);
        assert!(error.unwrap().contains("intel-rapl:1/energy_uj"));
    }

    #[test]
    fn no_zone_is_an_error() {
        let root = tempfile::tempdir().unwrap();
        assert!(
            Powercap::open(root.path())
                .unwrap_err()
                .contains("no RAPL zone")
        );
        assert!(Powercap::open(&root.path().join("gone")).is_err());
    }

    #[test]
    fn since_handles_the_wrap() {
        assert_eq!(since(10, 25, 100), 15);
        assert_eq!(since(90, 5, 100), 15);
        assert_eq!(since(0, 0, 100), 0);
    }
}
