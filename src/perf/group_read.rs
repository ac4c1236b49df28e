//! The binary layout of a group read with
//! `PERF_FORMAT_GROUP | ID | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING`:
//!
//! ```text
//! u64 nr; u64 time_enabled; u64 time_running; { u64 value; u64 id; } [nr]
//! ```
//!
//! Parsing is separate from the syscall so that recorded buffers (multiplexed
//! sequences, hardware groups these machines cannot open) can be tested.

/// Number of `u64` words a group read of `members` events occupies.
pub fn read_buffer_words(members: usize) -> usize {
    3 + 2 * members
}

/// One parsed group read, borrowing the words it was read into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRead<'a> {
    /// Nanoseconds the group was enabled since it was opened.
    pub time_enabled: u64,
    /// Nanoseconds the group was actually on the PMU since it was opened.
    pub time_running: u64,
    pairs: &'a [u64],
}

/// Why a buffer is not a valid group read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupReadError {
    /// Fewer than the three header words.
    #[error("group read of {0} words is shorter than its 3-word header")]
    Short(usize),
    /// The header announces more members than the buffer holds.
    #[error("group read announces {nr} members but holds only {words} words")]
    Truncated {
        /// Members announced in the header.
        nr: u64,
        /// Words actually read.
        words: usize,
    },
}

impl<'a> GroupRead<'a> {
    /// Parses the words of one read.
    pub fn parse(words: &'a [u64]) -> Result<Self, GroupReadError> {
        let [nr, time_enabled, time_running, rest @ ..] = words else {
            return Err(GroupReadError::Short(words.len()));
        };
        let pair_words = usize::try_from(*nr)
            .ok()
            .and_then(|n| n.checked_mul(2))
            .filter(|&w| w <= rest.len())
            .ok_or(GroupReadError::Truncated {
                nr: *nr,
                words: words.len(),
            })?;
        Ok(Self {
            time_enabled: *time_enabled,
            time_running: *time_running,
            pairs: &rest[..pair_words],
        })
    }

    /// Number of members in this read.
    pub fn len(&self) -> usize {
        self.pairs.len() / 2
    }

    /// True when the read holds no member.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// `(id, value)` of every member, in the kernel's order.
    pub fn members(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.pairs.chunks_exact(2).map(|p| (p[1], p[0]))
    }

    /// The value of the member with kernel id `id`, if it is in this read.
    ///
    /// The kernel lists members in creation order, so the member at `hint`
    /// (its position when the group was opened) is tried first; the scan only
    /// runs when a member is missing. Any `hint` is safe: one past the
    /// members (even `usize::MAX`) just goes straight to the scan.
    pub fn value_of(&self, id: u64, hint: usize) -> Option<u64> {
        // `nth` on exact chunks is O(1) and, unlike `2 * hint`, cannot overflow.
        match self.pairs.chunks_exact(2).nth(hint) {
            Some(&[value, got]) if got == id => Some(value),
            _ => self.members().find(|&(i, _)| i == id).map(|(_, v)| v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_two_members() {
        let words = [2, 1000, 500, 11, 7, 22, 8];
        let read = GroupRead::parse(&words).expect("valid read");
        assert_eq!((read.time_enabled, read.time_running), (1000, 500));
        assert_eq!(read.len(), 2);
        assert_eq!(read.members().collect::<Vec<_>>(), vec![(7, 11), (8, 22)]);
        assert_eq!(read.value_of(8, 1), Some(22));
        assert_eq!(read.value_of(8, 0), Some(22));
        assert_eq!(read.value_of(9, 0), None);
    }

    #[test]
    fn extra_trailing_words_are_ignored() {
        let words = [1, 10, 10, 5, 3, 99, 99];
        let read = GroupRead::parse(&words).expect("valid read");
        assert_eq!(read.len(), 1);
        assert_eq!(read.value_of(3, 0), Some(5));
    }

    #[test]
    fn short_and_truncated_buffers_are_errors() {
        assert_eq!(GroupRead::parse(&[1, 2]), Err(GroupReadError::Short(2)));
        assert_eq!(
            GroupRead::parse(&[2, 1, 1, 5, 3]),
            Err(GroupReadError::Truncated { nr: 2, words: 5 })
        );
        assert!(GroupRead::parse(&[u64::MAX, 1, 1]).is_err());
    }

    /// Found by `cargo fuzz run group_read`: `2 * hint` overflowed (a panic
    /// with overflow checks, a wrapped range without) for hints past
    /// `usize::MAX / 2`.
    #[test]
    fn any_hint_is_safe() {
        let words = [2, 10, 10, 5, 3, 6, 4];
        let read = GroupRead::parse(&words).expect("valid read");
        for hint in [
            2,
            3,
            usize::MAX / 2,
            usize::MAX / 2 + 1,
            usize::MAX - 1,
            usize::MAX,
        ] {
            assert_eq!(read.value_of(3, hint), Some(5), "hint {hint}");
            assert_eq!(read.value_of(4, hint), Some(6), "hint {hint}");
            assert_eq!(read.value_of(9, hint), None, "hint {hint}");
        }
        // The hint is only a hint: a wrong one still finds the member.
        assert_eq!(read.value_of(4, 0), Some(6));
        assert_eq!(read.value_of(3, 1), Some(5));
    }

    #[test]
    fn buffer_size_matches_layout() {
        assert_eq!(read_buffer_words(0), 3);
        assert_eq!(read_buffer_words(4), 11);
    }
}
