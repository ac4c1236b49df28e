//! Which backend counts (`backend:`): `bpf` where asked and possible,
//! `cgroup` where asked, and for `auto` BPF where the kernel and cgperf's
//! privileges allow it, else the cgroup backend, with the reason kept for
//! the log, `cgperf check` and `cgperf_backend_info`.

use super::Backend;
use super::auto::{AutoBackend, Left};
use super::bpf::{self, BpfBackend, BpfProbe, Unavailable};
use super::budget::{FdBudget, Fds};
use super::cgroup::{CgroupBackend, CgroupProbe};
use crate::config::{BackendChoice, Config};
use crate::machine::Machine;
use crate::plan::{Plan, Probe};
use crate::snapshot::BackendInfo;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// A counting mechanism cgperf has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// [`CgroupBackend`].
    Cgroup,
    /// [`BpfBackend`].
    Bpf,
}

impl Kind {
    /// The `backend` label, as `backend:` names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cgroup => "cgroup",
            Self::Bpf => "bpf",
        }
    }
}

/// An opened backend, ready for the engine.
pub struct Opened {
    /// The backend.
    pub backend: Box<dyn Backend + Send>,
    /// Every perf descriptor of the process, the backend's included, and
    /// how many of them cgperf may hold: the backend's budget, which the
    /// other targets keep to as well.
    pub fds: Fds,
    /// What it is, for `cgperf_backend_info`.
    pub info: BackendInfo,
    /// Why `auto` left BPF for the cgroup backend while it ran, once it
    /// did ([`super::auto`]).
    pub left: Left,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("info", &self.info).finish()
    }
}

/// The backend chosen, and why `auto` did not choose BPF.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// What counts.
    pub kind: Kind,
    /// For `auto` on a machine that cannot count through BPF: why not.
    pub fallback: Option<Unavailable>,
    /// Chosen by `auto`: [`Chosen::plan`] may still fall back, and so may
    /// the backend it opens, while it counts ([`Chosen::now`]).
    pub auto: bool,
    /// Why the backend `auto` opened left BPF while it ran, once it did.
    pub left: Left,
    /// How long `auto` watches the program it loaded for hidden switches
    /// ([`bpf::hidden_switches`]): [`bpf::WATCH`] unless the daemon is
    /// told otherwise.
    pub watch: Duration,
}

/// The backend `choice` means on this machine, for this process, counting
/// at most `max_cgroups`; `Err` when `bpf` is asked for and cannot be had.
pub fn choose(choice: BackendChoice, max_cgroups: Option<usize>) -> Result<Chosen, Unavailable> {
    let auto = choice == BackendChoice::Auto;
    let chosen = |kind, fallback| Chosen {
        kind,
        fallback,
        auto,
        left: Left::default(),
        watch: bpf::WATCH,
    };
    let capacity = max_cgroups.unwrap_or(bpf::DEFAULT_CAPACITY);
    match choice {
        BackendChoice::Cgroup => Ok(chosen(Kind::Cgroup, None)),
        BackendChoice::Bpf => bpf::available(capacity).map(|inexact| {
            if let Some(how) = inexact {
                tracing::warn!(
                    "backend: bpf counts differently from the cgroup backend on this kernel: {how}"
                );
            }
            chosen(Kind::Bpf, None)
        }),
        BackendChoice::Auto => {
            let (kind, fallback) = auto_choice(bpf::available(capacity));
            if kind == Kind::Cgroup {
                bpf::unload();
            }
            Ok(chosen(kind, fallback))
        }
    }
}

/// What `auto` makes of whether cgperf can count through BPF here
/// ([`bpf::available`]): BPF only where it counts what the cgroup backend
/// counts, else the cgroup backend and why not BPF.
fn auto_choice(available: Result<Option<String>, Unavailable>) -> (Kind, Option<Unavailable>) {
    match available {
        Ok(None) => (Kind::Bpf, None),
        Ok(Some(how)) => (
            Kind::Cgroup,
            Some(Unavailable {
                missing: format!("counts equal to the cgroup backend's: {how}"),
                fix: "set `backend: bpf` to count through BPF all the same".into(),
            }),
        ),
        Err(why) => (Kind::Cgroup, Some(why)),
    }
}

/// How the bpf backend's counts would differ on a kernel where its program
/// found `found` switches without the `sched_switch` tracepoint.
fn hidden(found: u64, watch: Duration) -> String {
    format!(
        "this kernel switched out of tasks without the sched_switch tracepoint the bpf backend \
         counts by ({found} such switches in the {} s after its program loaded; some VM guest \
         kernels do so for some of their tasks), and what perf counters count while such a \
         task runs would be charged to the cgroup of the task that runs next",
        watch.as_secs_f64()
    )
}

impl Chosen {
    /// The plan of `config` on `machine`, asking this backend's probe (see
    /// [`Plan::build_in_time`]), and that probe. Under `auto`, a config
    /// whose groups need more counters per CPU than the BPF backend holds
    /// is counted by the cgroup backend instead, which counts them all,
    /// and says why; so is any config on a kernel that the program, watched
    /// for [`bpf::WATCH`] after it loaded, found switching out of tasks
    /// without the tracepoint it counts by ([`bpf::hidden_switches`]).
    pub fn plan(
        &mut self,
        config: &Config,
        machine: &Machine,
    ) -> anyhow::Result<(Plan, Arc<dyn Probe>)> {
        let probe = self.probe(machine);
        let plan = Plan::build_in_time(config, machine, probe.clone())?;
        if !self.auto || self.kind != Kind::Bpf {
            return Ok((plan, probe));
        }
        let why = match probe.counters_per_cpu() {
            Some(room) if plan.counters > room => Some(Unavailable {
                missing: format!(
                    "room for the config's counters (its groups need {} per CPU, the bpf \
                     backend holds {room})",
                    plan.counters
                ),
                fix: "count fewer events, or set `backend: cgroup` to say so".into(),
            }),
            _ => bpf::hidden_switches(self.watch)
                .and_then(|n| auto_choice(Ok(Some(hidden(n, self.watch)))).1),
        };
        let Some(why) = why else {
            return Ok((plan, probe));
        };
        bpf::unload();
        self.kind = Kind::Cgroup;
        self.fallback = Some(why);
        let probe = self.probe(machine);
        let plan = Plan::build_in_time(config, machine, probe.clone())?;
        Ok((plan, probe))
    }

    /// What planning, `cgperf check` and `cgperf list` ask: this backend's
    /// probe.
    pub fn probe(&self, machine: &Machine) -> Arc<dyn Probe> {
        match self.now() {
            Kind::Cgroup => Arc::new(CgroupProbe::new(machine)),
            Kind::Bpf => Arc::new(BpfProbe::new(machine)),
        }
    }

    /// What counts now: the backend chosen, or the cgroup backend once
    /// `auto`'s left BPF while it ran.
    pub fn now(&self) -> Kind {
        match self.left.get() {
            Some(_) => Kind::Cgroup,
            None => self.kind,
        }
    }

    /// The backend, within `budget` perf descriptors. Opened before the
    /// daemon drops the capabilities only start-up needs: the BPF backend
    /// turns the kernel's BPF statistics on (`CAP_SYS_ADMIN`) for as long as
    /// it lives.
    pub fn open(
        &self,
        config: &Config,
        plan: &Plan,
        budget: FdBudget,
    ) -> Result<Opened, Unavailable> {
        // Every perf descriptor, the hotplug canaries' and rings' included.
        let fds = Fds {
            tally: Arc::new(AtomicU64::new(0)),
            budget,
        };
        let backend: Box<dyn Backend + Send> = match self.kind {
            Kind::Cgroup => Box::new(CgroupBackend::new(fds.clone(), plan.ring_pages)),
            Kind::Bpf => {
                let capacity = config.max_cgroups.unwrap_or(bpf::DEFAULT_CAPACITY);
                let (fds, pages) = (fds.clone(), plan.ring_pages);
                match self.auto {
                    true => Box::new(AutoBackend::new(capacity, fds, pages, self.left.clone())?),
                    false => Box::new(BpfBackend::new(capacity, fds, pages)?),
                }
            }
        };
        let info = BackendInfo {
            name: self.kind.name(),
            fallback: self.fallback.as_ref().map(|why| why.to_string().into()),
        };
        Ok(Opened {
            backend,
            fds,
            info,
            left: self.left.clone(),
        })
    }

    /// One line for the log and `cgperf check`.
    pub fn describe(&self) -> String {
        if let Some(why) = self.left.get() {
            return format!("cgroup (`auto`, after bpf: {why})");
        }
        match (&self.fallback, self.kind) {
            (None, Kind::Bpf) => "bpf (one counter per event and CPU, charged to cgroups at \
                                  context switches)"
                .into(),
            (None, Kind::Cgroup) => "cgroup (one perf event per cgroup, event and CPU)".into(),
            (Some(why), kind) => format!("{} (`auto`: {why})", kind.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_counts_through_bpf_only_where_it_counts_what_the_cgroup_backend_counts() {
        assert_eq!(auto_choice(Ok(None)), (Kind::Bpf, None));
        let (kind, why) = auto_choice(Ok(Some("a task moved by another …".into())));
        assert_eq!(kind, Kind::Cgroup);
        let why = why.expect("a reason").to_string();
        assert_eq!(
            why,
            "cannot count through BPF: counts equal to the cgroup backend's: a task moved by \
             another …; set `backend: bpf` to count through BPF all the same"
        );
        let (kind, why) = auto_choice(Ok(Some(hidden(3, bpf::WATCH))));
        assert_eq!(kind, Kind::Cgroup);
        assert_eq!(
            why.expect("a reason").to_string(),
            "cannot count through BPF: counts equal to the cgroup backend's: this kernel switched \
             out of tasks without the sched_switch tracepoint the bpf backend counts by (3 such \
             switches in the 1 s after its program loaded; some VM guest kernels do so for some \
             of their tasks), and what perf counters count while such a task runs would be \
             charged to the cgroup of the task that runs next; set `backend: bpf` to count \
             through BPF all the same"
        );
        let refused = Unavailable {
            missing: "permission (loading)".into(),
            fix: "grant it".into(),
        };
        assert_eq!(
            auto_choice(Err(refused.clone())),
            (Kind::Cgroup, Some(refused))
        );
    }
}
