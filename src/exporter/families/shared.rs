//! What the families of every target share: their three families of group
//! times, and the points of group and tracepoint support.

use super::{Family, Labels, Point, Visitor};
use crate::snapshot::Support;
use crate::totals::GroupTimes;

/// The three families of group times of one kind of target, `[enabled,
/// running, never ran]`: a point per item, made by `point` from
/// the item and the value `times` gives it.
pub(super) fn group_times<'a, T: 'a, V: Visitor>(
    v: &mut V,
    families: [&Family; 3],
    items: impl Iterator<Item = &'a T> + Clone,
    times: impl Fn(&T) -> GroupTimes,
    point: impl Fn(&'a T, f64) -> Point<'a>,
) -> Result<(), V::Error> {
    let values: [fn(GroupTimes) -> f64; 3] = [
        |t| t.enabled_seconds,
        |t| t.running_seconds,
        |t| t.never_ran_intervals as f64,
    ];
    for (family, value) in families.into_iter().zip(values) {
        v.family(family, items.clone().map(|t| point(t, value(times(t)))))?;
    }
    Ok(())
}

/// The points of `cgperf_group_supported` (or the host's) for `support`.
pub(super) fn group_support(support: &[Support]) -> impl Iterator<Item = Point<'_>> {
    support.iter().filter(|s| s.event.is_none()).map(|s| {
        let group = ("group", s.group.label());
        let labels = match &s.status {
            Ok(()) => Labels::Fixed([Some(group), None, None]),
            Err(why) => Labels::two(group, ("reason", why.token)),
        };
        Point::fixed(labels, supported(s))
    })
}

/// The points of `cgperf_event_supported` (or the host's) for `support`.
pub(super) fn event_support(support: &[Support]) -> impl Iterator<Item = Point<'_>> {
    support.iter().filter_map(|s| {
        let event = s.event.as_deref()?;
        let labels = Labels::two(("group", s.group.label()), ("event", event));
        Some(Point::fixed(labels, supported(s)))
    })
}

fn supported(s: &Support) -> f64 {
    f64::from(u8::from(s.status.is_ok()))
}
