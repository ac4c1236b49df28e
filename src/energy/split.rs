//! Sharing a whole number of micro-Joules exactly: among weights by the
//! largest remainder (every share a whole number, their sum the total,
//! none off by more than one from its exact share), and down the tree of
//! counted cgroups, where a parent's share is its children's plus its own
//! tasks'.

/// `total` shared among `weights` (negative or NaN weights count as 0):
/// whole numbers summing to `total` exactly. All of it goes to the last
/// weight when they sum to 0.
pub fn shares(total: u64, weights: &[f64]) -> Vec<u64> {
    let mut out = Vec::new();
    Scratch::default().share(total, weights, &mut out);
    out
}

/// Room [`shares`] works in, kept from one sharing to the next: the tree
/// of 10,000 cgroups is shared every interval without allocating.
#[derive(Debug, Default)]
struct Scratch {
    exact: Vec<f64>,
    order: Vec<usize>,
}

impl Scratch {
    /// [`shares`] into `out`.
    fn share(&mut self, total: u64, weights: &[f64], out: &mut Vec<u64>) {
        let clean = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
        let sum: f64 = weights.iter().map(|w| clean(*w)).sum();
        out.clear();
        out.resize(weights.len(), 0);
        if out.is_empty() {
            return;
        }
        if sum <= 0.0 {
            let last = out.len() - 1;
            out[last] = total;
            return;
        }
        let exact = &mut self.exact;
        exact.clear();
        exact.extend(weights.iter().map(|w| total as f64 * (clean(*w) / sum)));
        for (o, e) in out.iter_mut().zip(exact.iter()) {
            *o = (e.floor() as u64).min(total);
        }
        // Rounding of the products may overshoot by a unit or two: take
        // back from the largest first.
        let mut given: u64 = out.iter().sum();
        while given > total {
            let Some(i) = (0..out.len()).max_by_key(|i| out[*i]) else {
                break;
            };
            out[i] -= 1;
            given -= 1;
        }
        let mut left = total - given;
        if left == 0 {
            return;
        }
        // The units left go to the largest remainders (the first index
        // among equal ones): only which ones matter, so a selection does
        // unless there are more units than weights.
        let order = &mut self.order;
        order.clear();
        order.extend((0..out.len()).filter(|i| clean(weights[*i]) > 0.0));
        let larger = |a: &usize, b: &usize| {
            let fa = exact[*a] - out[*a] as f64;
            let fb = exact[*b] - out[*b] as f64;
            fb.total_cmp(&fa).then(a.cmp(b))
        };
        match usize::try_from(left) {
            Ok(n) if n < order.len() => {
                order.select_nth_unstable_by(n, larger);
                order.truncate(n);
            }
            _ => order.sort_by(larger),
        }
        for i in order.iter().cycle() {
            if left == 0 {
                break;
            }
            out[*i] += 1;
            left -= 1;
        }
    }
}

/// The counted cgroups as a tree: each one's nearest counted ancestor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tree {
    /// The cgroups without a counted ancestor.
    pub top: Vec<usize>,
    /// Each cgroup's counted children.
    pub children: Vec<Vec<usize>>,
}

impl Tree {
    /// The tree of `paths` (relative to the cgroup2 root, `/` the root),
    /// walked in path order (the order of an activity's cgroups; others
    /// are sorted first). In that order a cgroup's ancestors come before
    /// it, and every path between an ancestor and it starts with the
    /// ancestor's: the paths that can still be an ancestor are a stack,
    /// each a prefix of the next, and none is hashed. Where paths repeat,
    /// the last is the parent of their children.
    pub fn of(paths: &[&str]) -> Self {
        let mut order: Vec<usize> = (0..paths.len()).collect();
        let sorted = paths.windows(2).all(|w| w[0] <= w[1]);
        if !sorted {
            order.sort_by_key(|i| paths[*i]);
        }
        let mut top = Vec::new();
        let mut children = vec![Vec::new(); paths.len()];
        let mut stack: Vec<usize> = Vec::new();
        for i in order {
            let path = paths[i];
            while stack.last().is_some_and(|s| !path.starts_with(paths[*s])) {
                stack.pop();
            }
            let parent = stack.iter().rev().find(|s| is_ancestor(paths[**s], path));
            match parent {
                Some(p) => children[*p].push(i),
                None => top.push(i),
            }
            stack.push(i);
        }
        if !sorted {
            // In the order of `paths`, as they were given.
            top.sort_unstable();
            children.iter_mut().for_each(|c| c.sort_unstable());
        }
        Self { top, children }
    }
}

/// Whether the cgroup at `path` is below the one at `ancestor`.
fn is_ancestor(ancestor: &str, path: &str) -> bool {
    let below = path.len() > ancestor.len() && path.starts_with(ancestor);
    match ancestor {
        "" => false,
        "/" => below,
        _ => below && path.as_bytes().get(ancestor.len()) == Some(&b'/'),
    }
}

/// One meter's active energy of an interval, shared: each cgroup's part
/// (a parent's includes its children's) and what went to no counted
/// cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Per cgroup, in the order of the tree's paths.
    pub cgroups: Vec<u64>,
    /// Activity outside the top-level cgroups.
    pub system: u64,
}

/// Shares `active` µJ among the cgroups of `tree` by `weights` (each
/// cgroup's, its descendants' included, as cgroup counters count), over
/// `busy`, all the activity on the meter's CPUs in the same unit when
/// known: what the top-level cgroups did not do of it is `system`'s. With
/// `busy` unknown, or below what the cgroups did (clocks read at other
/// moments), the top-level cgroups share all of it.
///
/// Exact at every level: the top-level cgroups and `system` sum to
/// `active`, and a parent's part to its children's and its own tasks'.
pub fn split(active: u64, tree: &Tree, weights: &[f64], busy: Option<f64>) -> Split {
    let mut cgroups = vec![0u64; weights.len()];
    let weight = |i: usize| weights[i].max(0.0);
    let top: f64 = tree.top.iter().map(|i| weight(*i)).sum();
    let outside = busy.map_or(0.0, |b| (b - top).max(0.0));
    let mut scratch = Scratch::default();
    let mut ws: Vec<f64> = tree.top.iter().map(|i| weight(*i)).collect();
    ws.push(outside);
    let mut parts = Vec::new();
    scratch.share(active, &ws, &mut parts);
    let system = parts.pop().unwrap_or(0);
    let mut queue: Vec<(usize, u64)> = tree.top.iter().copied().zip(parts.drain(..)).collect();
    while let Some((at, share)) = queue.pop() {
        cgroups[at] = share;
        let kids = &tree.children[at];
        if kids.is_empty() {
            continue;
        }
        ws.clear();
        ws.extend(kids.iter().map(|k| weight(*k)));
        let below: f64 = ws.iter().sum();
        ws.push((weight(at) - below).max(0.0));
        scratch.share(share, &ws, &mut parts);
        parts.pop();
        queue.extend(kids.iter().copied().zip(parts.drain(..)));
    }
    Split { cgroups, system }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_whole_and_sum_to_the_total() {
        assert_eq!(shares(10, &[1.0, 1.0, 1.0]), [4, 3, 3]);
        assert_eq!(shares(100, &[1.0, 3.0]), [25, 75]);
        assert_eq!(shares(7, &[0.0, 0.0]), [0, 7]);
        assert_eq!(shares(7, &[f64::NAN, -1.0, 2.0]), [0, 0, 7]);
        assert_eq!(shares(0, &[1.0, 2.0]), [0, 0]);
        assert!(shares(5, &[]).is_empty());
        let mut seed = 7u64;
        for _ in 0..2000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = (seed >> 60) as usize + 1;
            let total = seed >> 20;
            let ws: Vec<f64> = (0..n)
                .map(|i| ((seed >> (i * 3)) & 0xffff) as f64 * 1e9)
                .collect();
            let got = shares(total, &ws);
            assert_eq!(got.iter().sum::<u64>(), total, "{ws:?}");
            let sum: f64 = ws.iter().sum();
            for (g, w) in got.iter().zip(&ws) {
                if sum > 0.0 {
                    assert!(
                        (*g as f64 - total as f64 * w / sum).abs() <= 1.0 + total as f64 * 1e-12
                    );
                }
            }
        }
    }

    #[test]
    fn the_tree_is_made_of_nearest_counted_ancestors() {
        let tree = Tree::of(&["/a", "/a/b/c", "/a/b", "/d", "/ab"]);
        assert_eq!(tree.top, [0, 3, 4]);
        assert_eq!(tree.children[0], [2]);
        assert_eq!(tree.children[2], [1]);
        let rooted = Tree::of(&["/", "/x", "/x/y"]);
        assert_eq!(rooted.top, [0]);
        assert_eq!(rooted.children, [vec![1], vec![2], vec![]]);
        // Paths that sort between a parent and its children ('-' and '.'
        // sort before '/'), in path order: each child still finds it.
        let paths = [
            "/a", "/a-x", "/a-x/y", "/a.b", "/a/b", "/a/b-c/d", "/a/bc", "/ab/c",
        ];
        let tree = Tree::of(&paths);
        assert_eq!(tree.top, [0, 1, 3, 7]);
        assert_eq!(
            tree.children[0],
            [4, 5, 6],
            "/a/b-c/d is below /a, not /a/b"
        );
        assert_eq!(tree.children[1], [2]);
        assert!(tree.children[4].is_empty());
        // Every path's parent is its nearest listed ancestor, whatever
        // the order they come in.
        let mut shuffled = paths;
        shuffled.reverse();
        let again = Tree::of(&shuffled);
        let parent = |t: &Tree, i: usize| t.children.iter().position(|c| c.contains(&i));
        let n = paths.len();
        for i in 0..n {
            assert_eq!(
                parent(&again, n - 1 - i).map(|p| paths[n - 1 - p]),
                parent(&tree, i).map(|p| paths[p]),
                "{}",
                paths[i]
            );
        }
    }

    /// Two top-level cgroups, one with two children and tasks of its own,
    /// and activity outside them: every level adds up exactly.
    #[test]
    fn every_level_adds_up_exactly() {
        let paths = ["/a", "/a/x", "/a/y", "/b"];
        let tree = Tree::of(&paths);
        // a did 6 (x 2, y 3, itself 1), b did 3; the CPUs were busy 12.
        let weights = [6.0, 2.0, 3.0, 3.0];
        let got = split(1_000_001, &tree, &weights, Some(12.0));
        let [a, x, y, b] = got.cgroups[..] else {
            panic!()
        };
        assert_eq!(a + b + got.system, 1_000_001);
        assert!(x + y < a, "a's own tasks have a share");
        assert_eq!((a, b, got.system), (500_001, 250_000, 250_000));
        // x did a third of a's 6, y half: each within a unit of it.
        assert!(
            x.abs_diff(166_667) <= 1 && y.abs_diff(250_000) <= 1,
            "{x} {y}"
        );
        // A parent that did less than its children (read at another
        // moment) passes all of its share down.
        let got = split(100, &tree, &[4.0, 2.0, 3.0, 0.0], None);
        assert_eq!(got.cgroups, [100, 40, 60, 0]);
        // Nothing ran in any cgroup: all of it is the system's.
        let got = split(100, &tree, &[0.0; 4], Some(0.0));
        assert_eq!((got.cgroups, got.system), (vec![0; 4], 100));
        // The cgroups did more than the CPUs were seen busy: no system.
        let got = split(90, &tree, &[6.0, 2.0, 3.0, 3.0], Some(5.0));
        assert_eq!((got.cgroups[0] + got.cgroups[3], got.system), (90, 0));
    }
}
