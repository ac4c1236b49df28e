//! Where a host series counts: the whole machine, one CPU, or the socket
//! or die of a PMU that counts once per socket or die. The kernel says
//! which CPU stands for which: a PMU's `cpumask` names one CPU per socket
//! (or per die, where a socket has several and the PMU counts each), and
//! each CPU's `topology/physical_package_id` and `die_id` say which
//! socket and die it is on.

use crate::snapshot::Scope;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Per CPU number, its socket once read.
    known: Vec<Option<u32>>,
    /// Reused by [`Sockets::sum`]: a sum allocates only what it returns.
    sums: Vec<(u32, f64)>,
}

impl Sockets {
    /// The sockets of the CPUs under `cpu_root`.
    pub fn new(cpu_root: &Path) -> Self {
        Self {
            cpu_root: cpu_root.to_path_buf(),
            known: Vec::new(),
            sums: Vec::new(),
        }
    }

    /// The socket of `cpu`; 0 where the kernel does not say.
    pub fn of(&mut self, cpu: u32) -> u32 {
        let at = cpu as usize;
        if at >= self.known.len() {
            self.known.resize(at + 1, None);
        }
        let root = &self.cpu_root;
        *self.known[at].get_or_insert_with(|| socket_of(root, cpu).unwrap_or(0))
    }

    /// `per_cpu`'s values (in any order) summed per socket, in socket
    /// order. Each socket's sum is folded in the order its CPUs come, so
    /// that totals that never go back make sums that never go back.
    /// Shared: a snapshot shows a cgroup's sums again, unchanged, while
    /// its totals do not change.
    pub fn sum(&mut self, per_cpu: impl IntoIterator<Item = (u32, f64)>) -> Arc<[(u32, f64)]> {
        let mut sums = std::mem::take(&mut self.sums);
        sums.clear();
        // Usually one or two sockets: the last one found is added to
        // until another comes.
        let mut last: Option<(u32, f64)> = None;
        for (cpu, value) in per_cpu {
            let socket = match self.known.get(cpu as usize) {
                Some(Some(socket)) => *socket,
                _ => self.of(cpu),
            };
            match &mut last {
                Some((s, sum)) if *s == socket => *sum += value,
                _ => {
                    sums.extend(last);
                    let at = sums.iter().position(|(s, _)| *s == socket);
                    let sum = at.map_or(0.0, |at| sums.swap_remove(at).1);
                    last = Some((socket, sum + value));
                }
            }
        }
        sums.extend(last);
        sums.sort_unstable_by_key(|(s, _)| *s);
        let out = Arc::from(&sums[..]);
        self.sums = sums;
        out
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

    /// CPUs 0-3 on socket 0 (dies 0 and 1), 4-7 on socket 1 (dies 0 and
    /// 1), as a two-socket, two-die machine's sysfs lays them out.
    fn two_sockets_two_dies() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for cpu in 0..8u32 {
            let dir = root.path().join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("physical_package_id"), format!("{}\n", cpu / 4)).unwrap();
            std::fs::write(dir.join("die_id"), format!("{}\n", (cpu / 2) % 2)).unwrap();
        }
        root
    }

    /// CPUs of two sockets interleaved, and one the topology does not
    /// know (socket 0): summed per socket, in socket order.
    #[test]
    fn per_cpu_values_sum_per_socket_whatever_their_order() {
        let root = two_sockets_two_dies();
        let mut sockets = Sockets::new(root.path());
        let per_cpu = [(4, 1.0), (0, 2.0), (5, 3.0), (1, 4.0), (9, 5.0)];
        assert_eq!(*sockets.sum(per_cpu), [(0, 11.0), (1, 4.0)]);
        assert_eq!(*sockets.sum([(7, 0.5)]), [(1, 0.5)]);
        assert!(sockets.sum([]).is_empty());
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
