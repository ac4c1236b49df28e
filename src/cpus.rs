//! Which CPUs are online, from the kernel's CPU list format (`0-3,5,7-8`),
//! being told when that changes, and keeping the calling thread on one of
//! them.

use std::os::fd::AsRawFd;

/// Path of the online CPU list.
pub const ONLINE: &str = "/sys/devices/system/cpu/online";

/// Parses a kernel CPU list such as `0-3,5`.
pub fn parse_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("malformed CPU list entry `{part}`");
        let (lo, hi): (u32, u32) = match part.split_once('-') {
            Some((lo, hi)) => (
                lo.parse().map_err(|_| bad())?,
                hi.parse().map_err(|_| bad())?,
            ),
            None => {
                let n = part.parse().map_err(|_| bad())?;
                (n, n)
            }
        };
        if lo > hi || hi - lo > 65_536 {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The CPUs online now.
pub fn online() -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(ONLINE).map_err(|e| format!("reading {ONLINE}: {e}"))?;
    parse_list(&text).map_err(|e| format!("{ONLINE}: {e}"))
}

/// Calls `changed` from a thread of its own whenever the kernel says a CPU
/// went offline or came online (its uevents, which it sends as the change
/// is made), until `changed` returns false. A CPU's counters must be
/// opened again when it comes back, and what runs there before they are
/// is not counted: waiting for the next collection to notice lost up to a
/// whole interval of it. `Err` when the kernel's uevents cannot be
/// listened to (then collections notice, as before).
///
/// The uevent socket is written by hand over `libc`: the crates that read
/// uevents come with a whole device manager's model (or libudev), for a
/// socket, a bind and a loop here.
pub fn watch(changed: impl Fn() -> bool + Send + 'static) -> Result<(), String> {
    let socket = uevent_socket()?;
    std::thread::Builder::new()
        .name("cgperf-cpus".into())
        .spawn(move || {
            let mut buffer = vec![0u8; 16 * 1024];
            loop {
                // SAFETY: receiving into our own buffer, of its length.
                let n = unsafe {
                    libc::recv(
                        socket.as_raw_fd(),
                        buffer.as_mut_ptr().cast(),
                        buffer.len(),
                        0,
                    )
                };
                let notify = match usize::try_from(n) {
                    Ok(n) => is_cpu_change(&buffer[..n.min(buffer.len())]),
                    Err(_) => match std::io::Error::last_os_error() {
                        // Uevents were dropped, a CPU's among them maybe.
                        e if e.raw_os_error() == Some(libc::ENOBUFS) => true,
                        e if e.kind() == std::io::ErrorKind::Interrupted => false,
                        // Anything else would come back at once, forever:
                        // collections notice CPUs from here on.
                        e => {
                            tracing::warn!(
                                "no longer following the kernel's CPU uevents ({e}): a CPU \
                                 coming back online is counted from the next collection"
                            );
                            return;
                        }
                    },
                };
                if notify && !changed() {
                    return;
                }
            }
        })
        .map(drop)
        .map_err(|e| format!("starting the thread that follows CPUs: {e}"))
}

/// A netlink socket bound to the kernel's uevents.
fn uevent_socket() -> Result<std::os::fd::OwnedFd, String> {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain socket call; the descriptor is owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_KOBJECT_UEVENT,
        )
    };
    if fd < 0 {
        return Err(format!(
            "opening a uevent socket: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a fresh descriptor, owned by nothing else.
    let socket = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_nl is valid; its family and groups are set.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // Group 1: the kernel's own uevents (udev's are group 2).
    addr.nl_groups = 1;
    // SAFETY: binding our socket to an address of the size given.
    let bound = unsafe {
        libc::bind(
            socket.as_raw_fd(),
            std::ptr::from_ref(&addr).cast(),
            std::mem::size_of_val(&addr) as libc::socklen_t,
        )
    };
    if bound != 0 {
        return Err(format!(
            "listening to the kernel's uevents: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(socket)
}

/// Whether a kernel uevent (`ACTION@DEVPATH` then `KEY=value` fields, each
/// ended by a NUL) says a CPU went offline or came online, or was added or
/// removed.
fn is_cpu_change(message: &[u8]) -> bool {
    let mut fields = message.split(|&b| b == 0);
    fields.next();
    let (mut cpu, mut action) = (false, false);
    for field in fields {
        match field {
            b"SUBSYSTEM=cpu" => cpu = true,
            b"ACTION=online" | b"ACTION=offline" | b"ACTION=add" | b"ACTION=remove" => {
                action = true
            }
            _ => {}
        }
    }
    cpu && action
}

/// Keeps the calling thread on one CPU at a time while it lives, and puts
/// it back on the CPUs it was allowed before when dropped.
///
/// The sampler hands a reopened group over on the CPU it counts on: while
/// this thread runs there, no task of any other cgroup does, so nothing
/// happens on that CPU between the new group's start and the old one's
/// final read.
#[derive(Debug)]
pub struct Pin {
    /// The CPU set before the first move; `None` when it could not be read
    /// (then the thread is never moved).
    before: Option<libc::cpu_set_t>,
    moved: bool,
}

impl Pin {
    /// Remembers the calling thread's CPUs.
    pub fn new() -> Self {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel writes
        // at most its size into it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the size passed is the size of `set`.
        let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
        Self {
            before: ok.then_some(set),
            moved: false,
        }
    }

    /// Moves the calling thread onto `cpu` alone; false if it cannot (a CPU
    /// beyond the set's size, outside the cpuset cgperf may use, or
    /// offline): the thread then stays where it may run.
    pub fn to(&mut self, cpu: u32) -> bool {
        let Some(before) = &self.before else {
            return false;
        };
        let index = cpu as usize;
        // SAFETY: CPU_ISSET only reads within the set (it checks the index).
        if index >= libc::CPU_SETSIZE as usize || !unsafe { libc::CPU_ISSET(index, before) } {
            return false;
        }
        // SAFETY: as in `new`; CPU_SET checked the index above.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(index, &mut set) };
        // SAFETY: the size passed is the size of `set`.
        let ok = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } == 0;
        self.moved |= ok;
        ok
    }
}

/// The calling thread's context switches so far, voluntary or not
/// (`None` if the kernel does not say): the same before and after some work
/// on the one CPU the thread is [`Pin`]ned to, no other task ran there
/// meanwhile.
pub fn switches_of_this_thread() -> Option<u64> {
    // SAFETY: a zeroed rusage is valid; the kernel writes at most its size.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD with a pointer to our own rusage.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } == 0;
    ok.then(|| (usage.ru_nvcsw as u64).wrapping_add(usage.ru_nivcsw as u64))
}

impl Default for Pin {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let (true, Some(before)) = (self.moved, &self.before) {
            // SAFETY: the size passed is the size of `before`. A failure
            // leaves the thread on one CPU: slower, never wrong.
            let _ = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(before), before) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_online_cpus_follow_changes_in_order_each_once() {
        let mut online = vec![0, 1, 2];
        let changes = CpuChanges {
            open: vec![3, 0],
            closed: vec![1],
        };
        changes.follow(&mut online);
        assert_eq!(online, [0, 2, 3]);
    }

    #[test]
    fn a_cpu_going_offline_or_online_is_told_from_other_uevents() {
        let online = b"online@/devices/system/cpu/cpu1\0ACTION=online\0\
                       DEVPATH=/devices/system/cpu/cpu1\0SUBSYSTEM=cpu\0SEQNUM=4012\0";
        assert!(is_cpu_change(online));
        let offline = b"offline@/devices/system/cpu/cpu1\0ACTION=offline\0\
                        DEVPATH=/devices/system/cpu/cpu1\0SUBSYSTEM=cpu\0SEQNUM=4011\0";
        assert!(is_cpu_change(offline));
        let disk = b"change@/devices/virtual/block/loop0\0ACTION=change\0\
                     DEVPATH=/devices/virtual/block/loop0\0SUBSYSTEM=block\0";
        assert!(!is_cpu_change(disk));
        let memory = b"online@/devices/system/memory/memory8\0ACTION=online\0\
                       SUBSYSTEM=memory\0";
        assert!(!is_cpu_change(memory));
        assert!(!is_cpu_change(b""));
        assert!(!is_cpu_change(b"SUBSYSTEM=cpu"), "a header alone");
    }

    #[test]
    fn parses_ranges_and_singles() {
        assert_eq!(parse_list("0-3,5,7-8\n"), Ok(vec![0, 1, 2, 3, 5, 7, 8]));
        assert_eq!(parse_list("0"), Ok(vec![0]));
        assert_eq!(parse_list(""), Ok(vec![]));
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("a").is_err());
        assert!(parse_list("0-99999999").is_err());
    }

    #[test]
    fn a_pin_moves_the_thread_and_puts_it_back() {
        std::thread::spawn(|| {
            let cpus = || {
                let status = std::fs::read_to_string("/proc/thread-self/status").expect("procfs");
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .map(|l| parse_list(l.trim()).expect("kernel list"))
                    .expect("Cpus_allowed_list")
            };
            let before = cpus();
            let last = *before.last().expect("some CPU allowed");
            {
                let mut pin = Pin::new();
                assert!(pin.to(last));
                assert_eq!(cpus(), vec![last]);
                assert!(!pin.to(u32::MAX), "no such CPU");
                assert_eq!(cpus(), vec![last]);
            }
            assert_eq!(cpus(), before);
        })
        .join()
        .expect("test thread");
    }

    #[test]
    fn this_machine_has_an_online_cpu() {
        assert!(!online().expect("online list readable").is_empty());
    }
}

/// What changed among the online CPUs since the last look.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CpuChanges {
    /// CPUs that are online and whose events must be opened (again).
    pub open: Vec<u32>,
    /// CPUs that went offline: their events are dead.
    pub closed: Vec<u32>,
}

impl CpuChanges {
    /// Makes `online` (in order) what it is after these changes: without
    /// the CPUs that went offline, with those that came online.
    pub fn follow(&self, online: &mut Vec<u32>) {
        online.retain(|cpu| !self.closed.contains(cpu));
        for &cpu in &self.open {
            if !online.contains(&cpu) {
                online.push(cpu);
            }
        }
        online.sort_unstable();
    }
}
