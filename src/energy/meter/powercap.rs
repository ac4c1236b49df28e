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

/// The most a zone's file is read of: sysfs shows every attribute as 4 KiB.
const MAX_ZONE_FILE: u64 = 4096;

/// The count in the zone file at `path`: a regular file (never a FIFO or
/// device, whose reads could wait or never end), at most
/// [`MAX_ZONE_FILE`], holding one count; the error names the file.
fn read_u64(path: &Path) -> Result<u64, String> {
    let bytes = crate::userfile::read(path, MAX_ZONE_FILE)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    text.trim().parse().map_err(|e| {
        format!(
            "{}: `{}` is not a count of micro-Joules ({e})",
            path.display(),
            text.trim().chars().take(40).collect::<String>()
        )
    })
}

/// Micro-Joules between two readings of a counter that wraps to 0 past
/// `max`: never more than `max`, which is all a counter can count between
/// two readings that tell its wraps apart (a reading past its range says
/// nothing more).
pub(crate) fn since(last: u64, now: u64, max: u64) -> u64 {
    let delta = match now.checked_sub(last) {
        Some(delta) => delta,
        None => max.saturating_sub(last).saturating_add(now),
    };
    delta.min(max)
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
            // Read as the counts are: a `name` that is a FIFO or a device
            // is no zone, and never waited on.
            let Ok(zone_name) = crate::userfile::read(&dir.join("name"), MAX_ZONE_FILE) else {
                continue;
            };
            let Some((domain, socket)) = domain_of(String::from_utf8_lossy(&zone_name).trim())
            else {
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
            let range = dir.join("max_energy_range_uj");
            let max = read_u64(&range)?;
            if max == 0 {
                return Err(format!(
                    "{}: the range is 0, so the counter's wraps cannot be told",
                    range.display()
                ));
            }
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

    /// Opens the tree at `root` on another thread: a reader that blocks
    /// (on a FIFO, a device) fails the test instead of hanging it.
    fn open_within(root: &Path) -> Result<Powercap, String> {
        let root = root.to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(Powercap::open(&root).map(|_| ()));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Powercap {
                channels: Vec::new(),
                zones: Vec::new(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => panic!("opening {} blocked", "the zone"),
        }
    }

    /// A way a zone file goes wrong: what, how it is made, what the error
    /// says.
    type Case<'a> = (&'a str, &'a dyn Fn(&Path), &'a str);

    /// What a zone's file may be instead of a number, each refused when
    /// the meter opens, with the file named and what it is, never read
    /// whole or waited on.
    #[test]
    fn a_zone_file_that_is_no_number_is_refused_naming_it() {
        let fifo = |path: &Path| {
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: mkfifo reads the NUL-terminated path we own.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        };
        let cases: [Case<'_>; 8] = [
            ("a FIFO", &|p| fifo(p), "FIFO"),
            (
                "a directory",
                &|p| std::fs::create_dir(p).unwrap(),
                "directory",
            ),
            (
                "a device",
                &|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap(),
                "character device",
            ),
            (
                "unreadable, even by root",
                &|p| std::os::unix::fs::symlink("/proc/sys/vm/drop_caches", p).unwrap(),
                "denied",
            ),
            (
                "huge",
                &|p| {
                    let f = std::fs::File::create(p).unwrap();
                    f.set_len(1 << 40).unwrap();
                },
                "larger than",
            ),
            (
                "negative",
                &|p| std::fs::write(p, "-5\n").unwrap(),
                "not a count of micro-Joules",
            ),
            (
                "past 64 bits",
                &|p| std::fs::write(p, "184467440737095516160\n").unwrap(),
                "not a count of micro-Joules",
            ),
            (
                "empty",
                &|p| std::fs::write(p, "").unwrap(),
                "not a count of micro-Joules",
            ),
        ];
        // A `name` that is a FIFO: no zone, not a wait.
        let root = two_sockets();
        let name = root.path().join("intel-rapl:1/name");
        std::fs::remove_file(&name).unwrap();
        fifo(&name);
        assert!(open_within(root.path()).is_ok());
        for file in ["energy_uj", "max_energy_range_uj"] {
            for (what, make, says) in &cases {
                let root = two_sockets();
                let path = root.path().join("intel-rapl:1").join(file);
                std::fs::remove_file(&path).unwrap();
                make(&path);
                let e = match open_within(root.path()) {
                    Ok(_) => panic!("{file} {what}: opened"),
                    Err(e) => e,
                };
                assert!(
                    e.contains("intel-rapl:1/") && e.contains(file),
                    "{what}: {e}"
                );
                assert!(e.contains(says), "{file} {what}: {e}");
            }
        }
    }

    /// A range of 0 says nothing of where the counter wraps: the zone is
    /// refused rather than read with wraps it cannot tell.
    #[test]
    fn a_range_of_zero_is_refused() {
        let root = two_sockets();
        let path = root.path().join("intel-rapl:0:1/max_energy_range_uj");
        std::fs::write(&path, "0\n").unwrap();
        let e = open_within(root.path()).expect_err("refused");
        assert!(
            e.contains("intel-rapl:0:1/max_energy_range_uj") && e.contains("0"),
            "{e}"
        );
    }

    /// A file that turns into a FIFO after the open: the read says so and
    /// counts nothing, without waiting; readings beyond the range or going
    /// back never count more than the range.
    #[test]
    fn a_zone_that_turns_bad_while_read_counts_nothing() {
        let root = two_sockets();
        let mut meter = Powercap::open(root.path()).unwrap();
        meter.read(&Busy::default());
        let path = root.path().join("intel-rapl:1/energy_uj");
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (deltas, error) = meter.read(&Busy::default());
        assert_eq!(deltas[1], 0);
        assert!(error.unwrap().contains("FIFO"));
        // Above its range, then back below: a wrap, at most the range.
        set(root.path(), "0", u64::MAX);
        meter.read(&Busy::default());
        set(root.path(), "0", 10);
        let (deltas, _) = meter.read(&Busy::default());
        assert!(deltas[0] <= 262_143_328_850, "{deltas:?}");
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
        // Readings past the range: never more than the range.
        assert_eq!(since(5, u64::MAX, 100), 100);
        assert_eq!(since(u64::MAX, 10, 100), 10);
    }
}
