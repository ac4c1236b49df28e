//! Which CPUs are online, from the kernel's CPU list format (`0-3,5,7-8`).

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
    fn this_machine_has_an_online_cpu() {
        assert!(!online().expect("online list readable").is_empty());
    }
}
