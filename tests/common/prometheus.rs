//! A real Prometheus server (the Debian `prometheus` package) scraping
//! cgperf with the shipped recording and alerting rules, and its query API.

use super::http_get;
use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub struct Prometheus {
    child: Child,
    /// Where its HTTP API listens.
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shipped rule files.
const RULE_FILES: [&str; 2] = ["rules.yml", "alerts.yml"];

impl Prometheus {
    /// Prometheus scraping `targets` (each its own `instance`) as the job
    /// `cgperf`, with the shipped recording and alerting rules.
    pub fn start(targets: &[&str]) -> Self {
        Self::start_with(targets, &[])
    }

    /// The same, with the extra flags `flags`.
    pub fn start_with(targets: &[&str], flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        for file in RULE_FILES {
            let path = format!("{}/deploy/prometheus/{file}", env!("CARGO_MANIFEST_DIR"));
            // Evaluated every second for the test.
            let text = std::fs::read_to_string(path)
                .expect("rules")
                .replace("interval: 30s", "interval: 1s");
            std::fs::write(dir.path().join(file), text).expect("write rules");
        }
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [{}]\nscrape_configs:\n  - job_name: cgperf\n    static_configs:\n      - targets: [{}]\n",
                RULE_FILES.join(", "),
                targets.join(", ")
            ),
        )
        .expect("write config");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the prometheus server is installed (the test script installs the prometheus package)");
        let prometheus = Self {
            child,
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !prometheus.get("/-/ready").0.contains(" 200 ") {
            assert!(Instant::now() < deadline, "prometheus did not become ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    /// `path` of its HTTP API: (status line and headers, body).
    pub fn get(&self, path: &str) -> (String, String) {
        match std::net::TcpStream::connect(&self.addr) {
            Ok(_) => http_get(&self.addr, path, None),
            Err(_) => (String::new(), String::new()),
        }
    }

    /// Runs an instant query; returns (status is success, number of series).
    pub fn query(&self, expr: &str) -> (bool, usize, String) {
        let (_, body) = self.get(&format!("/api/v1/query?query={}", encode(expr)));
        let ok = body.contains("\"status\":\"success\"");
        let series = body.matches("\"metric\":").count();
        (ok, series, body)
    }
}

/// Percent-encodes a query parameter.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Fails unless `promtool check metrics` accepts `body` without a word.
pub fn promtool_check(body: &str) {
    let (ok, said) = promtool_check_metrics(body);
    assert!(
        ok && said.trim().is_empty(),
        "promtool check metrics:\n{said}\n---\n{body}"
    );
}

/// What `promtool check metrics` says of `body`: (success, output).
pub fn promtool_check_metrics(body: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (the test script installs the prometheus package)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("feed promtool");
    let out = child.wait_with_output().expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}
