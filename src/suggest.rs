//! "Did you mean" hints: the one closeness rule behind every suggestion
//! cgperf makes, for config keys and names, event and PMU names, format
//! terms, tracepoint fields and probe symbols alike.

/// Suggests the candidate closest to `input`, for "did you mean" hints.
///
/// Only close matches count (edit distance, ignoring case, at most a third
/// of the length, minimum 1), so that we never suggest something unrelated.
/// The first of equally close candidates wins.
pub fn did_you_mean<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let input: Vec<char> = input.to_lowercase().chars().collect();
    let limit = (input.len() / 3).max(1);
    candidates
        .into_iter()
        .filter_map(|c| {
            let lower: Vec<char> = c.to_lowercase().chars().collect();
            // The distance is at least the difference in length: a long
            // input (a pasted value) costs nothing against short names.
            if lower.len().abs_diff(input.len()) > limit {
                return None;
            }
            Some((distance(&input, &lower), c))
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance between `a` and `b` ignoring case, where inserting,
/// deleting, replacing or swapping two neighbouring characters costs 1
/// (optimal string alignment): `grcp` for `grpc` is the most common typo.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    distance(&a, &b)
}

fn distance(a: &[char], b: &[char]) -> usize {
    let mut before: Vec<usize> = Vec::new();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
            if i > 0 && j > 0 && *ca == b[j - 1] && a[i - 1] == *cb {
                cur[j + 1] = cur[j + 1].min(before[j - 1] + 1);
            }
        }
        before = std::mem::replace(&mut prev, cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_close_matches() {
        let keys = ["interval", "per_cpu", "groups"];
        assert_eq!(did_you_mean("intervall", keys), Some("interval"));
        assert_eq!(did_you_mean("group", keys), Some("groups"));
        assert_eq!(did_you_mean("Per_CPU", keys), Some("per_cpu"));
        assert_eq!(did_you_mean("zzz", keys), None);
        assert_eq!(
            did_you_mean("grcp", ["grpc", "http/protobuf"]),
            Some("grpc")
        );
        assert_eq!(
            did_you_mean("llc-load-misses", ["LLC-load-misses"]),
            Some("LLC-load-misses")
        );
        assert_eq!(did_you_mean(&"x".repeat(100_000), keys), None);
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("abc", "ca"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("TSC", "tsc"), 0);
        assert_eq!(edit_distance("cylces", "cycles"), 1);
        assert_eq!(edit_distance("mrs", "msr"), 1);
        assert_eq!(edit_distance("abc", ""), 3);
    }
}
