//! Which CPUs are online, from the kernel's CPU list format (`0-3,5,7-8`),
//! and keeping the calling thread on one of them.

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
