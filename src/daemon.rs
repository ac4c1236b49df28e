//! The exporter daemon's life: [`Daemon::start`] brings everything up
//! (machine, plan, sampler, OTLP push, reload thread, `/metrics` listener),
//! [`Daemon::run_until_signal`] serves until SIGTERM or Ctrl-C, and
//! [`Daemon::shutdown`] stops it all within fixed bounds. The command line
//! ([`crate::cli`]) only parses arguments and hands them here.

use crate::backend::choose::{Kind, Opened, choose};
use crate::config::{Config, OtlpConfig};
use crate::cri::Names;
use crate::discovery::{CgroupFs, Discovery};
use crate::engine::{self, Control, Engine, FdBudget};
use crate::exporter::cadvisor::Compat;
use crate::exporter::families::SelfMetrics;
use crate::exporter::otlp::{self, OtlpStats};
use crate::exporter::web::{self, ListenAddress, WebConfig};
use crate::exporter::{http, prometheus::Exposition};
use crate::labels::Extractor;
use crate::machine::{CpuTables, Discovered, Machine};
use crate::plan::Plan;
use crate::snapshot::Latest;
use crate::{deadline, reload};
use anyhow::Context;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the whole cgroup tree is rescanned even without inotify events.
const FULL_RESCAN: Duration = Duration::from_secs(30);

/// How long shutdown waits for the sampler to finish its collection and
/// stop; a sampler stuck longer (in the kernel) is left behind.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// How long shutdown waits for encodings still running on the async
/// runtime's blocking threads, once the server has given requests their
/// grace.
const RUNTIME_GRACE: Duration = Duration::from_secs(1);

/// Where and how `/metrics` is served.
pub struct Endpoint {
    /// `--web.listen-address`.
    pub listen: ListenAddress,
    /// `--web.telemetry-path`.
    pub telemetry_path: String,
    /// `--web.config.file`, reloaded on SIGHUP.
    pub web_config_file: Option<PathBuf>,
    /// Already loaded from `web_config_file`, so that a bad one fails
    /// before anything starts.
    pub web_config: WebConfig,
    /// `--web.max-connections`.
    pub max_connections: usize,
    /// `--compat`: other exporters' families `/metrics` shows as well.
    pub compat: Vec<Compat>,
}

/// Everything the daemon runs on, from the command line and the config.
pub struct Options {
    /// The config, already loaded and valid.
    pub config: Config,
    /// Its OTLP section, resolved (environment included); `None` when no
    /// push is configured.
    pub otlp: Option<OtlpConfig>,
    /// The config file, `None` for the embedded default.
    pub config_file: Option<PathBuf>,
    /// The CPU's event tables and metrics, read at start.
    pub tables: CpuTables,
    /// The bytes the config was read from (`None` for the default), against
    /// which the watcher compares the file later.
    pub loaded: Option<Vec<u8>>,
    /// Where `/metrics` is served.
    pub endpoint: Endpoint,
    /// The container runtime's CRI sockets, asked for pod and container
    /// names.
    pub cri_sockets: Vec<PathBuf>,
    /// `--bpf.run-statistics`: keep the kernel's BPF run-time statistics on.
    pub bpf_run_statistics: bool,
    /// `--bpf.auto-watch`: how long `backend: auto` watches the program it
    /// loaded for hidden switches at start.
    pub bpf_auto_watch: std::time::Duration,
}

/// A running daemon: sampler, reload thread and OTLP push are running;
/// `/metrics` is bound and served by [`Daemon::run_until_signal`].
pub struct Daemon {
    serving: Serving,
    running: Running,
}

/// What serving `/metrics` needs.
struct Serving {
    /// Bound at start (before capabilities were dropped), not yet served.
    listener: std::net::TcpListener,
    listen: ListenAddress,
    telemetry_path: String,
    web_config_file: Option<PathBuf>,
    max_connections: usize,
    /// The web config now; the reload thread replaces it on SIGHUP.
    web: tokio::sync::watch::Receiver<Arc<WebConfig>>,
    /// Where SIGHUP asks for reloads.
    reloads: Sender<reload::Trigger>,
    exposition: Arc<Exposition>,
    latest: Latest,
}

/// What shutdown stops, in this order.
struct Running {
    /// Runs the HTTP server and the SIGHUP handler.
    runtime: tokio::runtime::Runtime,
    pusher: Option<otlp::Pusher>,
    sampler: SamplerThread,
    /// Keeps the kernel's BPF run-time statistics on, if asked.
    _bpf_statistics: Option<std::os::fd::OwnedFd>,
}

/// Has the allocator give large buffers back to the system when they are
/// freed. A scrape of thousands of cgroups encodes megabytes of text (twice
/// for the classic format); glibc raises the size above which a block is
/// mapped on its own to the largest one freed, so from the second scrape on
/// such buffers come from the heap and stay resident between scrapes: some
/// 16 MiB at 10,000 cgroups. A fixed threshold of 1 MiB keeps them mapped
/// on their own (and unmapped once sent).
fn return_large_buffers() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of the allocator, which it
    // reads under its own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

impl Daemon {
    /// Brings everything up, in the order start-up needs: the machine and
    /// the plan; the listener, bound before capabilities are dropped (a port
    /// below 1024 needs `CAP_NET_BIND_SERVICE`); the capability drop, before
    /// any thread starts so that all inherit the reduced sets; then the
    /// threads (CRI names, OTLP push, sampler, reload, config watch) and the
    /// async runtime.
    ///
    /// Fails, before serving anything, on a bad `--web.telemetry-path`, a
    /// machine without cgroup2 or online CPUs, a plan that cannot be built,
    /// a listener that cannot be bound, or a thread that cannot start.
    pub fn start(options: Options) -> anyhow::Result<Daemon> {
        let Options {
            config,
            otlp,
            config_file,
            tables,
            loaded,
            endpoint,
            cri_sockets,
            bpf_run_statistics,
            bpf_auto_watch,
        } = options;
        let Endpoint {
            listen,
            telemetry_path,
            web_config_file,
            web_config,
            max_connections,
            compat,
        } = endpoint;
        if !telemetry_path.starts_with('/') || telemetry_path == "/" {
            anyhow::bail!(
                "--web.telemetry-path must start with / and not be / itself (got `{telemetry_path}`)"
            );
        }
        // First: a taken address fails the start before anything costly
        // (the BPF program's load, every probe) is done for nothing.
        let listener = listen.bind().context("--web.listen-address")?;
        listener
            .set_nonblocking(true)
            .context("making the listener non-blocking")?;
        let started = std::time::SystemTime::now();
        return_large_buffers();
        let nofile = engine::raise_nofile_limit();
        let Discovered {
            cgroupfs,
            cpus,
            machine,
        } = Machine::discover(tables)?;
        tracing::info!(
            cgroup2 = %cgroupfs.root().display(),
            tracefs = %machine.tracefs.as_ref().map_or_else(|e| e.clone(), |t| t.root().display().to_string()),
            cpus = ?cpus,
            open_files_limit = nofile,
            "starting cgperf {}",
            env!("CARGO_PKG_VERSION")
        );
        let latest = Latest::new();
        let mut chosen = choose(config.backend, config.max_cgroups).context("backend: bpf")?;
        chosen.watch = bpf_auto_watch;
        let (plan, _) = chosen.plan(&config, &machine)?;
        tracing::info!("counting with the {} backend", chosen.describe());
        let opened = chosen
            .open(&config, &plan, FdBudget::from_limit(nofile))
            .context("starting the bpf backend")?;
        let bpf = chosen.kind == Kind::Bpf;
        // Before the capability drop: turning them on needs CAP_SYS_ADMIN.
        let bpf_statistics = match (bpf_run_statistics, bpf) {
            (true, true) => crate::backend::bpf::run_statistics(),
            (true, false) => {
                tracing::warn!(
                    "--bpf.run-statistics: no BPF program of cgperf's runs with the cgroup \
                     backend; the statistics stay off"
                );
                None
            }
            (false, _) => None,
        };
        let exe = config
            .processes
            .iter()
            .any(|p| matches!(p.matches, crate::config::ProcessMatch::Exe(_)));
        let paranoid = crate::perf::paranoid();
        let needs = crate::privileges::Needs {
            probes: !config.probes.is_empty(),
            bpf,
            exe,
            paranoid,
        };
        let dropped = crate::privileges::drop_unneeded(needs);
        // Said whether or not anything else was dropped: the shipped unit
        // grants exactly what the bpf backend keeps.
        if let Ok(crate::privileges::Dropped {
            sys_admin_for_paranoid: Some(level),
            ..
        }) = &dropped
        {
            tracing::info!(
                "{}, so cgperf keeps CAP_SYS_ADMIN to open events after start-up (reloads, \
                 new cgroups, CPUs coming online); with kernel.perf_event_paranoid=2 it would \
                 drop it",
                crate::perf::sys_admin_only_why(*level)
            );
        }
        let dropped = match dropped {
            Ok(d) if d.dropped.is_empty() => {
                tracing::debug!(kept = ?d.kept, "no capabilities to drop");
                false
            }
            Ok(d) => {
                tracing::info!(
                    "keeps {} and drops {} capabilities only start-up needed{}",
                    d.kept.join(", "),
                    d.dropped.len(),
                    if d.bounding {
                        ", from the bounding set too"
                    } else {
                        ""
                    }
                );
                tracing::debug!(dropped = ?d.dropped, "capabilities dropped");
                true
            }
            Err(e) => {
                tracing::warn!("capabilities not dropped: {e}");
                false
            }
        };
        if let Some(level) = paranoid
            && crate::perf::sys_admin_only(paranoid)
            && !crate::perf::Held::now().sys_admin
        {
            tracing::warn!(
                "{}, and cgperf was not given CAP_SYS_ADMIN: on those kernels it counts \
                 nothing (each group says so); give it CAP_SYS_ADMIN or set \
                 kernel.perf_event_paranoid=2",
                crate::perf::sys_admin_only_why(level)
            );
        }
        // The plan's verdicts were probed with every capability of start-up:
        // asked again with those the daemon keeps, a group it can no longer
        // open (no CAP_SYS_ADMIN where the paranoid level wants it) is said
        // to be refused, instead of counting zero as if supported.
        let plan = if dropped {
            chosen.plan(&config, &machine)?.0
        } else {
            plan
        };
        let names = if config
            .labels
            .iter()
            .any(|l| matches!(l, Extractor::Kubernetes | Extractor::Containers))
        {
            match Names::start(cri_sockets) {
                Ok(names) => Some(names),
                Err(e) => {
                    tracing::warn!("pod and container names disabled: {e}");
                    None
                }
            }
        } else {
            None
        };
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
        let sampler = SamplerThread::start(SamplerInputs {
            plan,
            cgroupfs,
            opened,
            latest: latest.clone(),
            names,
        })?;
        let (web_sender, web) = tokio::sync::watch::channel(Arc::new(web_config));
        let reloads = reload::Reloader {
            config_file: config_file.clone(),
            last_read: loaded,
            machine,
            chosen,
            backend: config.backend,
            sampler: sampler.control.clone(),
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
        let others = otlp_stats.into_iter().map(|s| s as Arc<dyn SelfMetrics>);
        let exposition = Arc::new(Exposition::with_self_metrics(
            latest.clone(),
            others.collect(),
            &compat,
        ));
        Ok(Daemon {
            serving: Serving {
                listener,
                listen,
                telemetry_path,
                web_config_file,
                max_connections,
                web,
                reloads,
                exposition,
                latest,
            },
            running: Running {
                runtime,
                pusher,
                sampler,
                _bpf_statistics: bpf_statistics,
            },
        })
    }

    /// Serves `/metrics` and reloads on SIGHUP until SIGTERM or Ctrl-C,
    /// then shuts down (see [`Daemon::shutdown`]). A sampler that does not
    /// stop in time is the error returned; otherwise the server's.
    pub fn run_until_signal(self) -> anyhow::Result<()> {
        self.run_until(shutdown_signal())
    }

    /// Serves until `stop` completes, then shuts down.
    fn run_until(self, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Daemon { serving, running } = self;
        let served = running.runtime.block_on(serving.serve(stop));
        running.shutdown().and(served)
    }

    /// Stops without serving: the async runtime, the OTLP push (after its
    /// last push) and the sampler (after its current collection), each
    /// within its bound. Fails when the sampler does not stop within
    /// [`SHUTDOWN_DEADLINE`].
    pub fn shutdown(self) -> anyhow::Result<()> {
        self.running.shutdown()
    }
}

impl Serving {
    /// Serves `/metrics` and reloads on SIGHUP until `stop` completes.
    async fn serve(self, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::from_std(self.listener)
            .with_context(|| format!("listening on {}", self.listen))?;
        let web_config = self.web.borrow().clone();
        if let Some(path) = &self.web_config_file {
            tracing::info!("web config {}: {}", path.display(), web_config.summary());
        }
        let scheme = if web_config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(
            max_connections = self.max_connections,
            "serving {scheme}://{}{}",
            listener.local_addr()?,
            self.telemetry_path
        );
        tokio::spawn(reload_on_sighup(self.reloads));
        let router = http::router(
            self.exposition,
            self.latest,
            &self.telemetry_path,
            self.web.clone(),
        );
        web::server::serve(listener, router, self.web, self.max_connections, stop).await;
        Ok(())
    }
}

impl Running {
    fn shutdown(self) -> anyhow::Result<()> {
        // The server gave requests their grace; encodings still running on
        // blocking threads are not waited for long.
        self.runtime.shutdown_timeout(RUNTIME_GRACE);
        if let Some(pusher) = self.pusher {
            pusher.stop();
        }
        if deadline::abandoned() > 0 {
            tracing::warn!(
                "{} reloads are still waiting for a file system that does not answer; \
                 exiting without them",
                deadline::abandoned()
            );
        }
        self.sampler.stop(SHUTDOWN_DEADLINE)
    }
}

/// What the sampler is made of.
struct SamplerInputs {
    plan: Plan,
    cgroupfs: CgroupFs,
    /// The backend, opened before the capability drop.
    opened: Opened,
    latest: Latest,
    /// The container runtime's names, when labels ask for them.
    names: Option<Names>,
}

/// The sampler thread (the engine's) and how to tell it what to do. The
/// only place the daemon uses the engine's API.
struct SamplerThread {
    control: Sender<Control>,
    thread: JoinHandle<()>,
}

impl SamplerThread {
    fn start(inputs: SamplerInputs) -> anyhow::Result<Self> {
        let engine = Engine::new(
            inputs.plan,
            Discovery::new(inputs.cgroupfs, FULL_RESCAN),
            inputs.opened,
            inputs.latest,
            inputs.names,
        );
        let (control, control_rx) = std::sync::mpsc::channel();
        let cpus = control.clone();
        if let Err(why) = crate::cpus::watch(move || cpus.send(Control::Cpus).is_ok()) {
            tracing::warn!(
                "a CPU coming back online is counted from the next collection only: {why}"
            );
        }
        let thread = std::thread::Builder::new()
            .name("cgperf-sampler".into())
            .spawn(move || engine.run(control_rx))
            .context("starting the sampler thread")?;
        Ok(Self { control, thread })
    }

    /// Asks the sampler to stop and waits up to `bound` for it.
    fn stop(self, bound: Duration) -> anyhow::Result<()> {
        let _ = self.control.send(Control::Stop);
        let deadline = std::time::Instant::now() + bound;
        while !self.thread.is_finished() {
            if std::time::Instant::now() >= deadline {
                // Returning ends the process, and the stuck thread with it.
                anyhow::bail!(
                    "the sampler did not stop within {bound:?} of shutdown \
                     (stuck in the kernel?); exiting without its last collection"
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // A panic of the sampler thread has aborted the process already.
        let _ = self.thread.join();
        Ok(())
    }
}

/// Asks for a reload of the config, and of the web config if there is
/// one, on every SIGHUP. The reload thread does the work (see
/// [`reload`]): nothing here waits for a file.
async fn reload_on_sighup(reloads: Sender<reload::Trigger>) {
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
