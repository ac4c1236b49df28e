//! Building `perf_event_attr` for counting in cgroup mode, and for sampling
//! every occurrence of an event into a ring buffer.

use crate::events::EventAttr;
use perf_event_open_sys::bindings::{
    PERF_FORMAT_GROUP, PERF_FORMAT_ID, PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING, perf_event_attr,
};

/// The read format every group uses: one `read()` returns all members with
/// their ids and the group's enabled/running times, so a group's values are
/// always consistent with each other and can be scaled together.
pub(crate) const READ_FORMAT: u64 = (PERF_FORMAT_GROUP
    | PERF_FORMAT_ID
    | PERF_FORMAT_TOTAL_TIME_ENABLED
    | PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;

/// Builds the attr of one counting event.
///
/// The leader is created disabled so the whole group starts at once with one
/// `PERF_EVENT_IOC_ENABLE`; members are created enabled and therefore follow
/// their leader. Nothing is inherited: cgroup mode already follows every task
/// of the cgroup.
pub(crate) fn counting_attr(event: &EventAttr, leader: bool) -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: event.type_,
        size: std::mem::size_of::<perf_event_attr>() as u32,
        config: event.config,
        read_format: READ_FORMAT,
        ..Default::default()
    };
    attr.__bindgen_anon_3.config1 = event.config1;
    attr.__bindgen_anon_4.config2 = event.config2;
    attr.set_disabled(u64::from(leader));
    attr.set_exclude_user(u64::from(event.exclude_user));
    attr.set_exclude_kernel(u64::from(event.exclude_kernel));
    attr.set_exclude_hv(u64::from(event.exclude_hv));
    attr.set_exclude_guest(u64::from(event.exclude_guest));
    attr.set_exclude_host(u64::from(event.exclude_host));
    attr
}

/// Builds the attr of an event that writes a sample of type `sample_type`
/// for every occurrence (`sample_period = 1`).
///
/// It is created disabled so a filter and the output redirection are in
/// place before the first sample. `sample_id_all` puts the sample id on the
/// other records (such as `PERF_RECORD_LOST`) too. It carries no read format:
/// samples never include counter values.
///
/// Sample times (`PERF_SAMPLE_TIME`) are on `CLOCK_MONOTONIC`, the clock of
/// `clock_gettime(CLOCK_MONOTONIC)` and of BPF's `bpf_ktime_get_ns()`, so
/// that they compare with times taken there. Every event writing into one
/// ring must use the same clock (the kernel refuses the redirection
/// otherwise), so every sampling event uses this one.
pub(crate) fn sampling_attr(event: &EventAttr, sample_type: u64) -> perf_event_attr {
    let mut attr = counting_attr(event, true);
    attr.read_format = 0;
    attr.__bindgen_anon_1.sample_period = 1;
    attr.sample_type = sample_type;
    attr.set_sample_id_all(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> EventAttr {
        EventAttr {
            type_: 1,
            config: 2,
            config1: 3,
            config2: 4,
            exclude_user: false,
            exclude_kernel: true,
            exclude_hv: true,
            exclude_guest: true,
            exclude_host: false,
            other_core: None,
        }
    }

    #[test]
    fn leader_is_disabled_members_follow() {
        let leader = counting_attr(&event(), true);
        let member = counting_attr(&event(), false);
        assert_eq!(leader.disabled(), 1);
        assert_eq!(member.disabled(), 0);
        assert_eq!(leader.inherit(), 0);
    }

    #[test]
    fn fields_are_copied() {
        let attr = counting_attr(&event(), true);
        assert_eq!((attr.type_, attr.config), (1, 2));
        // SAFETY: both unions were written through these members above.
        let (c1, c2) = unsafe { (attr.__bindgen_anon_3.config1, attr.__bindgen_anon_4.config2) };
        assert_eq!((c1, c2), (3, 4));
        assert_eq!(attr.exclude_user(), 0);
        assert_eq!(attr.exclude_kernel(), 1);
        assert_eq!(attr.exclude_hv(), 1);
        assert_eq!((attr.exclude_guest(), attr.exclude_host()), (1, 0));
        let guests = counting_attr(
            &EventAttr {
                exclude_guest: false,
                exclude_host: true,
                ..event()
            },
            true,
        );
        assert_eq!((guests.exclude_guest(), guests.exclude_host()), (0, 1));
        assert_eq!(attr.read_format, 0b1111);
        assert_eq!(attr.size as usize, std::mem::size_of::<perf_event_attr>());
    }

    #[test]
    fn sampling_samples_every_occurrence_and_starts_disabled() {
        let attr = sampling_attr(&event(), 0x10400);
        // SAFETY: the union was written through `sample_period` above.
        assert_eq!(unsafe { attr.__bindgen_anon_1.sample_period }, 1);
        assert_eq!(attr.sample_type, 0x10400);
        assert_eq!(attr.sample_id_all(), 1);
        assert_eq!(attr.disabled(), 1);
        assert_eq!(attr.read_format, 0);
        assert_eq!(
            (attr.use_clockid(), attr.clockid),
            (1, libc::CLOCK_MONOTONIC)
        );
        assert_eq!((attr.type_, attr.config, attr.exclude_kernel()), (1, 2, 1));
        assert_eq!(attr.exclude_guest(), 1);
    }
}
