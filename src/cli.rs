//! Command line: parses the arguments and dispatches to the daemon
//! ([`crate::daemon`], the default), `cgperf check`, `list` and `stat`.

use crate::config;
use crate::daemon::{Daemon, Endpoint, Options};
use crate::exporter::cadvisor::Compat;
use crate::exporter::web::{self, ListenAddress, WebConfig};
use crate::{check, deadline, reload};
use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Counts CPU performance events per cgroup and exports them to Prometheus.
///
/// With no --config.file, cgperf runs an embedded default config: the root
/// cgroup and every top-level cgroup, software events, common scheduler
/// tracepoints, and hardware groups that are reported unsupported (not fatal)
/// where the machine has no PMU. Needs cgroup v2 and root, or CAP_PERFMON
/// plus CAP_DAC_READ_SEARCH.
///
/// It counts through BPF (one counter per event and CPU, charged to cgroups
/// at context switches) where the kernel and CAP_BPF allow it and the
/// kernel shows every switch to it (watched for a second at start;
/// `--bpf.auto-watch`), else with a perf event per cgroup, event and CPU,
/// and says which at start; a switch hidden from BPF found later moves
/// counting to the latter at that collection, nothing lost. The config's
/// `backend:` (auto, bpf, cgroup) chooses. `cgperf stat` counts with the
/// latter unless its config says otherwise.
///
/// The config's `processes:` counts processes by name, executable, command
/// line or pid, with their children and threads, and its `host:` the whole
/// machine once (energy and uncore counters, system-wide events), both with
/// perf events of their own whatever the backend.
///
/// The config is reloaded on SIGHUP and whenever its file changes.
///
/// The config's `otlp:` section, or OTEL_EXPORTER_OTLP_ENDPOINT, pushes the
/// same metrics to an OpenTelemetry collector; OTEL_METRICS_EXPORTER=console
/// prints each push to standard output as OTLP/JSON instead (no collector
/// needed), and OTEL_METRICS_EXPORTER=none turns the push off.
#[derive(Debug, Parser)]
#[command(name = "cgperf", version, about, long_about)]
pub struct Cli {
    /// YAML config file (default: the embedded config, see `config/default.yaml`).
    #[arg(long = "config.file", value_name = "PATH", global = true)]
    config_file: Option<PathBuf>,

    /// A directory of event tables, searched for this CPU's vendor event
    /// names (`BR_INST_RETIRED.NEAR_TAKEN`, `ex_ret_instr`) and metrics
    /// (`IPC`, `TopdownL1`) before the tables built into cgperf (Intel's
    /// and Arm's events, Intel's server metrics): perf's `tools/perf/pmu-events/arch` from the
    /// kernel source (AMD, any newer CPU, metrics; `scripts/perf-tables
    /// DIR` writes the installed perf's) or a checkout of Intel's perfmon.
    /// Read once, at start.
    #[arg(long = "event-tables", value_name = "DIR", global = true)]
    event_tables: Option<PathBuf>,

    /// Address to serve /metrics on: `:PORT` (every address, IPv4 and
    /// IPv6), `HOST:PORT` or `[IPV6]:PORT`.
    #[arg(
        long = "web.listen-address",
        value_name = "HOST:PORT",
        default_value = ":9810"
    )]
    listen_address: ListenAddress,

    /// Path under which metrics are served.
    #[arg(
        long = "web.telemetry-path",
        value_name = "PATH",
        default_value = "/metrics"
    )]
    telemetry_path: String,

    /// Web config (Prometheus exporter-toolkit format): TLS, client
    /// certificates, basic auth, response headers. Reloaded on SIGHUP.
    #[arg(long = "web.config.file", value_name = "PATH")]
    web_config_file: Option<PathBuf>,

    /// Connections served at once, 1 to 65536. When all are taken, a new
    /// connection closes the oldest one that has no request in progress.
    #[arg(
        long = "web.max-connections",
        value_name = "N",
        default_value_t = web::server::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)
    )]
    max_connections: usize,

    /// Also serve another exporter's metric families on /metrics, so that
    /// its dashboards and alerts work unchanged. `cadvisor`: cAdvisor's
    /// container_perf_events_total and container_perf_events_scaling_ratio,
    /// with its labels (id, name, image, container, pod, namespace, cpu,
    /// event). Repeatable.
    #[arg(long = "compat", value_name = "EXPORTER", value_enum)]
    compat: Vec<Compat>,

    /// The container runtime's CRI socket, asked for pod, namespace,
    /// container and image names of pod and container cgroups (when the
    /// `kubernetes` or `containers` labels are on). Repeatable; default:
    /// containerd's, CRI-O's and k3s's usual sockets, those that exist.
    #[arg(long = "cri.socket", value_name = "PATH")]
    cri_sockets: Vec<PathBuf>,

    /// Keep the kernel's BPF run-time statistics on while cgperf runs
    /// (bpf backend; needs CAP_SYS_ADMIN), so that
    /// cgperf_bpf_program_run_seconds_total and cgperf_bpf_program_runs_total
    /// count. Off by default: they are the whole kernel's, and every run of
    /// every BPF program on the host then reads the clock twice (3 % of a
    /// context-switch-bound workload on our VM). kernel.bpf_stats_enabled=1
    /// turns them on as well.
    #[arg(long = "bpf.run-statistics")]
    bpf_run_statistics: bool,

    /// How long `backend: auto` watches the BPF program it loaded, at
    /// start, for context switches the kernel makes without the
    /// sched_switch tracepoint (some VM guest kernels do); where it finds
    /// one it counts with the cgroup backend from the start. Start-up
    /// waits for it. `0s` skips the watch. Either way, a hidden switch
    /// found later moves counting to the cgroup backend at that
    /// collection, nothing lost. At most 1m.
    #[arg(
        long = "bpf.auto-watch",
        value_name = "DURATION",
        default_value = "1s",
        value_parser = auto_watch
    )]
    bpf_auto_watch: std::time::Duration,

    /// Log level: error, warn, info, debug or trace, or a `tracing`
    /// filter (`cgperf=debug`).
    #[arg(
        long = "log.level",
        value_name = "LEVEL",
        default_value = "info",
        global = true
    )]
    log_level: String,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the config and probe every event on this machine.
    ///
    /// Prints a table saying, event by event, whether this machine can count
    /// it and why not. Exits 0 when the config is valid and some group can
    /// be counted here (even if others cannot), 1 when the config has
    /// errors, 2 on another error (no cgroup2, ...), 3 when the config is
    /// valid but this machine can count none of its groups (no privileges,
    /// a seccomp profile blocking perf_event_open and bpf, only hardware
    /// events without a PMU): the last line says why and the fix; 4 when
    /// some group or tracepoint does not fit the bpf backend's 128
    /// counters per CPU.
    Check,
    /// List the events this machine can count, with the names to write.
    ///
    /// Hardware, software and hardware-cache events, the events of the
    /// dynamic PMUs in /sys/bus/event_source/devices (`pmu/event/`), and the
    /// tracepoints of tracefs (`subsystem:name`); then the format terms of
    /// each PMU (for `pmu/term=value,.../`) and whether uprobes and kprobes
    /// can be placed here. Reading tracefs needs root: without it the
    /// tracepoints are left out, with a note on stderr. Reads no config
    /// (`--config.file` is refused). Exits 0, or 2 when the event tables
    /// (`--event-tables`) cannot be read.
    List(crate::list::ListArgs),
    // About and help text: on `StatArgs`.
    Stat(crate::stat::StatArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    if let Err(e) = init_logging(&cli.log_level) {
        eprintln!("cgperf: {e:#}");
        return ExitCode::from(2);
    }
    let check = match cli.command {
        Some(Command::List(_)) if cli.config_file.is_some() => {
            eprintln!(
                "cgperf: list reads no config: it lists what this machine can count; \
                 leave out --config.file, or run `cgperf check --config.file=PATH` to see \
                 what a config's events count here"
            );
            return ExitCode::from(2);
        }
        Some(Command::List(args)) => {
            let tables = cli.event_tables.as_deref();
            let listed = crate::list::run(&args, tables, &mut std::io::stdout().lock());
            return exit_status(listed.map_err(anyhow::Error::from));
        }
        Some(Command::Stat(args)) => {
            let tables = cli.event_tables.as_deref();
            return crate::stat::run(&args, cli.config_file.as_deref(), tables);
        }
        Some(Command::Check) => true,
        None => false,
    };
    let tables = match crate::machine::CpuTables::read(cli.event_tables.as_deref()) {
        Ok(tables) => tables,
        // As when the machine cannot be discovered: not the config's fault.
        Err(e) => {
            eprintln!("cgperf: {e:#}");
            return ExitCode::from(2);
        }
    };
    let (config, loaded) = match reload::load(cli.config_file.as_deref(), &tables.metrics) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("cgperf: invalid config: {e}");
            return ExitCode::from(1);
        }
    };
    let otlp = match config::resolve_otlp(config.otlp.as_ref(), &|name| std::env::var(name).ok()) {
        Ok(otlp) => otlp,
        Err(e) => {
            eprintln!("cgperf: invalid config: {e}");
            return ExitCode::from(1);
        }
    };
    let result = if check {
        match check::run(&config, tables, &mut std::io::stdout().lock()) {
            Ok(check::Verdict::NothingCountable) => return ExitCode::from(NOTHING_COUNTABLE),
            Ok(check::Verdict::OverBudget) => return ExitCode::from(OVER_BUDGET),
            checked => checked.map(drop),
        }
    } else {
        let web_config = match cli
            .web_config_file
            .clone()
            .map(|path| deadline::load(&path.clone(), move || web::load(&path)))
        {
            Some(Ok(web)) => web,
            Some(Err(e)) => {
                eprintln!("cgperf: invalid web config: {e}");
                return ExitCode::from(1);
            }
            None => WebConfig::default(),
        };
        let endpoint = Endpoint {
            listen: cli.listen_address,
            telemetry_path: cli.telemetry_path,
            web_config_file: cli.web_config_file,
            web_config,
            max_connections: cli.max_connections,
            compat: cli.compat,
        };
        let cri_sockets = if cli.cri_sockets.is_empty() {
            crate::cri::DEFAULT_SOCKETS
                .iter()
                .map(PathBuf::from)
                .collect()
        } else {
            cli.cri_sockets
        };
        Daemon::start(Options {
            config,
            otlp,
            config_file: cli.config_file,
            tables,
            loaded,
            endpoint,
            cri_sockets,
            bpf_run_statistics: cli.bpf_run_statistics,
            bpf_auto_watch: cli.bpf_auto_watch,
        })
        .and_then(Daemon::run_until_signal)
    };
    exit_status(result)
}

/// `--bpf.auto-watch`: a duration as the config writes them, 0 to 1m.
fn auto_watch(text: &str) -> Result<std::time::Duration, String> {
    let watch =
        crate::config::parse_duration(text).map_err(|e| format!("{} ({})", e.message, e.hint))?;
    match watch <= std::time::Duration::from_secs(60) {
        true => Ok(watch),
        false => Err(format!("{text} is longer than 1m; give 0s to 1m")),
    }
}

/// What a flag cgperf does not know, a missing or bad value, or `--help`
/// ends with, before anything is set up: clap's message (with a
/// did-you-mean where a flag is close) and clap's 2, but 1 for `cgperf
/// stat`, whose bad flags exit 1 as its bad events and config do (0 for
/// `--help` and `--version`).
fn usage_error(e: &clap::Error) -> ExitCode {
    // Nothing to do when stderr or stdout is gone.
    let _ = e.print();
    if !e.use_stderr() {
        return ExitCode::SUCCESS;
    }
    let stat = Cli::command()
        .ignore_errors(true)
        .try_get_matches()
        .is_ok_and(|m| m.subcommand_name() == Some("stat"));
    ExitCode::from(if stat { 1 } else { 2 })
}

/// `cgperf check`'s exit status for a valid config of which this machine
/// can count nothing (no privileges, a seccomp profile that blocks
/// perf_event_open, only hardware events on a machine without a PMU).
const NOTHING_COUNTABLE: u8 = 3;
/// `cgperf check`'s exit status when something the config names does not
/// fit in the backend's counters per CPU.
const OVER_BUDGET: u8 = 4;

/// The exit status of `cgperf` and `cgperf check`/`list`: 0 on success, 1
/// on an invalid config, 2 (after printing it) on another error.
fn exit_status(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `cgperf check | head` closes the pipe early: not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        // A filter the kernel rejects or a field a tracepoint lacks is only
        // found once the plan meets the kernel, but it is a config error.
        Err(e) if e.downcast_ref::<config::ConfigError>().is_some() => {
            eprintln!("cgperf: invalid config: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("cgperf: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Makes a panic in any thread end the whole process, after the standard
/// panic message (thread, place, what, and a backtrace when
/// `RUST_BACKTRACE` asks for one) and a line saying so.
///
/// cgperf runs several threads (sampler, OTLP push, HTTP server): one that
/// died alone would leave a half-alive daemon, `/metrics` answering 200
/// with numbers that no longer move. Aborting (SIGABRT, so a core dump
/// where the system keeps them) lets systemd or Kubernetes restart it.
pub fn install_panic_hook() {
    let standard = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        standard(info);
        let thread = std::thread::current();
        let message = format!(
            "thread `{}` panicked; cgperf aborts so that its supervisor restarts it",
            thread.name().unwrap_or("unnamed")
        );
        if tracing::dispatcher::has_been_set() {
            tracing::error!("{message}");
        } else {
            eprintln!("cgperf: {message}");
        }
        std::process::abort();
    }));
}

fn init_logging(level: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(level).with_context(|| {
        format!("--log.level: `{level}` is not a log level (error, warn, info, debug, trace)")
    })?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    Ok(())
}
