//! Reading `/proc`: every process with its parent, start time, state and
//! name, and, for the processes a selector asks about, their executable,
//! command line and threads. A process that exits while it is read is
//! simply not there: every read here may fail that way.
//!
//! A process names itself with whatever bytes it likes (`prctl`, or the
//! file it runs): a name or argument that is not UTF-8 is written as
//! cgroup names are ([`escape`]), so that such a process is matched,
//! labelled and followed like any other, never skipped.

use crate::escape::escape;
use std::path::{Path, PathBuf};

/// Where the kernel lists processes.
pub const PROC_ROOT: &str = "/proc";

/// One process, as its `stat` file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Its id.
    pub pid: u32,
    /// Its parent's id.
    pub ppid: u32,
    /// When it started, in clock ticks since boot: with `pid`, which
    /// process this is even after its pid is taken again.
    pub start: u64,
    /// The task name the kernel keeps (15 bytes), escaped where it is
    /// not UTF-8.
    pub comm: String,
    /// It exited and waits to be reaped (`Z`) or is going away (`X`).
    pub dead: bool,
}

impl Seen {
    /// The process, across pid reuse.
    pub fn id(&self) -> (u32, u64) {
        (self.pid, self.start)
    }
}

/// Every process under `root` now, by pid. `Err` only when `root` itself
/// cannot be listed.
pub fn all_processes(root: &Path) -> std::io::Result<Vec<Seen>> {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(bytes) = std::fs::read(entry.path().join("stat")) else {
            continue;
        };
        if let Some(s) = parse_stat(pid, &bytes) {
            seen.push(s);
        }
    }
    seen.sort_unstable_by_key(|s| s.pid);
    Ok(seen)
}

/// Splits `/proc/PID/stat` (`pid (comm) state ppid ...`) into the name,
/// as bytes, and the fields after it from the third on: the name is
/// whatever lies between the first `(` and the last `)`, spaces,
/// parentheses and bytes that are not UTF-8 included; the fields are
/// numbers and a state letter.
pub fn split_stat(bytes: &[u8]) -> Option<(&[u8], &str)> {
    let open = bytes.iter().position(|&b| b == b'(')?;
    let close = bytes.iter().rposition(|&b| b == b')')?;
    let comm = bytes.get(open + 1..close)?;
    let fields = std::str::from_utf8(bytes.get(close + 1..)?).ok()?;
    Some((comm, fields))
}

/// Parses `/proc/PID/stat` (see [`split_stat`]): the parent is the 4th
/// field and the start time the 22nd.
pub fn parse_stat(pid: u32, bytes: &[u8]) -> Option<Seen> {
    let (comm, rest) = split_stat(bytes)?;
    let comm = escape(comm);
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    // Fields 5 to 21 lie between the parent and the start time.
    let start = fields.nth(17)?.parse().ok()?;
    Some(Seen {
        pid,
        ppid,
        start,
        comm,
        dead: matches!(state, "Z" | "X" | "x"),
    })
}

/// The executable of `pid`. Kernel threads have none and a process may be
/// gone (`NotFound`); reading another user's, or one with capabilities
/// cgperf gave up, needs `CAP_SYS_PTRACE` (`PermissionDenied`).
pub fn exe(root: &Path, pid: u32) -> std::io::Result<PathBuf> {
    std::fs::read_link(root.join(pid.to_string()).join("exe"))
}

/// The command line of `pid`, its arguments (escaped where they are not
/// UTF-8) joined by one space; `None` when it is gone (empty for kernel
/// threads).
pub fn cmdline(root: &Path, pid: u32) -> Option<String> {
    let raw = std::fs::read(root.join(pid.to_string()).join("cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|arg| !arg.is_empty())
        .map(escape)
        .collect();
    Some(args.join(" "))
}

/// The children of `pid` now, as its threads' `children` files list them
/// (ascending); empty when it is gone (or the kernel does not list
/// children: `CONFIG_PROC_CHILDREN`).
///
/// The kernel gives a page of such a file per `read()` and starts the
/// next at the index where the last stopped, so that a child that goes
/// away in between makes one listed later skipped: a file longer than a
/// page is read again until two readings agree (three at most).
pub fn children(root: &Path, pid: u32) -> Vec<u32> {
    let (mut last, mut paged) = list_children(root, pid);
    for _ in 0..2 {
        if !paged {
            break;
        }
        let again;
        (again, paged) = list_children(root, pid);
        if again == last {
            break;
        }
        last = again;
    }
    last
}

/// One reading of the `children` files of every thread of `pid`, and
/// whether one took more than a read (a page).
fn list_children(root: &Path, pid: u32) -> (Vec<u32>, bool) {
    const PAGE: usize = 4096;
    let task = root.join(pid.to_string()).join("task");
    let lists: Vec<Vec<u8>> = threads(root, pid)
        .into_iter()
        .filter_map(|tid| std::fs::read(task.join(tid.to_string()).join("children")).ok())
        .collect();
    let paged = lists.iter().any(|list| list.len() >= PAGE);
    let mut pids: Vec<u32> = lists
        .iter()
        .flat_map(|list| {
            list.split(u8::is_ascii_whitespace)
                .filter_map(|c| std::str::from_utf8(c).ok()?.parse().ok())
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    (pids, paged)
}

/// Whether thread `tid` of `pid` is where it cannot be creating a thread
/// or process: sleeping interruptibly (`S`) or stopped (`T`, `t`), since
/// the creation of a task sleeps only uninterruptibly (`D`), or runnable
/// but never run yet (a child just created, waiting for a CPU). False
/// when it is gone.
pub fn resting(root: &Path, pid: u32, tid: u32) -> bool {
    let task = root
        .join(pid.to_string())
        .join("task")
        .join(tid.to_string());
    let Ok(bytes) = std::fs::read(task.join("stat")) else {
        return false;
    };
    match split_stat(&bytes).and_then(|(_, fields)| fields.split_ascii_whitespace().next()) {
        Some("S" | "T" | "t") => true,
        // `schedstat`: time run, time waited, times run.
        Some("R") => std::fs::read_to_string(task.join("schedstat"))
            .is_ok_and(|line| line.split_ascii_whitespace().nth(2) == Some("0")),
        _ => false,
    }
}

/// Whether thread `tid` of process `pid` is still listed.
pub fn thread_exists(root: &Path, pid: u32, tid: u32) -> bool {
    root.join(pid.to_string())
        .join("task")
        .join(tid.to_string())
        .exists()
}

/// Process `pid` as its `stat` says; `None` when it is gone.
pub fn stat(root: &Path, pid: u32) -> Option<Seen> {
    parse_stat(
        pid,
        &std::fs::read(root.join(pid.to_string()).join("stat")).ok()?,
    )
}

/// The threads of `pid`, ascending; empty when it is gone.
pub fn threads(root: &Path, pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(root.join(pid.to_string()).join("task")) else {
        return Vec::new();
    };
    let mut tids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_spaces_and_parentheses_ends_at_the_last_parenthesis() {
        let text = "4242 (a) (b c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 10 18446744073709551615\n";
        let seen = parse_stat(4242, text.as_bytes()).expect("parses");
        assert_eq!(seen.comm, "a) (b c)");
        assert_eq!((seen.ppid, seen.start, seen.dead), (17, 987654, false));
    }

    #[test]
    fn zombies_are_dead_and_short_lines_are_nothing() {
        let text = "7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0\n";
        assert!(parse_stat(7, text.as_bytes()).expect("parses").dead);
        assert_eq!(parse_stat(7, b"7 (x) S 1 2 3"), None);
        assert_eq!(parse_stat(7, b"garbage"), None);
        assert_eq!(parse_stat(7, b")("), None);
        assert_eq!(parse_stat(7, b""), None);
    }

    #[test]
    fn a_name_that_is_not_utf8_is_escaped_as_cgroup_names_are() {
        let text = b"9 (a\xff)\xfe() S 3 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0\n";
        let seen = parse_stat(9, text).expect("parses");
        assert_eq!(seen.comm, "a\\xFF)\\xFE(");
        assert_eq!((seen.ppid, seen.start), (3, 77));
        // A name that is UTF-8 and reads as those escapes tells apart.
        let other = b"9 (a\\xFF)\\xFE() S 3 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0\n";
        let other = parse_stat(9, other).expect("parses");
        assert_eq!(other.comm, "a\\\\xFF)\\\\xFE(");
    }

    #[test]
    fn a_child_of_this_process_is_listed_with_its_stat() {
        let root = Path::new(PROC_ROOT);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        let listed = children(root, std::process::id()).contains(&pid);
        let seen = stat(root, pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(listed, "{pid} not among the children");
        let seen = seen.expect("its stat");
        assert_eq!(seen.ppid, std::process::id());
        assert_eq!(stat(root, pid), None, "gone once reaped");
        assert_eq!(children(root, u32::MAX), Vec::<u32>::new());
    }

    #[test]
    fn this_process_is_found_with_its_parent_threads_and_command_line() {
        let me = std::process::id();
        let root = Path::new(PROC_ROOT);
        let all = all_processes(root).expect("/proc lists");
        let found = all.iter().find(|s| s.pid == me).expect("this process");
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        assert_eq!(i64::from(found.ppid), i64::from(parent));
        assert!(!found.dead && found.start > 0);
        assert!(threads(root, me).contains(&me));
        let cmdline = cmdline(root, me).expect("a command line");
        let arg0 = std::env::args().next().expect("argv[0]");
        assert!(cmdline.starts_with(&arg0), "{cmdline}");
        assert_eq!(exe(root, me).ok(), std::env::current_exe().ok());
        assert!(all.windows(2).all(|w| w[0].pid < w[1].pid));
    }
}
