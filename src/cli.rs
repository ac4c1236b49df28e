//! Command line: the exporter (default) and `cgperf check`.

use crate::backend::cgroup::CgroupProbe;
use crate::config::{self, Config, OtlpConfig};
use crate::discovery::{CgroupFs, Discovery};
use crate::engine::{self, Control, Engine, FdBudget};
use crate::exporter::otlp::{self, OtlpStats};
use crate::exporter::web::{self, ListenAddress, WebConfig};
use crate::exporter::{http, prometheus::Exposition};
use crate::labels::Extractor;
use crate::plan::{Machine, Plan};
use crate::snapshot::Latest;
use crate::tracefs::Tracefs;
use crate::{check, cpus, deadline, events, reload};
use std::time::Duration;

/// How often the whole cgroup tree is rescanned even without inotify events.
const FULL_RESCAN: Duration = Duration::from_secs(30);
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Counts CPU performance events per cgroup and exports them to Prometheus.
///
/// With no --config.file, cgperf runs an embedded default config: the root
/// cgroup and every top-level cgroup, software events, common scheduler
/// tracepoints, and hardware groups that are reported unsupported (not fatal)
/// where the machine has no PMU. Needs cgroup v2 and root, or CAP_PERFMON
/// plus CAP_DAC_READ_SEARCH.
///
/// The config is reloaded on SIGHUP and whenever its file changes.
#[derive(Debug, Parser)]
#[command(name = "cgperf", version, about, long_about)]
pub struct Cli {
    /// YAML config file (default: the embedded config, see `config/default.yaml`).
    #[arg(long = "config.file", value_name = "PATH", global = true)]
    config_file: Option<PathBuf>,

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

    /// Connections served at once. When all are taken, a new connection
    /// closes the oldest one that has no request in progress.
    #[arg(
        long = "web.max-connections",
        value_name = "N",
        default_value_t = web::server::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536)
    )]
    max_connections: usize,

    /// The container runtime's CRI socket, asked for pod, namespace,
    /// container and image names of pod and container cgroups (when the
    /// `kubernetes` or `containers` labels are on). Repeatable; default:
    /// containerd's, CRI-O's and k3s's usual sockets, those that exist.
    #[arg(long = "cri.socket", value_name = "PATH")]
    cri_sockets: Vec<PathBuf>,

    /// Log level: error, warn, info, debug or trace.
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
    /// it and why not. Exits 0 when the config is valid (even if some events
    /// cannot be counted here), 1 when the config has errors.
    Check,
    /// List the events this machine can count, with the names to write.
    ///
    /// Hardware, software and hardware-cache events, the events of the
    /// dynamic PMUs in /sys/bus/event_source/devices (`pmu/event/`), and the
    /// tracepoints of tracefs (`subsystem:name`); then the format terms of
    /// each PMU (for `pmu/term=value,.../`) and whether uprobes and kprobes
    /// can be placed here. Reading tracefs needs root: without it the
    /// tracepoints are left out, with a note on stderr. Exits 0.
    List(crate::list::ListArgs),
    // About and help text: on `StatArgs`.
    Stat(crate::stat::StatArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    if let Err(e) = init_logging(&cli.log_level) {
        eprintln!("cgperf: {e:#}");
        return ExitCode::from(2);
    }
    let check = match cli.command {
        Some(Command::List(args)) => {
            let listed = crate::list::run(&args, &mut std::io::stdout().lock());
            return exit_status(listed.map_err(anyhow::Error::from));
        }
        Some(Command::Stat(args)) => return crate::stat::run(&args, cli.config_file.as_deref()),
        Some(Command::Check) => true,
        None => false,
    };
    let (config, loaded) = match reload::load(cli.config_file.as_deref()) {
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
        check::run(&config, &mut std::io::stdout().lock())
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
        };
        let cri_sockets = if cli.cri_sockets.is_empty() {
            crate::cri::DEFAULT_SOCKETS
                .iter()
                .map(PathBuf::from)
                .collect()
        } else {
            cli.cri_sockets
        };
        serve(
            config,
            otlp,
            (cli.config_file, loaded),
            endpoint,
            cri_sockets,
        )
    };
    exit_status(result)
}

/// The exit status of `cgperf` and `cgperf check`/`list`: 0 on success, 2
/// (after printing it) on an error.
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

/// What cgperf needs to know about this machine, found once at start.
pub fn discover_machine() -> anyhow::Result<(CgroupFs, Vec<u32>, Machine)> {
    let cgroupfs = CgroupFs::locate().map_err(anyhow::Error::msg)?;
    let cpus = cpus::online().map_err(anyhow::Error::msg)?;
    let probe_cpu = *cpus.first().context("no CPU is online")?;
    let machine = Machine {
        pmu_root: events::PMU_ROOT.into(),
        tracefs: Tracefs::locate(),
        probe_cgroup: cgroupfs.root().to_path_buf(),
        probe_cpu,
    };
    Ok((cgroupfs, cpus, machine))
}

/// Where and how `/metrics` is served.
struct Endpoint {
    listen: ListenAddress,
    telemetry_path: String,
    web_config_file: Option<PathBuf>,
    /// Already loaded from `web_config_file`, so that a bad one fails
    /// before anything starts.
    web_config: WebConfig,
    max_connections: usize,
}

/// How long shutdown waits for the sampler to finish its collection and
/// stop; a sampler stuck longer (in the kernel) is left behind.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// Runs the exporter on `config`, read from `source`: the config file (if
/// any) and the bytes the config was read from.
fn serve(
    config: Config,
    otlp: Option<OtlpConfig>,
    source: (Option<PathBuf>, Option<Vec<u8>>),
    endpoint: Endpoint,
    cri_sockets: Vec<PathBuf>,
) -> anyhow::Result<()> {
    let (config_file, loaded) = source;
    let Endpoint {
        listen,
        telemetry_path,
        web_config_file,
        web_config,
        max_connections,
    } = endpoint;
    if !telemetry_path.starts_with('/') || telemetry_path == "/" {
        anyhow::bail!(
            "--web.telemetry-path must start with / and not be / itself (got `{telemetry_path}`)"
        );
    }
    let started = std::time::SystemTime::now();
    let nofile = engine::raise_nofile_limit();
    let (cgroupfs, cpus, machine) = discover_machine()?;
    tracing::info!(
        cgroup2 = %cgroupfs.root().display(),
        tracefs = %machine.tracefs.as_ref().map_or_else(|e| e.clone(), |t| t.root().display().to_string()),
        cpus = ?cpus,
        open_files_limit = nofile,
        "starting cgperf {}",
        env!("CARGO_PKG_VERSION")
    );
    let latest = Latest::new();
    let probe = Arc::new(CgroupProbe::new(&machine));
    let plan = Plan::build_in_time(&config, &machine, probe)?;
    let mut sampler = Engine::new(
        &config,
        plan,
        Discovery::new(cgroupfs, FULL_RESCAN),
        FdBudget::from_limit(nofile),
        latest.clone(),
    );
    // Bound now, before capabilities are dropped (a port below 1024 needs
    // CAP_NET_BIND_SERVICE); served once the runtime runs.
    let listener = listen.bind().context("--web.listen-address")?;
    listener
        .set_nonblocking(true)
        .context("making the listener non-blocking")?;
    // Before any thread starts, so that all inherit the reduced sets.
    match crate::privileges::drop_unneeded(!config.probes.is_empty()) {
        Ok(d) if d.dropped.is_empty() => {
            tracing::debug!(kept = ?d.kept, "no capabilities to drop");
        }
        Ok(d) => tracing::info!(
            dropped = ?d.dropped,
            kept = ?d.kept,
            bounding_set = d.bounding,
            "dropped the capabilities only start-up needed"
        ),
        Err(e) => tracing::warn!("capabilities not dropped: {e}"),
    }
    if config
        .labels
        .iter()
        .any(|l| matches!(l, Extractor::Kubernetes | Extractor::Containers))
    {
        match crate::cri::Names::start(cri_sockets) {
            Ok(names) => sampler.set_names(names),
            Err(e) => tracing::warn!("pod and container names disabled: {e}"),
        }
    }
    let (pusher, otlp_stats) = match otlp {
        Some(otlp) => {
            tracing::info!(
                endpoint = %otlp.url,
                protocol = otlp.protocol.name(),
                interval = ?otlp.interval,
                "pushing metrics over OTLP"
            );
            let stats = Arc::new(OtlpStats::default());
            let pusher = otlp::start(otlp, latest.clone(), stats.clone(), started)?;
            (Some(pusher), Some(stats))
        }
        None => (None, None),
    };
    let (control, control_rx) = std::sync::mpsc::channel();
    let sampler_thread = std::thread::Builder::new()
        .name("cgperf-sampler".into())
        .spawn(move || sampler.run(control_rx))
        .context("starting the sampler thread")?;
    let (web_sender, web_shared) = tokio::sync::watch::channel(Arc::new(web_config));
    let reloads = reload::Reloader {
        config_file: config_file.clone(),
        last_read: loaded,
        machine,
        sampler: control.clone(),
        web: web_config_file.clone().map(|path| (path, web_sender)),
    }
    .start()
    .context("starting the reload thread")?;
    if let Some(path) = &config_file
        && let Err(e) = reload::watch(path, reloads.clone())
    {
        tracing::warn!(
            "cannot watch {} for changes ({e}); reload with SIGHUP",
            path.display()
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let exposition = Arc::new(Exposition::with_otlp(latest.clone(), otlp_stats));
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .with_context(|| format!("listening on {listen}"))?;
        let web_config = web_shared.borrow().clone();
        if let Some(path) = &web_config_file {
            tracing::info!("web config {}: {}", path.display(), web_config.summary());
        }
        let scheme = if web_config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(
            max_connections,
            "serving {scheme}://{}{telemetry_path}",
            listener.local_addr()?
        );
        tokio::spawn(reload_on_sighup(reloads));
        let router = http::router(exposition, latest, &telemetry_path, web_shared.clone());
        web::server::serve(
            listener,
            router,
            web_shared,
            max_connections,
            shutdown_signal(),
        )
        .await;
        Ok(())
    });
    // The server gave requests their grace; encodings still running on
    // blocking threads are not waited for long.
    runtime.shutdown_timeout(Duration::from_secs(1));
    if let Some(pusher) = pusher {
        pusher.stop();
    }
    if deadline::abandoned() > 0 {
        tracing::warn!(
            "{} reloads are still waiting for a file system that does not answer; \
             exiting without them",
            deadline::abandoned()
        );
    }
    let _ = control.send(Control::Stop);
    let deadline = std::time::Instant::now() + SHUTDOWN_DEADLINE;
    while !sampler_thread.is_finished() {
        if std::time::Instant::now() >= deadline {
            // Returning ends the process, and the stuck thread with it.
            anyhow::bail!(
                "the sampler did not stop within {SHUTDOWN_DEADLINE:?} of shutdown \
                 (stuck in the kernel?); exiting without its last collection"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // A panic of the sampler thread has aborted the process already.
    let _ = sampler_thread.join();
    served
}

/// Asks for a reload of the config, and of the web config if there is
/// one, on every SIGHUP. The reload thread does the work (see
/// [`reload`]): nothing here waits for a file.
async fn reload_on_sighup(reloads: std::sync::mpsc::Sender<reload::Trigger>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot listen for SIGHUP: {e}");
            return;
        }
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the config");
        if reloads.send(reload::Trigger::Signal).is_err() {
            tracing::error!("the reload thread stopped; SIGHUP is ignored");
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot listen for SIGTERM: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
}
