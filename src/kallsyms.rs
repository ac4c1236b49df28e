//! The kernel's code symbols, as `/proc/kallsyms` lists them: a kprobe's
//! function is checked against them, and the bpf backend finds there the
//! functions its program recognises when perf calls them.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;

/// Where the kernel lists its symbols.
pub const KALLSYMS: &str = "/proc/kallsyms";

/// Calls `f(address, name)` for each code symbol of the kernel (kinds `t`,
/// `T`, `w` and `W`: code and weak code), until it breaks. The address is
/// 0 where the kernel hides addresses from this process
/// (`kernel.kptr_restrict`). An error if the list cannot be read, whole or
/// midway.
pub fn each_code_symbol(mut f: impl FnMut(u64, &str) -> ControlFlow<()>) -> std::io::Result<()> {
    for line in BufReader::new(File::open(KALLSYMS)?).lines() {
        let line = line?;
        // `ADDRESS TYPE NAME [MODULE]`.
        let mut fields = line.split_ascii_whitespace();
        let (Some(address), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !matches!(kind, "t" | "T" | "w" | "W") {
            continue;
        }
        let address = u64::from_str_radix(address, 16).unwrap_or(0);
        if f(address, name).is_break() {
            break;
        }
    }
    Ok(())
}

/// The addresses of the code symbols `names`, in their order: 0 for one
/// the kernel does not list or hides. `None` if the list cannot be read.
pub fn addresses<const N: usize>(names: [&str; N]) -> Option<[u64; N]> {
    let mut found = [0u64; N];
    let mut left = N;
    each_code_symbol(|address, name| {
        if let Some(i) = names.iter().position(|&n| n == name)
            && found[i] == 0
            && address != 0
        {
            found[i] = address;
            left -= 1;
        }
        if left == 0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .ok()?;
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_lists_its_scheduler_and_an_unknown_name_is_zero() {
        // Readable by any user; the addresses are root's unless
        // kptr_restrict is 2 (and others' where it is 0 and perf is open).
        let [schedule, none] =
            addresses(["schedule", "cgperf_no_such_function"]).expect("/proc/kallsyms");
        assert_eq!(none, 0);
        let restrict = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict")
            .expect("kptr_restrict")
            .trim()
            .to_string();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 && restrict != "2" {
            assert_ne!(schedule, 0, "root reads the scheduler's address");
        }
        let mut names = 0;
        each_code_symbol(|_, name| {
            names += 1;
            if name == "schedule" {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .expect("/proc/kallsyms");
        assert!(names > 1, "stops at `schedule`, after other code");
    }
}
