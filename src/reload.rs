//! Reloading the config on SIGHUP and when its file changes.
//!
//! The file is watched through its directory, not the file itself: editors
//! and Kubernetes ConfigMap updates replace files by rename, which a watch
//! on the old inode would never report. Any change in the directory leads to
//! a re-read; only a change of content leads to a reload.

use crate::config::{self, Config, ConfigError};
use crate::sampler::Control;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::Duration;

/// Lets editors finish writing (write, then rename) before cgperf reads.
const SETTLE: Duration = Duration::from_millis(200);

/// Loads the config at `path`, or the embedded default.
pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    match path {
        Some(path) => config::load(path),
        None => config::default_config(),
    }
}

/// Loads the config again and hands the result to the sampler.
pub fn reload(path: Option<&Path>, sampler: &Sender<Control>) {
    let result = load(path).map(Box::new).map_err(|e| e.to_string());
    if sampler.send(Control::Reload(result)).is_err() {
        tracing::debug!("reload after the sampler stopped");
    }
}

/// Starts a thread that reloads when the content of `path` changes.
pub fn watch(path: PathBuf, sampler: Sender<Control>) -> std::io::Result<()> {
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
    let mut last = std::fs::read(&path).ok();
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
                let now = std::fs::read(&path).ok();
                if now.is_some() && now != last {
                    tracing::info!("{} changed, reloading", path.display());
                    last = now;
                    reload(Some(&path), &sampler);
                }
            }
        })?;
    Ok(())
}
