//! Parsing `/proc/self/mountinfo`, which is how cgperf finds cgroup2 and
//! tracefs wherever the host mounted them (pure v2, hybrid, custom paths).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One mount: where it is and what filesystem it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount point, with the kernel's octal escapes decoded.
    pub mount_point: PathBuf,
    /// The filesystem type (`cgroup2`, `tracefs`, `debugfs`, ...).
    pub fs_type: String,
}

/// Parses the bytes of a mountinfo file. Malformed lines are skipped: a line
/// cgperf cannot read cannot be the mount it is looking for.
///
/// Mount points are paths, not text: any mount on the host may sit under a
/// name that is not UTF-8 (a USB stick's label, a user's directory), and
/// that must neither hide the other mounts nor stop cgperf.
pub fn parse(text: &[u8]) -> Vec<Mount> {
    text.split(|&b| b == b'\n').filter_map(parse_line).collect()
}

/// Reads and parses `/proc/self/mountinfo`.
pub fn read() -> std::io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read("/proc/self/mountinfo")?))
}

/// The mount point of a filesystem of type `fs_type`, preferring the
/// conventional location `preferred` when it is one of them, else the first.
///
/// Of several mounts on the same point the last one wins: it shadows the
/// others. That is what a container sees when the host's cgroup2 is
/// bind-mounted over its own `/sys/fs/cgroup`.
pub fn find(mounts: &[Mount], fs_type: &str, preferred: &str) -> Option<PathBuf> {
    let visible = mounts.iter().enumerate().filter(|(i, m)| {
        m.fs_type == fs_type
            && !mounts[i + 1..]
                .iter()
                .any(|later| later.mount_point == m.mount_point)
    });
    let mut first = None;
    for (_, m) in visible {
        if m.mount_point.as_os_str() == preferred {
            return Some(m.mount_point.clone());
        }
        first.get_or_insert(&m.mount_point);
    }
    first.cloned()
}

// Format: id parent major:minor root mount_point options [optional...] - fstype source super_options
fn parse_line(line: &[u8]) -> Option<Mount> {
    let separator = line.windows(3).position(|w| w == b" - ")?;
    let (left, right) = (&line[..separator], &line[separator + 3..]);
    let mount_point = left.split(|&b| b == b' ').nth(4)?;
    let fs_type = right.split(|&b| b == b' ').next()?;
    Some(Mount {
        mount_point: PathBuf::from(OsString::from_vec(unescape(mount_point))),
        fs_type: String::from_utf8_lossy(fs_type).into_owned(),
    })
}

/// Decodes the `\ooo` octal escapes the kernel uses for space, tab, newline
/// and backslash in mount points.
fn unescape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match octal {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /sys/kernel/debug rw,relatime - debugfs debugfs rw
51 50 0:41 / /sys/kernel/debug/tracing rw,relatime shared:5 - tracefs tracefs rw
52 23 0:42 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw
garbage line
";

    #[test]
    fn finds_hybrid_cgroup2_and_tracefs() {
        let mounts = parse(HYBRID.as_bytes());
        assert_eq!(mounts.len(), 6);
        assert_eq!(
            find(&mounts, "cgroup2", "/sys/fs/cgroup"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            find(&mounts, "tracefs", "/sys/kernel/tracing"),
            Some(PathBuf::from("/sys/kernel/debug/tracing"))
        );
        assert_eq!(find(&mounts, "bpf", "/sys/fs/bpf"), None);
    }

    #[test]
    fn prefers_conventional_location_and_decodes_escapes() {
        let mounts = parse(HYBRID.as_bytes());
        assert_eq!(mounts[5].mount_point, PathBuf::from("/mnt/my cg"));
        assert_eq!(
            find(&mounts, "cgroup2", "/mnt/my cg"),
            Some(PathBuf::from("/mnt/my cg"))
        );
        let pure = "1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            find(&parse(pure.as_bytes()), "cgroup2", "/sys/fs/cgroup"),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
    }

    #[test]
    fn a_later_mount_on_the_same_point_shadows_the_earlier() {
        // A container's own cgroup2 at /sys/fs/cgroup, shadowed by the host's
        // bind-mounted over it, and a tmpfs shadowing a tracefs.
        let text = "\
1 0 0:1 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw
2 0 0:2 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw
3 0 0:3 / /sys/kernel/tracing rw - tracefs tracefs rw
4 0 0:4 / /sys/kernel/tracing rw - tmpfs tmpfs rw
5 0 0:5 / /mnt/t rw - tracefs tracefs rw
";
        let mounts = parse(text.as_bytes());
        assert_eq!(
            find(&mounts, "cgroup2", "/sys/fs/cgroup"),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            find(&mounts, "tracefs", "/sys/kernel/tracing"),
            Some(PathBuf::from("/mnt/t")),
            "the shadowed tracefs is not reachable"
        );
    }

    #[test]
    fn a_mount_point_that_is_not_utf8_hides_nothing() {
        use std::os::unix::ffi::OsStrExt;
        let text = b"1 0 0:1 / /media/caf\xe9 rw - vfat /dev/sdb1 rw\n\
2 0 0:2 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n\
3 0 0:3 / /mnt/\xff\\040x rw - cgroup2 cgroup2 rw\n";
        let mounts = parse(text);
        assert_eq!(mounts.len(), 3);
        assert_eq!(
            mounts[0].mount_point.as_os_str().as_bytes(),
            b"/media/caf\xe9"
        );
        assert_eq!(mounts[2].mount_point.as_os_str().as_bytes(), b"/mnt/\xff x");
        assert_eq!(
            find(&mounts, "cgroup2", "/sys/fs/cgroup"),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
    }

    #[test]
    fn this_machine_has_cgroup2() {
        let mounts = read().expect("mountinfo is readable");
        assert!(
            find(&mounts, "cgroup2", "/sys/fs/cgroup").is_some(),
            "cgperf needs a cgroup2 mount; this machine has none"
        );
    }
}
