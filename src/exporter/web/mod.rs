//! Securing and hardening the HTTP endpoint.
//!
//! - [`config`]: `--web.config.file`, the Prometheus exporter-toolkit web
//!   config format (TLS, client certificates, basic auth, response headers),
//!   so that a file written for node_exporter works for cgperf too;
//! - [`tls`] and [`basic_auth`]: what that file turns on;
//! - [`listen`]: `--web.listen-address`, in node_exporter's forms;
//! - [`server`] and [`slots`]: cgperf's own HTTP/1.1 accept loop, because
//!   `axum::serve` has no way to cap connections or time out clients that
//!   connect and never send a request.
//!
//! The running web config is shared as a [`Shared`]: a SIGHUP swaps in a
//! new one, which new connections (TLS) and new requests (users, headers)
//! then use.

pub mod basic_auth;
pub mod config;
pub mod listen;
pub mod server;
mod slots;
mod tls;

#[cfg(test)]
mod tests;

pub use config::{WebConfig, load};
pub use listen::ListenAddress;

/// The running web config, replaced whole on reload.
pub type Shared = tokio::sync::watch::Receiver<std::sync::Arc<WebConfig>>;
