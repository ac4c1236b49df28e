//! The declared model, for machines without a meter (most virtual
//! machines): each socket draws its idle power, plus the difference to its
//! maximum times the share of its CPUs' time that was busy (`/proc/stat`).
//! An estimate, exported with `source="model"`.

use super::{Busy, Channel, Meter};
use crate::config::{ModelScope, PowerModel};
use crate::host::Sockets;
use std::collections::BTreeMap;
use std::path::Path;

/// The model's meter: one `pkg` channel per socket.
#[derive(Debug)]
pub struct Model {
    model: PowerModel,
    channels: Vec<Channel>,
    sockets: Sockets,
}

/// Micro-Joules a model draws over `busy`'s CPUs of one socket: `idle`
/// only, or all of it. `(idle power part, whole)`.
pub fn model_energy(model: &PowerModel, times: &[(u64, u64)]) -> (u64, u64) {
    let n = times.len().max(1) as u128;
    // A CPU is never busier than all of its time, whatever `/proc/stat`
    // said.
    let busy: u128 = times.iter().map(|(b, a)| u128::from(*b.min(a))).sum();
    let all: u128 = times.iter().map(|(_, a)| u128::from(*a)).sum();
    let (idle_mw, max_mw) = (
        u128::from(model.idle_milliwatts),
        u128::from(model.max_milliwatts),
    );
    // mW × ns = 1e-6 µJ. Per socket, the socket's time is its CPUs'
    // average; per CPU, each CPU draws over its own time.
    let per = match model.per {
        ModelScope::Socket => n,
        ModelScope::Cpu => 1,
    };
    // Saturating: no declared wattage or kernel count makes it overflow.
    let idle = idle_mw.saturating_mul(all) / per / 1_000_000;
    let active = max_mw.saturating_sub(idle_mw).saturating_mul(busy) / per / 1_000_000;
    let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    (clamp(idle), clamp(idle.saturating_add(active)))
}

impl Model {
    /// The model over the online CPUs' sockets (`cpu_root`'s topology); an
    /// error without a declared model.
    pub fn new(model: Option<PowerModel>, cpu_root: &str) -> Result<Self, String> {
        let model = model.ok_or("no `energy.model:` is declared")?;
        let mut sockets = Sockets::new(Path::new(cpu_root));
        let online = crate::cpus::online()?;
        let mut seen: Vec<u32> = online.iter().map(|cpu| sockets.of(*cpu)).collect();
        seen.sort_unstable();
        seen.dedup();
        let channels = seen
            .into_iter()
            .map(|socket| Channel {
                domain: "pkg",
                socket,
            })
            .collect();
        Ok(Self {
            model,
            channels,
            sockets,
        })
    }
}

impl Meter for Model {
    fn source(&self) -> &'static str {
        "model"
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    fn read(&mut self, busy: &Busy) -> (Vec<u64>, Option<String>) {
        let mut per_socket: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for (cpu, times) in &busy.cpus {
            per_socket
                .entry(self.sockets.of(*cpu))
                .or_default()
                .push(*times);
        }
        let deltas = self
            .channels
            .iter()
            .map(|c| {
                per_socket
                    .get(&c.socket)
                    .map_or(0, |t| model_energy(&self.model, t).1)
            })
            .collect();
        (deltas, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_socket_draws_idle_plus_its_busy_share_of_the_rest() {
        let socket = PowerModel {
            per: ModelScope::Socket,
            idle_milliwatts: 10_000,
            max_milliwatts: 50_000,
        };
        // Two CPUs over 1 s, one busy half of it: 25 % of the socket.
        let times = [(SECOND / 2, SECOND), (0, SECOND)];
        assert_eq!(model_energy(&socket, &times), (10_000_000, 20_000_000));
        // Nothing busy: idle only; all busy: the maximum.
        assert_eq!(model_energy(&socket, &[(0, SECOND); 2]).1, 10_000_000);
        assert_eq!(model_energy(&socket, &[(SECOND, SECOND); 2]).1, 50_000_000);
        let vcpu = PowerModel {
            per: ModelScope::Cpu,
            idle_milliwatts: 1_000,
            max_milliwatts: 5_000,
        };
        // Per vCPU: each draws over its own time.
        assert_eq!(model_energy(&vcpu, &times), (2_000_000, 4_000_000));
        assert_eq!(model_energy(&vcpu, &[]), (0, 0));
        // The largest values anything could give: saturated, never
        // overflowing, never busier than all of the time.
        let huge = PowerModel {
            per: ModelScope::Cpu,
            idle_milliwatts: u64::MAX,
            max_milliwatts: u64::MAX,
        };
        let all = [(u64::MAX, u64::MAX), (u64::MAX, u64::MAX)];
        assert_eq!(model_energy(&huge, &all), (u64::MAX, u64::MAX));
        assert_eq!(model_energy(&socket, &[(2 * SECOND, SECOND)]).1, 50_000_000);
    }
}
