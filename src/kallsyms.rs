//! The kernel's code symbols, as `/proc/kallsyms` lists them: a kprobe's
//! function is checked against them, and the bpf backend finds there the
//! functions its program recognises when perf calls them.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;

/// Where the kernel lists its symbols.
pub const KALLSYMS: &str = "/proc/kallsyms";

/// Calls `f(address, name)` for each code symbol of the kernel (kinds `t`,
/// `T`, `w` and `W`: code and weak code), until it breaks; the address is
/// as written (hexadecimal, all zeros where the kernel hides addresses
/// from this process: `kernel.kptr_restrict`), parsed only by a caller
/// that needs it. An error if the list cannot be read, whole or midway.
pub fn each_code_symbol(mut f: impl FnMut(&str, &str) -> ControlFlow<()>) -> std::io::Result<()> {
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
            && let Ok(address @ 1..) = u64::from_str_radix(address, 16)
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
        // SAFETY: geteuid has no preconditions.
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "this test needs root: only root reads the kernel's addresses"
        );
        let [schedule, none] =
            addresses(["schedule", "cgperf_no_such_function"]).expect("/proc/kallsyms");
        assert_eq!(none, 0);
        let restrict = std::fs::read_to_string("/proc/sys/kernel/kptr_restrict")
            .expect("kptr_restrict")
            .trim()
            .to_string();
        // kptr_restrict=2 hides them from root too.
        assert_eq!(schedule != 0, restrict != "2", "kptr_restrict={restrict}");
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
