//! Arbitrary bytes → `u64` words → `cgperf::perf::GroupRead::parse`, then a
//! sequence of parsed reads fed to `cgperf::sampler::Accumulator`, as the
//! sampler does every interval, whatever the kernel (or a broken one) says:
//! times going backwards, counters wrapping, members missing, unknown or
//! repeated ids, `running > enabled`, groups reopened.
//!
//! Input layout (little-endian words; a trailing partial word is ignored):
//! - byte 0: the group's event count `n` (`& 7`), then `n` words of kernel ids;
//! - then chunks, each a control word `c` followed by `c & 0x1f` words
//!   parsed as one read (so the header's `nr` need not match the chunk:
//!   short, truncated and over-long buffers all occur); bit 5 of `c` calls
//!   `rebase()` first (the group was reopened), bit 6 replaces the ids with
//!   the read's own member ids (as a reopen does), bit 7 replaces the
//!   accumulator with a new one that `inherit`s the old totals through the
//!   mapping in bits 8.. (3 bits per event: 0..=n-1 an old event, else none),
//!   as a reload that changes the group's events does.
//!
//! Asserts, besides "never panics":
//! - `parse` accepts exactly the buffers holding `3 + 2·nr` words or more;
//!   `len()`, `members()` and `value_of` agree with the words, for any hint;
//! - the accumulator's totals never decrease and stay finite; an interval
//!   that never ran adds no count; times add the wrapping deltas (saturating);
//! - a reload's new accumulator starts from exactly the inherited totals;
//! - `GroupTotals::add` (the sum over CPUs) of the totals onto an empty and
//!   onto a copy of themselves gives them and their double.

#![no_main]

use cgperf::perf::{GroupRead, GroupReadError, read_buffer_words};
use cgperf::sampler::{Accumulator, GroupTotals, Interval};
use libfuzzer_sys::fuzz_target;

fn words(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Checks `parse` on `words` against the layout; returns the read if valid.
fn check_parse(words: &[u64]) -> Option<GroupRead<'_>> {
    let parsed = GroupRead::parse(words);
    if words.len() < 3 {
        assert_eq!(parsed, Err(GroupReadError::Short(words.len())));
        return None;
    }
    let nr = words[0];
    let fits = usize::try_from(nr)
        .ok()
        .and_then(|n| n.checked_mul(2))
        .and_then(|w| w.checked_add(3))
        .is_some_and(|w| w <= words.len());
    if !fits {
        assert_eq!(
            parsed,
            Err(GroupReadError::Truncated {
                nr,
                words: words.len()
            })
        );
        drop(parsed.unwrap_err().to_string());
        return None;
    }
    let read = parsed.expect("a buffer that holds its members parses");
    let n = nr as usize;
    assert_eq!((read.time_enabled, read.time_running), (words[1], words[2]));
    assert_eq!(read.len(), n);
    assert_eq!(read.is_empty(), n == 0);
    assert!(read_buffer_words(read.len()) <= words.len());
    let members: Vec<(u64, u64)> = read.members().collect();
    assert_eq!(members.len(), n);
    for (i, &(id, value)) in members.iter().enumerate() {
        assert_eq!((value, id), (words[3 + 2 * i], words[4 + 2 * i]));
        // The right hint finds the member; with repeated ids, any copy.
        let found = read.value_of(id, i).expect("a member is found by its id");
        assert!(members.contains(&(id, found)));
    }
    // Any hint, any id: the value of a member with that id, or none.
    for (k, w) in words.iter().enumerate() {
        let hints = [
            k,
            *w as usize,
            usize::MAX,
            usize::MAX / 2,
            usize::MAX / 2 + 1,
        ];
        for hint in hints {
            for id in [*w, words[k.saturating_sub(1)]] {
                match read.value_of(id, hint) {
                    Some(v) => assert!(members.contains(&(id, v))),
                    None => assert!(members.iter().all(|&(i, _)| i != id)),
                }
            }
        }
    }
    Some(read)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(first & 7);
    let words = words(rest);
    if words.len() < n {
        return;
    }
    let (ids, mut stream) = words.split_at(n);
    let mut ids = ids.to_vec();
    let mut acc = Accumulator::new(n);
    let mut last = acc.totals().clone();
    assert_eq!(last.values, vec![0.0; n]);
    // Times as the accumulator sees them, to check the time totals.
    let (mut prev_enabled, mut prev_running) = (0u64, 0u64);
    while let Some((&control, tail)) = stream.split_first() {
        let len = ((control & 0x1f) as usize).min(tail.len());
        let (chunk, next) = tail.split_at(len);
        stream = next;
        let Some(read) = check_parse(chunk) else {
            continue;
        };
        if control & 0x20 != 0 {
            acc.rebase();
            (prev_enabled, prev_running) = (0, 0);
        }
        if control & 0x40 != 0 {
            ids = read.members().map(|(id, _)| id).take(n).collect();
        }
        if control & 0x80 != 0 {
            let mapping: Vec<Option<usize>> = (0..n)
                .map(|i| Some((control >> (8 + 3 * i) & 7) as usize).filter(|&j| j < n))
                .collect();
            let old = acc.totals().clone();
            acc = Accumulator::new(n);
            acc.inherit(&old, &mapping);
            (prev_enabled, prev_running) = (0, 0);
            let now = acc.totals();
            for (i, from) in mapping.iter().enumerate() {
                let expected = from.map_or(0.0, |j| old.values[j]);
                assert_eq!(now.values[i], expected, "event {i} inherits {from:?}");
            }
            assert_eq!(
                (now.enabled_ns, now.running_ns, now.never_ran_intervals),
                (old.enabled_ns, old.running_ns, old.never_ran_intervals)
            );
            last = now.clone();
        }
        let enabled = read.time_enabled.wrapping_sub(prev_enabled);
        let running = read.time_running.wrapping_sub(prev_running);
        (prev_enabled, prev_running) = (read.time_enabled, read.time_running);

        let outcome = acc.update(&read, &ids);
        let now = acc.totals();
        assert_eq!(
            now.values.len(),
            n,
            "the accumulator keeps one total per event"
        );
        for (i, (a, b)) in now.values.iter().zip(&last.values).enumerate() {
            assert!(a.is_finite(), "event {i}: total {a} is not finite");
            assert!(a >= b, "event {i}: total went down from {b} to {a}");
            if outcome == Interval::NeverRan {
                assert_eq!(a, b, "event {i}: an interval that never ran added a count");
            }
        }
        let expected_outcome = match (enabled, running) {
            (0, 0) => Interval::Idle,
            (_, 0) => Interval::NeverRan,
            (e, r) if r >= e => Interval::Full,
            _ => Interval::Scaled,
        };
        assert_eq!(outcome, expected_outcome);
        assert_eq!(now.enabled_ns, last.enabled_ns.saturating_add(enabled));
        assert_eq!(now.running_ns, last.running_ns.saturating_add(running));
        assert_eq!(
            now.never_ran_intervals,
            last.never_ran_intervals + u64::from(outcome == Interval::NeverRan)
        );
        // Summing over CPUs: onto nothing, then onto itself.
        let mut sum = GroupTotals::default();
        sum.add(now);
        assert_eq!(&sum, now);
        sum.add(now);
        for (s, v) in sum.values.iter().zip(&now.values) {
            assert_eq!(*s, v * 2.0);
        }
        assert_eq!(sum.enabled_ns, now.enabled_ns.saturating_mul(2));
        assert_eq!(sum.running_ns, now.running_ns.saturating_mul(2));
        last = now.clone();
    }
});
