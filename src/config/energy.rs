//! Validation of the `energy:` section: where each socket's energy is read
//! (a meter, or a declared model where the machine has none), and what of
//! it is idle. Attribution itself (`crate::energy`) weighs cgroups by the
//! `cycles` or `task-clock` the config's groups count.
//!
//! ```yaml
//! energy:
//!   meter: auto          # auto, perf, powercap or model; default auto
//!   model:               # needed by `meter: model` and `idle: model`
//!     per: socket        # socket or cpu: what the watts below are for
//!     idle_watts: 40
//!     max_watts: 180
//!   idle: model          # model or none; default model with a model
//! ```

use serde_saphyr::Spanned;

use super::schema::{RawEnergy, RawModel, Text};
use super::validate::Validator;
use super::{ConfigError, GroupDef};

/// Largest wattage a model may declare (per socket or per CPU): beyond any
/// socket built, so a larger value is a typo.
pub const MAX_MODEL_WATTS: f64 = 10_000.0;

/// The `event` labels attribution weighs cgroups by, best first.
pub const WEIGHT_EVENTS: [&str; 2] = ["cycles", "task-clock"];

/// Every meter as written.
const METERS: [(&str, MeterChoice); 4] = [
    ("auto", MeterChoice::Auto),
    ("perf", MeterChoice::Perf),
    ("powercap", MeterChoice::Powercap),
    ("model", MeterChoice::Model),
];

/// The hint of a bad `meter:`.
const METER_HINT: &str = "write `meter: auto` (the first this machine has of perf's `power/` \
                          PMU, powercap and the model), `perf`, `powercap` or `model`";

/// The hint of a bad `idle:`.
const IDLE_HINT: &str = "write `idle: model` (the model's idle watts are idle) or `idle: none` \
                         (all of the energy is shared by activity)";

/// Where the energy of each socket is read from (`meter:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterChoice {
    /// The first of perf's `power/` PMU, powercap and the model that this
    /// machine has.
    Auto,
    /// The kernel's RAPL counters through perf's `power/` PMU.
    Perf,
    /// The kernel's RAPL counters through `/sys/class/powercap`.
    Powercap,
    /// The declared model, scaled by utilization: an estimate, exported
    /// with `source="model"`.
    Model,
}

impl MeterChoice {
    /// As written in the config.
    pub fn name(self) -> &'static str {
        METERS
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("auto", |(name, _)| name)
    }
}

/// What a model's watts are declared for (`model.per:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelScope {
    /// One socket (package).
    Socket,
    /// One CPU (a vCPU on a cloud machine): a socket's watts are these
    /// times its CPUs.
    Cpu,
}

/// A declared power model: a socket draws `idle` watts when its CPUs do
/// nothing and `max` when they are all busy, linearly in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerModel {
    /// Per socket or per CPU.
    pub per: ModelScope,
    /// Idle power, in milliwatts (kept whole so that configs compare).
    pub idle_milliwatts: u64,
    /// Power with every CPU busy, in milliwatts; at least `idle`.
    pub max_milliwatts: u64,
}

/// What of a meter's energy is idle (`idle:`), the rest being shared by
/// activity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePolicy {
    /// The model's idle power over the interval (at most what the meter
    /// counted) is idle, shown on the host.
    Model,
    /// Nothing is idle: all of it is shared by activity.
    None,
}

impl IdlePolicy {
    /// Every policy, as written.
    const ALL: [(&'static str, Self); 2] = [("model", Self::Model), ("none", Self::None)];
}

/// The validated `energy:` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnergyDef {
    /// Where energy is read.
    pub meter: MeterChoice,
    /// The declared model, if any.
    pub model: Option<PowerModel>,
    /// What of it is idle.
    pub idle: IdlePolicy,
}

impl Validator<'_> {
    /// The `energy:` section; `groups` are the top-level groups, one of
    /// which must count a weight event. `None` after a mistake (reported).
    pub(super) fn energy(&self, raw: Spanned<RawEnergy>, groups: &[GroupDef]) -> Option<EnergyDef> {
        let at = raw.referenced;
        let raw = raw.value;
        let before = self.mistakes();
        let meter = match &raw.meter {
            Some(text) => self.keep(self.choice(text, "energy meter", &METERS, METER_HINT)),
            None => Some(MeterChoice::Auto),
        };
        let model = raw.model.and_then(|m| self.keep(self.model(m)));
        let idle = match &raw.idle {
            Some(text) => {
                self.keep(self.choice(text, "energy idle policy", &IdlePolicy::ALL, IDLE_HINT))
            }
            None if model.is_some() => Some(IdlePolicy::Model),
            None => Some(IdlePolicy::None),
        };
        let needs_model = |text: &Option<Text>, what: &str| {
            let text = text.as_ref()?;
            let error = self.error(text.referenced, format!("`{what}` needs `energy.model:`"));
            Some(error.hint(
                "declare the model, e.g. `model: {per: socket, idle_watts: 40, max_watts: 180}` \
                 (the machine's idle and full-load power), or choose another",
            ))
        };
        if self.mistakes() == before && model.is_none() {
            if meter == Some(MeterChoice::Model) {
                self.keep::<()>(needs_model(&raw.meter, "meter: model").map_or(Ok(()), Err));
            }
            if idle == Some(IdlePolicy::Model) {
                self.keep::<()>(needs_model(&raw.idle, "idle: model").map_or(Ok(()), Err));
            }
        }
        let weighed = groups
            .iter()
            .flat_map(|g| &g.events)
            .any(|e| WEIGHT_EVENTS.contains(&e.label().as_str()));
        if !weighed {
            self.keep::<()>(Err(self
                .error(
                    at,
                    "`energy:` shares each socket's energy by the cgroups' `cycles` \
                     (or `task-clock`), which no group counts",
                )
                .hint(
                    "count both in groups of their own, e.g. `groups: {sched: [task-clock], \
                     ipc: [cycles, instructions]}` (a group with `cycles` is refused \
                     whole where there is no PMU)",
                )));
        }
        if self.mistakes() > before {
            return None;
        }
        Some(EnergyDef {
            meter: meter?,
            model,
            idle: idle?,
        })
    }

    /// `model:`: `per` and both wattages, idle at most max.
    fn model(&self, raw: Spanned<RawModel>) -> Result<PowerModel, ConfigError> {
        let at = raw.referenced;
        let raw = raw.value;
        let per = match &raw.per {
            Some(text) => self.choice(
                text,
                "energy model scope",
                &[("socket", ModelScope::Socket), ("cpu", ModelScope::Cpu)],
                "write `per: socket` or `per: cpu` (the watts of one vCPU)",
            )?,
            None => ModelScope::Socket,
        };
        let watts = |value: &Option<Spanned<f64>>, key: &str| {
            let Some(value) = value else {
                return Err(self
                    .error(at, format!("`energy.model` has no `{key}`"))
                    .hint("declare both, e.g. `{idle_watts: 40, max_watts: 180}`"));
            };
            let w = value.value;
            if !(0.0..=MAX_MODEL_WATTS).contains(&w) {
                return Err(self
                    .error(
                        value.referenced,
                        format!(
                            "`{key}` is {}, outside 0..={MAX_MODEL_WATTS}",
                            watts_shown(w)
                        ),
                    )
                    .hint("write the watts a socket (or a CPU, with `per: cpu`) draws"));
            }
            Ok((value.referenced, w, (w * 1000.0).round() as u64))
        };
        let (_, idle_w, idle) = watts(&raw.idle_watts, "idle_watts")?;
        let (max_at, max_w, max) = watts(&raw.max_watts, "max_watts")?;
        if max < idle || max == 0 {
            return Err(self
                .error(
                    max_at,
                    format!(
                        "`max_watts` ({}) is below `idle_watts` ({}) or 0",
                        watts_shown(max_w),
                        watts_shown(idle_w)
                    ),
                )
                .hint("`max_watts` is the power with every CPU busy, at least the idle power"));
        }
        Ok(PowerModel {
            per,
            idle_milliwatts: idle,
            max_milliwatts: max,
        })
    }
}

/// A wattage as an error shows it: in full up to a million, else with an
/// exponent (`1e308`, not 309 digits).
fn watts_shown(w: f64) -> String {
    if w.is_finite() && w.abs() < 1e6 {
        w.to_string()
    } else {
        format!("{w:e}")
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, parse};

    use super::*;

    const GROUPS: &str = "groups: {sched: [task-clock]}\n";

    fn ok(yaml: &str) -> Config {
        parse("e.yaml", &format!("{GROUPS}{yaml}")).unwrap_or_else(|e| panic!("{yaml}\n{e}"))
    }

    fn err(yaml: &str) -> ConfigError {
        parse("e.yaml", yaml).expect_err(yaml)
    }

    #[test]
    fn a_model_is_kept_in_milliwatts_and_makes_idle_the_models() {
        let config =
            ok("energy:\n  meter: model\n  model: {per: cpu, idle_watts: 2.5, max_watts: 10}\n");
        let energy = config.energy.expect("energy");
        assert_eq!(energy.meter, MeterChoice::Model);
        assert_eq!(energy.idle, IdlePolicy::Model);
        assert_eq!(
            energy.model,
            Some(PowerModel {
                per: ModelScope::Cpu,
                idle_milliwatts: 2500,
                max_milliwatts: 10_000
            })
        );
    }

    #[test]
    fn without_a_model_the_meter_is_auto_and_nothing_is_idle() {
        let energy = ok("energy: {}\n").energy.expect("energy");
        assert_eq!(
            (energy.meter, energy.idle, energy.model),
            (MeterChoice::Auto, IdlePolicy::None, None)
        );
        assert_eq!(ok("interval: 1s\n").energy, None);
    }

    #[test]
    fn mistakes_name_line_column_and_the_fix() {
        let e = err(&format!("{GROUPS}energy:\n  meter: powrcap\n"));
        assert_eq!((e.line, e.column), (Some(3), Some(10)), "{e}");
        assert!(e.to_string().contains("did you mean `powercap`"), "{e}");

        let e = err(&format!("{GROUPS}energy:\n  meter: model\n"));
        assert_eq!((e.line, e.column), (Some(3), Some(10)), "{e}");
        assert!(e.to_string().contains("needs `energy.model:`"), "{e}");

        let e = err(&format!("{GROUPS}energy:\n  idle: model\n"));
        assert_eq!(e.line, Some(3), "{e}");

        let e = err(&format!(
            "{GROUPS}energy:\n  model: {{idle_watts: 50, max_watts: 20}}\n"
        ));
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.to_string().contains("below `idle_watts`"), "{e}");

        let e = err(&format!(
            "{GROUPS}energy:\n  model: {{idle_watts: -1, max_watts: 20}}\n"
        ));
        assert!(e.to_string().contains("outside"), "{e}");

        let e = err(&format!("{GROUPS}energy:\n  model: {{max_watts: 20}}\n"));
        assert!(e.to_string().contains("no `idle_watts`"), "{e}");

        let e = err(&format!(
            "{GROUPS}energy:\n  model: {{per: vcpu, idle_watts: 1, max_watts: 2}}\n"
        ));
        assert!(e.to_string().contains("did you mean `cpu`"), "{e}");

        let e = err(&format!("{GROUPS}energy:\n  meters: auto\n"));
        assert!(e.to_string().contains("did you mean `meter`"), "{e}");
    }

    /// Wattages no machine draws, and values that are no wattage: each an
    /// error at the value's line and column, saying the range.
    #[test]
    fn extreme_wattages_are_refused_where_they_are_written() {
        for (value, says) in [
            ("1e308", "outside 0..=10000"),
            ("1e400", "must be a number of watts"),
            (".inf", "outside 0..=10000"),
            ("-.inf", "outside 0..=10000"),
            (".nan", "outside 0..=10000"),
            ("-1", "outside 0..=10000"),
            ("10000.5", "outside 0..=10000"),
            ("0", "below `idle_watts` (0) or 0"),
            ("0.0001", "or 0"),
        ] {
            let yaml = format!("{GROUPS}energy:\n  model: {{idle_watts: 0, max_watts: {value}}}\n");
            let e = err(&yaml);
            assert_eq!((e.line, e.column), (Some(3), Some(37)), "{value}: {e}");
            assert!(e.to_string().contains(says), "{value}: {e}");
            assert!(e.to_string().len() < 300, "{value}: {e}");
        }
        let e = err(&format!(
            "{GROUPS}energy:\n  model: {{idle_watts: 1e308, max_watts: 1e308}}\n"
        ));
        assert_eq!((e.line, e.column), (Some(3), Some(23)), "{e}");
        // Not a number at all: the type's error, at the value.
        let e = err(&format!(
            "{GROUPS}energy:\n  model: {{idle_watts: 1, max_watts: lots}}\n"
        ));
        assert_eq!(e.line, Some(3), "{e}");
        // The largest and the smallest wattages that are one.
        let energy = ok("energy:\n  model: {idle_watts: 0, max_watts: 10000}\n")
            .energy
            .expect("energy");
        assert_eq!(energy.model.map(|m| m.max_milliwatts), Some(10_000_000));
        let energy = ok("energy:\n  model: {idle_watts: 0, max_watts: 0.001}\n")
            .energy
            .expect("energy");
        assert_eq!(energy.model.map(|m| m.max_milliwatts), Some(1));
    }

    #[test]
    fn energy_needs_a_group_counting_cycles_or_task_clock() {
        let e = err("groups: {faults: [page-faults]}\nenergy: {meter: auto}\n");
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.to_string().contains("which no group counts"), "{e}");
        // `cpu-cycles` is perf's alias of `cycles`.
        let yaml = "groups: {ipc: [cpu-cycles, instructions]}\nenergy: {}\n";
        assert!(parse("e.yaml", yaml).is_ok());
    }
}
