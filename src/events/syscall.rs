//! Syscall numbers named by this architecture's table, for the `syscall`
//! label of counts split by a field that holds one (`raw_syscalls:sys_enter`'s
//! `id`). The table comes from the `syscalls` crate, generated from the
//! kernel's own tables for each architecture; cgperf is built for one, so it
//! names the numbers of the machine it runs on.

use std::borrow::Cow;

/// The label a `syscall_name:` field's names are exported under.
pub const SYSCALL_LABEL: &str = "syscall";

/// The name of the syscall whose number is `value` as a record's field
/// is decoded (decimal), e.g. `getppid` for `110` on x86_64.
///
/// A number the table does not know (a syscall newer than the table, or -1
/// for a task that is not making one) is named `syscall_N`, as strace does;
/// a value that is not a number (`other`, past `max_series`) stays as it is.
pub fn syscall_name(value: &str) -> Cow<'_, str> {
    let Ok(number) = value.parse::<i64>() else {
        return Cow::Borrowed(value);
    };
    match usize::try_from(number).ok().and_then(syscalls::Sysno::new) {
        Some(sysno) => Cow::Borrowed(sysno.name()),
        None => Cow::Owned(format!("syscall_{number}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_named_by_this_architectures_table() {
        // The numbers of the architecture the tests run on, from its
        // unistd.h.
        #[cfg(target_arch = "x86_64")]
        let known = [("0", "read"), ("39", "getpid"), ("110", "getppid")];
        #[cfg(target_arch = "aarch64")]
        let known = [("63", "read"), ("172", "getpid"), ("173", "getppid")];
        for (number, name) in known {
            assert_eq!(syscall_name(number), name);
        }
    }

    #[test]
    fn what_the_table_lacks_keeps_its_number_and_other_stays_other() {
        assert_eq!(syscall_name("-1"), "syscall_-1");
        assert_eq!(syscall_name("99999"), "syscall_99999");
        assert_eq!(syscall_name("18446744073709551615"), "18446744073709551615");
        assert_eq!(syscall_name("other"), "other");
        assert_eq!(syscall_name(""), "");
    }
}
