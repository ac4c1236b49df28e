//! The kernel's code symbols, as `/proc/kallsyms` lists them: a kprobe's
//! function is checked against them.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;

/// Where the kernel lists its symbols.
pub const KALLSYMS: &str = "/proc/kallsyms";

/// Calls `f(name)` for each code symbol of the kernel (kinds `t`, `T`,
/// `w` and `W`: code and weak code), until it breaks. An error if the
/// list cannot be read, whole or midway.
pub fn each_code_symbol(mut f: impl FnMut(&str) -> ControlFlow<()>) -> std::io::Result<()> {
    for line in BufReader::new(File::open(KALLSYMS)?).lines() {
        let line = line?;
        // `ADDRESS TYPE NAME [MODULE]`.
        let mut fields = line.split_ascii_whitespace();
        let (Some(_), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !matches!(kind, "t" | "T" | "w" | "W") {
            continue;
        }
        if f(name).is_break() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_lists_its_scheduler_among_its_code_and_the_walk_stops_when_asked() {
        let mut names = 0;
        let mut found = false;
        each_code_symbol(|name| {
            names += 1;
            found = name == "schedule";
            if found {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .expect("/proc/kallsyms");
        assert!(found, "`schedule` is code the kernel lists");
        assert!(names > 1, "stops at `schedule`, after other code");
    }
}
