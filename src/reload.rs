//! Reloading the config on SIGHUP and when its file changes.
//!
//! The file is watched through its directory, not the file itself: editors
//! and Kubernetes ConfigMap updates replace files by rename, which a watch
//! on the old inode would never report. Any change in the directory leads to
//! a re-read; only a change of content leads to a reload.
//!
//! Reloads never run on the sampling thread, nor on the watcher or the
//! signal handler: one reload thread reads the files and builds the plan
//! (which reads tracefs, resolves uprobe binaries and probes every group),
//! on a worker thread it waits for at most [`deadline::FILES`], and hands the
//! sampler a finished plan. A path that hangs (a hung network file system)
//! therefore fails the reload after the deadline, with a message, while
//! collections go on; the worker stays blocked in the kernel until the file
//! system answers and its result is then dropped.

use crate::backend::choose::Chosen;
use crate::config::{self, BackendChoice, Catalog, Config, ConfigError};
use crate::deadline::{self, with_deadline};
use crate::engine::Control;
use crate::exporter::web::{self, WebConfig};
use crate::machine::Machine;
use crate::plan::Plan;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

/// Lets editors finish writing (write, then rename) before cgperf reads.
const SETTLE: Duration = Duration::from_millis(200);

/// Loads the config at `path`, or the embedded default; with it, the bytes
/// it was read from (`None` for the default), against which the watcher
/// compares the file later. A file that cannot be read within
/// [`deadline::FILES`] is an error naming it.
/// `catalog` holds the metrics of the CPU's tables that the config may
/// name.
pub fn load(
    path: Option<&Path>,
    catalog: &Arc<Catalog>,
) -> Result<(Config, Option<Vec<u8>>), ConfigError> {
    match path {
        Some(path) => {
            let owned = path.to_path_buf();
            let catalog = catalog.clone();
            deadline::load(path, move || {
                let bytes = config::read(&owned)?;
                let config =
                    config::from_bytes(&owned.display().to_string(), bytes.clone(), &catalog)?;
                Ok((config, Some(bytes)))
            })
        }
        None => Ok((config::default_config()?, None)),
    }
}

/// Why a reload was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP: reload the config and the web config, whatever they hold.
    Signal,
    /// The config file's directory changed: reload only if the config's
    /// bytes did.
    FileChanged,
}

/// The web config file and where a reload of it goes.
pub type WebReload = (PathBuf, tokio::sync::watch::Sender<Arc<WebConfig>>);

/// Everything reloads need; [`Reloader::start`] runs them.
pub struct Reloader {
    /// The config file, `None` for the embedded default.
    pub config_file: Option<PathBuf>,
    /// The bytes last read from the config file (at first, those the
    /// running config was read from); `None` after a failed read.
    pub last_read: Option<Vec<u8>>,
    /// Where plans are built (its `probe_cpu` is refreshed per reload).
    pub machine: Machine,
    /// The backend counting, whose probe judges new plans.
    pub chosen: Chosen,
    /// The `backend:` it was chosen for: a reload cannot change it.
    pub backend: BackendChoice,
    /// Where new configs go.
    pub sampler: Sender<Control>,
    /// The web config, reloaded on SIGHUP.
    pub web: Option<WebReload>,
}

impl Reloader {
    /// Starts the reload thread; reloads happen when a [`Trigger`] is sent.
    /// Triggers that arrive while a reload runs are merged into one.
    pub fn start(self) -> std::io::Result<Sender<Trigger>> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("cgperf-reload".into())
            .spawn(move || self.run(&rx))?;
        Ok(tx)
    }

    fn run(mut self, triggers: &Receiver<Trigger>) {
        // Why the config file last could not be read, if it could not.
        let mut last_failure = None;
        while let Ok(first) = triggers.recv() {
            let signal = std::iter::once(first)
                .chain(triggers.try_iter())
                .any(|t| t == Trigger::Signal);
            self.reload_config(signal, &mut last_failure);
            if signal {
                self.reload_web();
            }
        }
    }

    /// Reads the config and builds its plan on a worker, then hands the
    /// result to the sampler; on a file change, only if the bytes differ
    /// from those last read.
    fn reload_config(&mut self, signal: bool, last_failure: &mut Option<String>) {
        let path = self.config_file.clone();
        let last = self.last_read.clone();
        let mut machine = self.machine.clone();
        let (chosen, backend) = (self.chosen.clone(), self.backend);
        if let Some(&cpu) = crate::cpus::online().ok().as_ref().and_then(|c| c.first()) {
            machine.probe_cpu = cpu;
        }
        let attempt = with_deadline(deadline::FILES, move || {
            let Some(path) = path else {
                let result = config::default_config().map_err(|e| e.to_string());
                return Some((
                    None,
                    result.and_then(|c| plan(c, &machine, &chosen, backend)),
                ));
            };
            // Replaced by rename: the file comes back in a moment.
            if !signal && std::fs::symlink_metadata(&path).is_err() {
                return None;
            }
            let bytes = match config::read(&path) {
                Ok(bytes) => bytes,
                Err(e) => return Some((None, Err(e.to_string()))),
            };
            if !signal && last.as_ref() == Some(&bytes) {
                return None;
            }
            let source = path.display().to_string();
            let result = config::from_bytes(&source, bytes.clone(), &machine.metrics)
                .map_err(|e| e.to_string())
                .and_then(|c| plan(c, &machine, &chosen, backend));
            Some((Some(bytes), result))
        });
        let result = match attempt {
            Ok(None) => return,
            Ok(Some((read, result))) => {
                self.last_read = read;
                result
            }
            Err(stuck) => {
                self.last_read = None;
                Err(format!("reading the config and building its plan: {stuck}"))
            }
        };
        // A file that still cannot be read is reported once, not at every
        // change in its directory.
        let failure = result.as_ref().err().filter(|_| self.last_read.is_none());
        if !signal && failure.is_some() && failure == last_failure.as_ref() {
            return;
        }
        *last_failure = failure.cloned();
        if let Some(path) = self.config_file.as_ref().filter(|_| !signal) {
            tracing::info!("{} changed, reloading", path.display());
        }
        if self.sampler.send(Control::Reload(result)).is_err() {
            tracing::debug!("reload after the sampler stopped");
        }
    }

    /// Loads the web config on a worker and switches new connections to it;
    /// one that does not load is logged and the running one kept.
    fn reload_web(&self) {
        let Some((path, sender)) = &self.web else {
            return;
        };
        let worker_path = path.clone();
        let loaded = deadline::load(path, move || web::load(&worker_path));
        match loaded {
            Ok(new) => {
                tracing::info!("web config {} reloaded: {}", path.display(), new.summary());
                if new.tls.is_some() != sender.borrow().tls.is_some() {
                    tracing::warn!(
                        "TLS is now {} for new connections",
                        if new.tls.is_some() { "on" } else { "off" }
                    );
                }
                sender.send_replace(Arc::new(new));
            }
            Err(e) => tracing::error!("keeping the running web config: {e}"),
        }
    }
}

/// `config` with its plan on `machine`, probed by the `chosen` backend,
/// which keeps counting: a new `backend:` (the running one was chosen for
/// `running`) takes effect at the next start, and the log says so.
fn plan(
    config: Config,
    machine: &Machine,
    chosen: &Chosen,
    running: BackendChoice,
) -> Result<Box<Plan>, String> {
    if config.backend != running {
        tracing::warn!(
            "`backend: {}` takes effect when cgperf restarts; counting goes on with the {} \
             backend",
            config.backend.name(),
            chosen.now().name()
        );
    }
    let probe = chosen.probe(machine);
    let plan = Plan::build(&config, machine, &*probe).map_err(|e| e.to_string())?;
    Ok(Box::new(plan))
}

/// Starts a thread that asks `reloader` for a reload whenever the
/// directory of `path` changes; the reload thread compares the content.
pub fn watch(path: &Path, reloader: Sender<Trigger>) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut inotify = inotify::Inotify::init()?;
    inotify.watches().add(
        &dir,
        inotify::WatchMask::CLOSE_WRITE
            | inotify::WatchMask::MOVED_TO
            | inotify::WatchMask::CREATE
            | inotify::WatchMask::DELETE
            | inotify::WatchMask::ATTRIB,
    )?;
    std::thread::Builder::new()
        .name("cgperf-config-watch".into())
        .spawn(move || {
            let mut buffer = vec![0; 4096];
            loop {
                if let Err(e) = inotify.read_events_blocking(&mut buffer) {
                    tracing::warn!(
                        "watching {} stopped: {e}; reload with SIGHUP",
                        dir.display()
                    );
                    return;
                }
                std::thread::sleep(SETTLE);
                // Drain what arrived while settling.
                while inotify
                    .read_events(&mut buffer)
                    .is_ok_and(|mut e| e.next().is_some())
                {}
                if reloader.send(Trigger::FileChanged).is_err() {
                    return;
                }
            }
        })?;
    Ok(())
}
