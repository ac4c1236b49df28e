//! Where a host series counts: the whole machine, one CPU, or the socket
//! or die of a PMU that counts once per socket or die. The kernel says
//! which CPU stands for which: a PMU's `cpumask` names one CPU per socket
//! (or per die, where a socket has several and the PMU counts each), and
//! each CPU's `topology/physical_package_id` and `die_id` say which
//! socket and die it is on.

use crate::snapshot::Scope;
use crate::totals::exported;
use std::path::{Path, PathBuf};

/// Where the kernel describes each CPU.
pub const CPU_ROOT: &str = "/sys/devices/system/cpu";

/// The scope of each CPU of a PMU's `cpumask` (in its order): its socket,
/// or its die where the mask names two CPUs of one socket (the PMU counts
/// per die). A CPU whose topology cannot be read stands for itself.
pub fn of_cpumask(cpu_root: &Path, cpus: &[u32]) -> Vec<Scope> {
    let places: Vec<Option<(u32, u32)>> = cpus.iter().map(|&cpu| place(cpu_root, cpu)).collect();
    let sockets: Vec<u32> = places.iter().flatten().map(|(socket, _)| *socket).collect();
    let per_die = sockets
        .iter()
        .enumerate()
        .any(|(i, s)| sockets[..i].contains(s));
    cpus.iter()
        .zip(places)
        .map(|(&cpu, place)| match place {
            None => Scope::Cpu(cpu),
            Some((socket, die)) if per_die => Scope::Die { socket, die },
            Some((socket, _)) => Scope::Socket(socket),
        })
        .collect()
}

/// The socket of `cpu`, where its topology says.
pub fn socket_of(cpu_root: &Path, cpu: u32) -> Option<u32> {
    place(cpu_root, cpu).map(|(socket, _)| socket)
}

/// Which socket each CPU is on, read from its topology once per CPU and
/// then found by index: the engine asks it for every CPU of every cgroup
/// whose weight it sums per socket, the energy account for every CPU.
#[derive(Debug)]
pub struct Sockets {
    cpu_root: PathBuf,
    /// Per CPU number, the place of its socket in `ids` once read
    /// ([`UNREAD`] before): one load finds where a CPU's value is summed.
    slots: Vec<u32>,
    /// The sockets read so far, in the order they were first read.
    ids: Vec<u32>,
    /// Every CPU below it was read: a cgroup's CPUs below it need no
    /// look.
    dense: u32,
    /// On two sockets or more: the values [`Sockets::weigh`] read last,
    /// and where each socket's CPUs are among the CPUs it read them of.
    values: Vec<f64>,
    places: Places,
}

/// A weight summed per socket (socket, sum), in socket order: inline for up
/// to two sockets (most machines), so that reading a cgroup's sums does
/// not go to memory of its own.
pub type SocketSums = smallvec::SmallVec<[(u32, f64); 2]>;

/// The slot of a CPU whose topology was not read yet.
const UNREAD: u32 = u32::MAX;

impl Sockets {
    /// The sockets of the CPUs under `cpu_root`.
    pub fn new(cpu_root: &Path) -> Self {
        Self {
            cpu_root: cpu_root.to_path_buf(),
            slots: Vec::new(),
            ids: Vec::new(),
            dense: 0,
            values: Vec::new(),
            places: Places::default(),
        }
    }

    /// The socket of `cpu`; 0 where the kernel does not say.
    pub fn of(&mut self, cpu: u32) -> u32 {
        let slot = self.slot(cpu);
        self.ids.get(slot as usize).copied().unwrap_or(0)
    }

    /// Where in `ids` the socket of `cpu` is: found by index once read.
    fn slot(&mut self, cpu: u32) -> u32 {
        match self.slots.get(cpu as usize) {
            Some(&slot) if slot != UNREAD => slot,
            _ => self.read(cpu),
        }
    }

    /// Reads the socket of `cpu` (0 where the kernel does not say), and
    /// gives it a place in `ids` if it is the first CPU of it.
    #[cold]
    fn read(&mut self, cpu: u32) -> u32 {
        let socket = socket_of(&self.cpu_root, cpu).unwrap_or(0);
        let slot = match self.ids.iter().position(|&s| s == socket) {
            Some(slot) => slot,
            None => {
                self.ids.push(socket);
                self.ids.len() - 1
            }
        };
        // Never as many sockets as `UNREAD` (each has a CPU of its own).
        let slot = u32::try_from(slot).unwrap_or(UNREAD - 1);
        let at = cpu as usize;
        if at >= self.slots.len() {
            self.slots.resize(at + 1, UNREAD);
        }
        if let Some(place) = self.slots.get_mut(at) {
            *place = slot;
        }
        while self
            .slots
            .get(self.dense as usize)
            .is_some_and(|&s| s != UNREAD)
        {
            self.dense += 1;
        }
        slot
    }

    /// One event's totals on the CPUs of `parts` (each CPU, and what
    /// `value` reads of its part; in CPU order, though any order sums
    /// right): their total as [`exported_sum`] gives it, and the values as
    /// exported (seconds for `clock`) summed per socket into `sums`
    /// (emptied first: the caller's room, kept from one interval to the
    /// next, so that a cgroup's sums allocate nothing once it has been
    /// seen), in socket order, each folded from +0 in the order its CPUs
    /// come: totals that never go back make sums that never go back, equal
    /// to the sum of what is exported per CPU.
    ///
    /// The values are read as they are summed, in one loop that does
    /// little else, like the total alone: the totals of a cgroup's CPUs
    /// are scattered in memory and mostly out of the cache, and a short
    /// loop keeps many of those reads in flight while the sum waits on
    /// each. On one socket the total is its sum (for a clock, each CPU's
    /// seconds are folded beside it). On more, the values read are kept,
    /// and each socket's sum is folded from them over the places of its
    /// CPUs in the list, found once for the list and kept while the next
    /// cgroups have the same CPUs (most have them all): the sockets' folds
    /// wait on no memory and not on each other.
    ///
    /// [`exported_sum`]: crate::totals::exported_sum
    pub fn weigh<T>(
        &mut self,
        parts: &[(u32, T)],
        value: impl Fn(&T) -> f64,
        clock: bool,
        sums: &mut SocketSums,
    ) -> f64 {
        sums.clear();
        // The sockets of CPUs not seen before.
        for &(cpu, _) in parts {
            if cpu >= self.dense {
                self.slot(cpu);
            }
        }
        let total = match self.ids[..] {
            _ if parts.is_empty() => 0.0,
            [id] if clock => {
                let (mut total, mut seconds) = (0.0, 0.0);
                for (_, t) in parts {
                    let v = value(t);
                    (total, seconds) = (total + v, seconds + exported(v, clock));
                }
                sums.push((id, seconds));
                total
            }
            [id] => {
                let total = parts.iter().fold(0.0, |sum, (_, t)| sum + value(t));
                sums.push((id, total));
                total
            }
            _ => {
                let mut values = std::mem::take(&mut self.values);
                values.resize(parts.len(), 0.0);
                let read = values.iter_mut().zip(parts);
                let total = read.fold(0.0, |sum, (kept, (_, t))| {
                    *kept = value(t);
                    sum + *kept
                });
                let cpus = parts.iter().map(|&(cpu, _)| cpu);
                if !self.places.cpus.iter().copied().eq(cpus.clone()) {
                    self.places = Places::of(cpus, &self.slots, &self.ids);
                }
                self.places.sum(&values, clock, sums);
                self.values = values;
                total
            }
        };
        exported(total, clock)
    }
}

/// Where each socket's CPUs are in a list of CPUs.
#[derive(Debug, Default)]
struct Places {
    /// The list.
    cpus: Vec<u32>,
    /// Each socket of its CPUs (in socket order) and their places in it.
    sockets: Vec<(u32, Vec<usize>)>,
}

impl Places {
    /// Of `cpus`, each CPU's place among `ids` (the sockets) in `slots`.
    fn of(cpus: impl Iterator<Item = u32>, slots: &[u32], ids: &[u32]) -> Self {
        let mut places = Self::default();
        for (at, cpu) in cpus.enumerate() {
            places.cpus.push(cpu);
            let slot = slots.get(cpu as usize).copied().unwrap_or(UNREAD);
            let id = ids.get(slot as usize).copied().unwrap_or(0);
            match places.sockets.binary_search_by_key(&id, |(s, _)| *s) {
                Ok(i) => places.sockets[i].1.push(at),
                Err(i) => places.sockets.insert(i, (id, vec![at])),
            }
        }
        places
    }

    /// Into `sums`, each socket's sum of `values` (one per CPU of the
    /// list) as exported, folded from +0 in the order of its CPUs. Two
    /// sockets at a time, side by side: each sum waits on its own adds
    /// only.
    fn sum(&self, values: &[f64], clock: bool, sums: &mut SocketSums) {
        let at = |place: &usize| exported(values.get(*place).copied().unwrap_or(0.0), clock);
        for pair in self.sockets.chunks(2) {
            let ([(a, these)], rest) = pair.split_at(1) else {
                continue;
            };
            let those = rest.first().map_or(&[][..], |(_, p)| &p[..]);
            let (mut x, mut y) = (0.0, 0.0);
            for (p, q) in these.iter().zip(those) {
                (x, y) = (x + at(p), y + at(q));
            }
            let n = these.len().min(those.len());
            x = these[n..].iter().fold(x, |sum, p| sum + at(p));
            y = those[n..].iter().fold(y, |sum, q| sum + at(q));
            sums.push((*a, x));
            if let Some((b, _)) = rest.first() {
                sums.push((*b, y));
            }
        }
    }
}

/// The socket and die of `cpu`; a kernel without `die_id` has one die
/// per socket (0).
fn place(cpu_root: &Path, cpu: u32) -> Option<(u32, u32)> {
    let topology = cpu_root.join(format!("cpu{cpu}/topology"));
    let number = |file: &str| -> Option<u32> {
        std::fs::read_to_string(topology.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let socket = number("physical_package_id")?;
    Some((socket, number("die_id").unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::totals::exported_sum;

    /// CPUs 0-3 on socket 0 (dies 0 and 1), 4-7 on socket 1 (dies 0 and
    /// 1), as a two-socket, two-die machine's sysfs lays them out.
    fn two_sockets_two_dies() -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("temp dir");
        for cpu in 0..8u32 {
            let dir = root.path().join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&dir).expect("topology dir");
            std::fs::write(dir.join("physical_package_id"), format!("{}\n", cpu / 4))
                .expect("socket file");
            std::fs::write(dir.join("die_id"), format!("{}\n", (cpu / 2) % 2)).expect("die file");
        }
        root
    }

    /// CPUs 0-15, each on the socket `socket_of` says.
    fn sockets(socket_of: impl Fn(u32) -> u32) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("temp dir");
        for cpu in 0..16u32 {
            let dir = root.path().join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&dir).expect("topology dir");
            let socket = socket_of(cpu);
            std::fs::write(dir.join("physical_package_id"), format!("{socket}\n"))
                .expect("socket file");
        }
        root
    }

    /// Two sockets numbered alternately, as some two-socket machines
    /// number them: even CPUs on socket 1, odd ones on socket 0.
    fn interleaved() -> tempfile::TempDir {
        sockets(|cpu| 1 - cpu % 2)
    }

    /// `per_cpu` weighed: its total and its sums (into room that held
    /// other sums before).
    fn weigh(sockets: &mut Sockets, per_cpu: &[(u32, f64)], clock: bool) -> (f64, Vec<(u32, f64)>) {
        let mut sums = SocketSums::from_slice(&[(9, 9.0); 3]);
        let total = sockets.weigh(per_cpu, |v| *v, clock, &mut sums);
        (total, sums.to_vec())
    }

    /// Each socket's sum of what each CPU exports, folded from +0 in the
    /// order the CPUs come, apart from [`Sockets::weigh`]'s passes.
    fn reference(root: &Path, per_cpu: &[(u32, f64)], clock: bool) -> Vec<(u32, u64)> {
        let mut sockets = Sockets::new(root);
        let mut sums = std::collections::BTreeMap::new();
        for &(cpu, value) in per_cpu {
            let exported = exported_sum([value], clock);
            *sums.entry(sockets.of(cpu)).or_insert(0.0) += exported;
        }
        sums.into_iter()
            .map(|(s, sum)| (s, sum.to_bits()))
            .collect()
    }

    fn bits(sums: &[(u32, f64)]) -> Vec<(u32, u64)> {
        sums.iter().map(|&(s, sum)| (s, sum.to_bits())).collect()
    }

    /// CPUs of two sockets interleaved, and one the topology does not
    /// know (socket 0): summed per socket, in socket order, with their
    /// total.
    #[test]
    fn per_cpu_values_sum_per_socket_whatever_their_order() {
        let root = two_sockets_two_dies();
        let mut sockets = Sockets::new(root.path());
        let per_cpu = [(4, 1.0), (0, 2.0), (5, 3.0), (1, 4.0), (9, 5.0)];
        let got = weigh(&mut sockets, &per_cpu, false);
        assert_eq!(got, (15.0, vec![(0, 11.0), (1, 4.0)]));
        assert_eq!(
            weigh(&mut sockets, &[(7, 0.5)], false),
            (0.5, vec![(1, 0.5)])
        );
        assert_eq!(weigh(&mut sockets, &[], false), (0.0, vec![]));
        // A clock's nanoseconds, exported in seconds, CPU by CPU.
        let got = weigh(&mut sockets, &[(0, 2e9), (4, 3e9)], true);
        assert_eq!(got, (5.0, vec![(0, 2.0), (1, 3.0)]));
    }

    /// CPUs numbered alternately over two sockets, the second socket's
    /// first: each CPU's value goes to its own socket, sums in socket
    /// order.
    #[test]
    fn interleaved_sockets_sum_apart() {
        let root = interleaved();
        let mut sockets = Sockets::new(root.path());
        let per_cpu: Vec<(u32, f64)> = (0..16).map(|cpu| (cpu, f64::from(cpu + 1))).collect();
        let got = weigh(&mut sockets, &per_cpu, false);
        assert_eq!(got, (136.0, vec![(0, 72.0), (1, 64.0)]));
        let (_, sums) = weigh(&mut sockets, &per_cpu, true);
        assert_eq!(bits(&sums), reference(root.path(), &per_cpu, true));
    }

    /// Six sockets, CPUs spread over them in turn: each its own sum.
    #[test]
    fn six_sockets_sum_apart() {
        let root = sockets(|cpu| 5 - cpu % 6);
        let mut sockets = Sockets::new(root.path());
        let per_cpu: Vec<(u32, f64)> = (0..16).map(|cpu| (cpu, f64::from(cpu))).collect();
        let (_, sums) = weigh(&mut sockets, &per_cpu, false);
        let expected = [
            (0, 16.0),
            (1, 14.0),
            (2, 27.0),
            (3, 24.0),
            (4, 21.0),
            (5, 18.0),
        ];
        assert_eq!(sums, expected);
    }

    /// On one socket, its sum is the total (the same additions in the
    /// same order); of each CPU's seconds for a clock.
    #[test]
    fn one_socket_sums_to_the_total() {
        let root = two_sockets_two_dies();
        let mut sockets = Sockets::new(root.path());
        let per_cpu = [(0, 0.1), (1, 0.2), (2, 0.3), (3, 1e17), (3, 1.0)];
        // The CPUs' sockets read first; then in one pass.
        let (total, sums) = weigh(&mut sockets, &per_cpu, false);
        assert_eq!(bits(&sums), [(0, total.to_bits())]);
        let (total, sums) = weigh(&mut sockets, &per_cpu, false);
        assert_eq!(bits(&sums), [(0, total.to_bits())]);
        let (_, sums) = weigh(&mut sockets, &per_cpu, true);
        assert_eq!(bits(&sums), reference(root.path(), &per_cpu, true));
    }

    /// A CPU keeps the socket read for it when it goes offline (the kernel
    /// removes its topology): what it counted stays on that socket. One
    /// first seen offline is on socket 0, as one whose topology is
    /// unknown.
    #[test]
    fn an_offline_cpu_keeps_its_socket() {
        let root = two_sockets_two_dies();
        let mut sockets = Sockets::new(root.path());
        assert_eq!(weigh(&mut sockets, &[(5, 1.0)], false).1, [(1, 1.0)]);
        for cpu in [5, 6] {
            std::fs::remove_dir_all(root.path().join(format!("cpu{cpu}/topology")))
                .expect("topology removed");
        }
        let per_cpu = [(0, 1.0), (5, 2.0), (6, 4.0)];
        assert_eq!(weigh(&mut sockets, &per_cpu, false).1, [(0, 5.0), (1, 2.0)]);
        assert_eq!((sockets.of(5), sockets.of(6), sockets.of(1000)), (1, 0, 0));
    }

    /// Whatever the CPUs (known or not, in any order), their sockets (one
    /// that is not 0, two interleaved, six) and values: the sums are bit
    /// for bit each socket's exported values folded from +0, the total
    /// that of every value, and totals that grow make sums that grow. A
    /// `Sockets` reused for other cgroups sums each apart.
    #[test]
    fn sums_are_each_sockets_exported_values() {
        use proptest::prelude::*;
        let roots = [sockets(|_| 3), interleaved(), sockets(|cpu| 5 - cpu % 6)];
        let cases = (
            0..roots.len(),
            proptest::collection::vec((0u32..20, 0.0..1e15f64), 0..40),
            proptest::collection::vec(0.0..1e12f64, 40),
            any::<bool>(),
        );
        let mut runner = proptest::test_runner::TestRunner::default();
        let outcome = runner.run(&cases, |(layout, per_cpu, growth, clock)| {
            let root = roots[layout].path();
            let mut sockets = Sockets::new(root);
            let mut last = Vec::new();
            let mut grown = per_cpu.clone();
            for round in 0..2 {
                let (total, sums) = weigh(&mut sockets, &grown, clock);
                let all = exported_sum(grown.iter().map(|&(_, v)| v), clock);
                prop_assert_eq!(total.to_bits(), all.to_bits());
                prop_assert_eq!(bits(&sums), reference(root, &grown, clock));
                if round == 1 {
                    for ((s, now), (t, before)) in sums.iter().zip(&last) {
                        prop_assert!(s == t && now >= before);
                    }
                }
                last = sums;
                for ((_, v), g) in grown.iter_mut().zip(&growth) {
                    *v += g;
                }
            }
            Ok(())
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
    }

    #[test]
    fn a_mask_of_one_cpu_per_socket_counts_per_socket() {
        let root = two_sockets_two_dies();
        assert_eq!(
            of_cpumask(root.path(), &[0, 4]),
            [Scope::Socket(0), Scope::Socket(1)]
        );
    }

    #[test]
    fn a_mask_of_two_cpus_in_a_socket_counts_per_die() {
        let root = two_sockets_two_dies();
        assert_eq!(
            of_cpumask(root.path(), &[0, 2, 4, 6]),
            [
                Scope::Die { socket: 0, die: 0 },
                Scope::Die { socket: 0, die: 1 },
                Scope::Die { socket: 1, die: 0 },
                Scope::Die { socket: 1, die: 1 },
            ]
        );
    }

    #[test]
    fn a_cpu_without_topology_stands_for_itself() {
        let root = two_sockets_two_dies();
        assert_eq!(
            of_cpumask(root.path(), &[0, 9]),
            [Scope::Socket(0), Scope::Cpu(9)]
        );
    }

    #[test]
    fn this_machine_has_a_socket_for_cpu_0() {
        assert!(matches!(
            of_cpumask(Path::new(CPU_ROOT), &[0])[..],
            [Scope::Socket(_)]
        ));
    }
}
