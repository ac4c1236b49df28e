//! Energy meters: where each socket's energy is read. Each reader gives,
//! per channel (a socket's domain), the micro-Joules counted since its last
//! read, never less than zero: wraparound and the kernel's units are the
//! reader's business. `auto` takes the first of perf's `power/` PMU,
//! powercap and the declared model that this machine has, and says why it
//! passed over the others.

pub mod model;
mod perf;
mod powercap;
pub mod procstat;

pub use model::Model;
pub use perf::PowerPmu;
pub use powercap::Powercap;
pub use procstat::{Busy, read_busy};

use crate::backend::budget::Fds;
use crate::config::{EnergyDef, MeterChoice};

/// One thing a meter measures: a domain of one socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    /// `pkg`, `cores`, `ram` or `psys`.
    pub domain: &'static str,
    /// The socket it covers (`psys`: the socket of the CPU it is read on,
    /// the platform's counter's label).
    pub socket: u32,
}

/// The CPUs whose activity a channel's energy is shared by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Over {
    /// Its socket's.
    Socket(u32),
    /// Every CPU of the machine.
    Machine,
}

impl Channel {
    /// The CPUs whose activity its energy is shared by: its socket's, and
    /// for `psys`, which meters the whole platform (every socket, and
    /// more), every CPU's.
    pub fn over(&self) -> Over {
        match self.domain {
            "psys" => Over::Machine,
            _ => Over::Socket(self.socket),
        }
    }
}

/// What a meter counted on one channel over an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// Micro-Joules.
    pub energy: u64,
    /// Of which idle, by the model's idle power (0 without a model or with
    /// `idle: none`): at most `energy`.
    pub idle: u64,
}

/// A reader of energy.
pub trait Meter: std::fmt::Debug + Send {
    /// `perf`, `powercap` or `model`: the `source` label.
    fn source(&self) -> &'static str;

    /// Its channels, in a stable order.
    fn channels(&self) -> &[Channel];

    /// What each channel counted since the last call (the first call
    /// starts counting and gives zeros), over `busy`, the CPUs' time since
    /// the last call. A channel that cannot be read gives 0 and an error
    /// for the log.
    fn read(&mut self, busy: &Busy) -> (Vec<u64>, Option<String>);
}

/// The meter `def` asks for on this machine, or why there is none; and
/// why each meter `auto` tried before it was passed over. A meter's perf
/// descriptors are counted in, and kept within, `fds`.
pub fn open(def: &EnergyDef, fds: &Fds) -> (Result<Box<dyn Meter>, String>, Vec<String>) {
    let mut why = Vec::new();
    let mut try_one = |choice: MeterChoice| -> Option<Box<dyn Meter>> {
        let found: Result<Box<dyn Meter>, String> = match choice {
            MeterChoice::Perf => PowerPmu::open(std::path::Path::new(perf::POWER_PMU), fds)
                .map(|m| Box::new(m) as Box<dyn Meter>),
            MeterChoice::Powercap => Powercap::open(std::path::Path::new(powercap::POWERCAP))
                .map(|m| Box::new(m) as Box<dyn Meter>),
            MeterChoice::Model => {
                Model::new(def.model, crate::host::CPU_ROOT).map(|m| Box::new(m) as Box<dyn Meter>)
            }
            MeterChoice::Auto => Err("auto".to_owned()),
        };
        match found {
            Ok(meter) => Some(meter),
            Err(reason) => {
                why.push(format!("{}: {reason}", choice.name()));
                None
            }
        }
    };
    let order: &[MeterChoice] = match def.meter {
        MeterChoice::Auto => &[MeterChoice::Perf, MeterChoice::Powercap, MeterChoice::Model],
        MeterChoice::Perf => &[MeterChoice::Perf],
        MeterChoice::Powercap => &[MeterChoice::Powercap],
        MeterChoice::Model => &[MeterChoice::Model],
    };
    for choice in order {
        if let Some(meter) = try_one(*choice) {
            return (Ok(meter), why);
        }
    }
    (Err(why.join("; ")), Vec::new())
}

/// Micro-Joules from a count of `scale` Joules each, carrying what is
/// below one micro-Joule to the next reading so that nothing is lost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Carry(f64);

impl Carry {
    /// `count` units of `scale` Joules, as whole micro-Joules.
    pub(crate) fn micro_joules(&mut self, count: u64, scale: f64) -> u64 {
        let exact = count as f64 * scale * 1e6 + self.0;
        let whole = exact.max(0.0).floor();
        self.0 = exact - whole;
        whole as u64
    }
}
