//! An independent model of how perf places PMU term values into config
//! bits, shared by the `event` and `pmu_sysfs` targets to check cgperf's
//! resolution against.

/// `(field, mask)` of a format file as the kernel documents them
/// (`config:0-7,32-35`), for the well-formed ones; field 0, 1, 2 is
/// config, config1, config2.
pub fn parse_format(content: &str) -> Option<(usize, u64)> {
    let (field, ranges) = content.trim().split_once(':')?;
    let field = ["config", "config1", "config2"]
        .iter()
        .position(|f| *f == field)?;
    let mut mask = 0u64;
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let (lo, hi): (u32, u32) = (lo.parse().ok()?, hi.parse().ok()?);
        if lo > hi || hi > 63 {
            return None;
        }
        for bit in lo..=hi {
            mask |= 1 << bit;
        }
    }
    Some((field, mask))
}

/// perf's deposit, written differently from cgperf's: the value's bits go,
/// lowest first, to the mask's bits in ascending order; `None` if the value
/// has more significant bits than the mask has bits.
pub fn model_deposit(value: u64, mask: u64) -> Option<u64> {
    let mut out = 0u64;
    let mut used = 0u32;
    for bit in 0..64 {
        if mask & (1 << bit) != 0 {
            if value >> used & 1 == 1 {
                out |= 1 << bit;
            }
            used += 1;
        }
    }
    (used == 64 || value >> used == 0).then_some(out)
}
