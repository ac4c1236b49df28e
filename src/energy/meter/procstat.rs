//! The CPUs' busy and total time from `/proc/stat`: what the model scales
//! its power by, and what tells activity outside the counted cgroups.

use std::collections::BTreeMap;

/// Each CPU's time since the last reading, in nanoseconds: busy (user,
/// nice, system, irq, softirq; guest time is in user) and in all (busy,
/// idle and iowait).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Busy {
    /// CPU → (busy, all).
    pub cpus: BTreeMap<u32, (u64, u64)>,
}

/// Cumulative times of each CPU, as `/proc/stat` has them.
pub type Times = BTreeMap<u32, (u64, u64)>;

/// Parses `/proc/stat`'s `cpuN` lines into nanoseconds, `tick_ns` per tick
/// (`USER_HZ`).
pub fn parse(text: &str, tick_ns: u64) -> Times {
    let mut out = Times::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(cpu) = fields
            .next()
            .and_then(|name| name.strip_prefix("cpu"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let ticks: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
        let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal
        let busy = at(0) + at(1) + at(2) + at(5) + at(6);
        let all = busy + at(3) + at(4);
        out.insert(cpu, (busy * tick_ns, all * tick_ns));
    }
    out
}

/// The time of each CPU between `before` and `now` (a CPU in only one of
/// them, or whose times went back, counts nothing).
pub fn between(before: &Times, now: &Times) -> Busy {
    let cpus = now
        .iter()
        .filter_map(|(cpu, (busy, all))| {
            let (b0, a0) = before.get(cpu)?;
            Some((*cpu, (busy.checked_sub(*b0)?, all.checked_sub(*a0)?)))
        })
        .collect();
    Busy { cpus }
}

/// This machine's `/proc/stat` now.
pub fn read_busy() -> Result<Times, String> {
    let text = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|hz| *hz > 0).unwrap_or(100);
    Ok(parse(&text, 1_000_000_000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_user_nice_system_irq_softirq_and_all_adds_idle_and_iowait() {
        let before = parse(
            "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 10 0 10 100 0 0 0 5 0 0\ncpu1 0 0 0 50 0 0 0 0 0 0\nintr 1\n",
            10_000_000,
        );
        let now = parse(
            "cpu0 30 0 20 150 10 5 5 9 0 0\ncpu1 0 0 0 150 0 0 0 0 0 0\ncpu2 1 1 1 1 1 1 1 1 0 0\n",
            10_000_000,
        );
        let busy = between(&before, &now);
        // cpu0: busy 20+10+5+5 = 40 ticks, all 40 + 50 idle + 10 iowait.
        assert_eq!(busy.cpus[&0], (400_000_000, 1_000_000_000));
        assert_eq!(busy.cpus[&1], (0, 1_000_000_000));
        // A CPU that came online has no time before.
        assert!(!busy.cpus.contains_key(&2));
    }
}
