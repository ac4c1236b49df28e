//! The secured, hardened endpoint, against the real binary on loopback:
//! TLS with certificates made here, client certificates, basic auth, reload
//! of the web config on SIGHUP, bad web configs, idle and half-sent
//! connections, and 32 scrapers at once while counting stays exact.

mod common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A small config: quick to start, still a real sampler.
const CONFIG: &str =
    "interval: 1s\ngroups:\n  sched: [task-clock, context-switches]\ncgroups:\n  - path: /\n";

/// How long any single exchange may take before the test fails.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Certificates

/// A certificate and its key, in PEM and in the forms rustls takes.
struct Identity {
    cert_pem: String,
    key_pem: String,
    cert: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Identity {
    fn key(&self) -> PrivateKeyDer<'static> {
        PrivatePkcs8KeyDer::from(self.key_der.clone()).into()
    }
}

/// A CA that signs server and client certificates.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    cert: Identity,
}

impl Ca {
    fn new(name: &str) -> Self {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        let identity = Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert: cert.der().clone(),
            key_der: key.serialize_der(),
        };
        Self {
            issuer: rcgen::Issuer::new(params, key),
            cert: identity,
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) for `usage`.
    fn sign(&self, names: &[&str], usage: rcgen::ExtendedKeyUsagePurpose) -> Identity {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.extended_key_usages = vec![usage];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }

    fn server(&self) -> Identity {
        self.sign(
            &["localhost", "127.0.0.1"],
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    fn client(&self) -> Identity {
        self.sign(&["scraper"], rcgen::ExtendedKeyUsagePurpose::ClientAuth)
    }
}

// ---------------------------------------------------------------------------
// Files and the exporter

/// A directory holding the web config and the files it names (by relative
/// paths, which are relative to the web config).
struct WebDir {
    dir: tempfile::TempDir,
    config: tempfile::NamedTempFile,
}

impl WebDir {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            config: config_file(CONFIG),
        }
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.path().join(name), text).expect("write");
    }

    /// Writes the server's certificate and key, and `ca.crt` for clients.
    fn tls_files(&self, server: &Identity, client_ca: &Ca) {
        self.write("server.crt", &server.cert_pem);
        self.write("server.key", &server.key_pem);
        self.write("ca.crt", &client_ca.cert.cert_pem);
    }

    fn web_config(&self, yaml: &str) -> PathBuf {
        let path = self.dir.path().join("web.yml");
        // Write then rename, as editors do, so a reload never sees half a file.
        let tmp = self.dir.path().join("web.yml.tmp");
        std::fs::write(&tmp, yaml).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        path
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
        cmd.arg(format!("--config.file={}", self.config.path().display()))
            .arg(format!(
                "--web.config.file={}",
                self.dir.path().join("web.yml").display()
            ))
            .args(extra);
        // Run from elsewhere: relative paths must not depend on the cwd.
        cmd.current_dir("/");
        cmd
    }

    fn start(&self) -> Exporter {
        Exporter::spawn(self.command(&[]))
    }
}

const TLS_SERVER: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

fn users(list: &[(&str, &str)]) -> String {
    let mut yaml = "basic_auth_users:\n".to_owned();
    for (user, password) in list {
        let hash = bcrypt::hash(password, 4).expect("hash");
        yaml.push_str(&format!("  {user}: '{hash}'\n"));
    }
    yaml
}

// ---------------------------------------------------------------------------
// Clients

/// A response: status, head, body.
struct Response {
    status: u16,
    head: String,
    body: String,
}

impl Response {
    fn has_metrics(&self) -> bool {
        self.status == 200 && self.body.contains("cgperf_collections_total")
    }
}

/// Sends `GET path` with `headers` over `stream` and reads the response
/// until the server closes.
fn exchange(
    stream: &mut (impl Read + Write),
    addr: &str,
    path: &str,
    headers: &str,
) -> std::io::Result<Response> {
    // One write, as real clients do.
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let mut raw = Vec::new();
    // A TLS peer that closes without close_notify ends in an error after
    // the whole response: judge by what arrived.
    let read = stream.read_to_end(&mut raw);
    match parse_response(&raw) {
        Some((status, head, body)) => Ok(Response { status, head, body }),
        None => Err(read
            .err()
            .unwrap_or_else(|| std::io::Error::new(ErrorKind::InvalidData, "no HTTP response"))),
    }
}

fn connect(addr: &str) -> TcpStream {
    let tcp = TcpStream::connect(addr).expect("connect to cgperf");
    tcp.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    tcp.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
    tcp
}

fn get(addr: &str, path: &str, headers: &str) -> std::io::Result<Response> {
    exchange(&mut connect(addr), addr, path, headers)
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {encoded}\r\n")
}

/// A TLS client trusting `ca`, presenting `identity` if given.
fn tls_client(ca: &Ca, identity: Option<&Identity>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.cert.clone()).expect("CA");
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    Arc::new(match identity {
        Some(id) => builder
            .with_client_auth_cert(vec![id.cert.clone()], id.key())
            .expect("client identity"),
        None => builder.with_no_client_auth(),
    })
}

fn tls_stream(
    addr: &str,
    client: &Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(client.clone(), name).expect("client");
    rustls::StreamOwned::new(conn, connect(addr))
}

fn tls_get(
    addr: &str,
    client: &Arc<rustls::ClientConfig>,
    path: &str,
    headers: &str,
) -> std::io::Result<Response> {
    exchange(&mut tls_stream(addr, client), addr, path, headers)
}

/// Retries `attempt` until it holds (a reload is asynchronous), for at most
/// 15 s.
fn eventually(what: &str, attempt: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !attempt() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sighup(exporter: &Exporter) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(exporter.pid(), libc::SIGHUP) };
}

// ---------------------------------------------------------------------------
// TLS

#[test]
fn tls_scrape_succeeds_with_the_ca_and_plain_http_gets_no_metrics() {
    let ca = Ca::new("cgperf test CA");
    let web = WebDir::new();
    web.tls_files(&ca.server(), &ca);
    web.web_config(&format!(
        "{TLS_SERVER}http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
    ));
    let exporter = web.start();

    let scrape =
        tls_get(&exporter.addr, &tls_client(&ca, None), "/metrics", "").expect("TLS scrape");
    assert!(scrape.has_metrics(), "{}\n{}", scrape.head, scrape.body);
    assert!(
        scrape
            .head
            .to_ascii_lowercase()
            .contains("x-content-type-options: nosniff"),
        "{}",
        scrape.head
    );

    // Plain HTTP on the TLS port: told so, and no metrics.
    let plain = get(&exporter.addr, "/metrics", "").expect("an answer");
    assert_eq!(plain.status, 400, "{}", plain.head);
    assert!(plain.body.contains("HTTPS"), "{}", plain.body);
    assert!(!plain.body.contains("cgperf_"));

    // A client that does not trust the server's CA gets nothing.
    let stranger = Ca::new("another CA");
    assert!(tls_get(&exporter.addr, &tls_client(&stranger, None), "/metrics", "").is_err());
}

#[test]
fn client_certificates_are_required_and_verified() {
    let ca = Ca::new("cgperf test CA");
    let web = WebDir::new();
    web.tls_files(&ca.server(), &ca);
    web.web_config(&format!(
        "{TLS_SERVER}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
    ));
    let exporter = web.start();

    let with_cert = tls_get(
        &exporter.addr,
        &tls_client(&ca, Some(&ca.client())),
        "/metrics",
        "",
    )
    .expect("scrape with a client certificate");
    assert!(with_cert.has_metrics(), "{}", with_cert.head);

    let without = tls_get(&exporter.addr, &tls_client(&ca, None), "/metrics", "");
    assert!(
        without.is_err(),
        "no client certificate must be refused, got {}",
        without.map(|r| r.head).unwrap_or_default()
    );

    // A certificate from a CA the server does not trust is refused too.
    let other = Ca::new("untrusted client CA");
    let foreign = tls_get(
        &exporter.addr,
        &tls_client(&ca, Some(&other.client())),
        "/metrics",
        "",
    );
    assert!(
        foreign.is_err(),
        "an untrusted client certificate must be refused"
    );
}

// ---------------------------------------------------------------------------
// Basic auth

#[test]
fn basic_auth_lets_only_the_right_password_in() {
    let web = WebDir::new();
    web.web_config(&format!(
        "{}http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
        users(&[("alice", "wonderland")])
    ));
    let exporter = web.start();
    let addr = &exporter.addr;

    let right = get(addr, "/metrics", &basic("alice", "wonderland")).expect("scrape");
    assert!(right.has_metrics(), "{}", right.head);
    let landing = get(addr, "/", &basic("alice", "wonderland")).expect("landing page");
    assert_eq!(landing.status, 200);

    for (what, headers) in [
        ("wrong password", basic("alice", "wonderlan")),
        ("unknown user", basic("mallory", "wonderland")),
        ("no Authorization header", String::new()),
        (
            "another scheme",
            "Authorization: Bearer wonderland\r\n".to_owned(),
        ),
    ] {
        for path in ["/metrics", "/"] {
            let denied = get(addr, path, &headers).expect("an answer");
            assert_eq!(denied.status, 401, "{what} on {path}: {}", denied.head);
            let head = denied.head.to_ascii_lowercase();
            assert!(head.contains("www-authenticate: basic"), "{what}: {head}");
            assert!(head.contains("x-frame-options: deny"), "{what}: {head}");
            assert!(!denied.body.contains("cgperf_"), "{what}");
        }
    }
}

/// Threads of process `pid`, from /proc.
fn threads(pid: i32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

#[test]
fn wrong_passwords_from_clients_that_leave_leave_no_work_behind() {
    // A cost people use: each verification takes real time.
    let hash = bcrypt::hash("wonderland", 10).expect("hash");
    let web = WebDir::new();
    web.web_config(&format!("basic_auth_users:\n  alice: '{hash}'\n"));
    let exporter = Exporter::spawn(web.command(&["--web.max-connections=300"]));
    let addr = &exporter.addr;
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{}\r\n",
        basic("alice", "guess")
    );
    // Clients that each send a wrong password, wait a little, and hang up.
    let guessers: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut tcp = connect(addr);
            tcp.write_all(request.as_bytes()).expect("send");
            tcp
        })
        .collect();
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(threads(exporter.pid()));
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(guessers);
    for _ in 0..10 {
        most = most.max(threads(exporter.pid()));
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("threads with 200 wrong passwords waiting, then abandoned: at most {most}");
    assert!(
        most < 32,
        "{most} threads: each waiting verification holds a thread, still after its client \
         left, and shutdown waits for them all"
    );
    let right = get(addr, "/metrics", &basic("alice", "wonderland")).expect("scrape");
    assert!(right.has_metrics(), "{}", right.head);
}

#[test]
fn sighup_applies_a_new_web_config_and_keeps_the_old_one_when_bad() {
    let first_ca = Ca::new("first CA");
    let web = WebDir::new();
    web.tls_files(&first_ca.server(), &first_ca);
    web.web_config(&format!("{TLS_SERVER}{}", users(&[("alice", "a-pass")])));
    let exporter = web.start();
    let addr = &exporter.addr;
    let first = tls_client(&first_ca, None);
    let scrape = |client: &Arc<rustls::ClientConfig>, user, password| {
        tls_get(addr, client, "/metrics", &basic(user, password)).map(|r| r.status)
    };
    assert_eq!(scrape(&first, "alice", "a-pass").expect("scrape"), 200);
    assert_eq!(scrape(&first, "bob", "b-pass").expect("scrape"), 401);

    // A new user and a new certificate, from another CA.
    let second_ca = Ca::new("second CA");
    web.tls_files(&second_ca.server(), &second_ca);
    web.web_config(&format!(
        "{TLS_SERVER}{}",
        users(&[("alice", "a-pass"), ("bob", "b-pass")])
    ));
    sighup(&exporter);
    let second = tls_client(&second_ca, None);
    eventually("bob to be let in over the new certificate", || {
        scrape(&second, "bob", "b-pass").is_ok_and(|s| s == 200)
    });
    assert_eq!(scrape(&second, "alice", "a-pass").expect("scrape"), 200);
    assert!(
        scrape(&first, "alice", "a-pass").is_err(),
        "new connections get the new certificate"
    );

    // A bad web config is rejected; the running one stays.
    web.web_config("basic_auth_users:\n  alice: not-a-hash\n");
    sighup(&exporter);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(scrape(&second, "bob", "b-pass").expect("still served"), 200);
    assert_eq!(
        scrape(&second, "alice", "a-pass").expect("still served"),
        200
    );
}

#[test]
fn a_bad_web_config_at_start_is_an_error_naming_the_file() {
    let web = WebDir::new();
    let path = web
        .web_config("tls_server_config:\n  cert_file: server.crt\n  client_auth_type: Sometimes\n");
    let mut child = web
        .command(&["--web.listen-address=127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cgperf starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cgperf kept running with a bad web config");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    assert_eq!(status.code(), Some(1), "{stderr}");
    let at = format!("{}:3:21:", path.display());
    assert!(stderr.contains("invalid web config"), "{stderr}");
    assert!(stderr.contains(&at), "wanted {at} in: {stderr}");
    assert!(stderr.contains("Sometimes"), "{stderr}");
}

// ---------------------------------------------------------------------------
// Load and slow clients

/// Opens `idle` connections that send nothing and `half` that send half a
/// request head, then returns them (open).
fn squat(addr: &str, idle: usize, half: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for i in 0..idle + half {
        let mut tcp = TcpStream::connect(addr).expect("connect");
        if i >= idle {
            tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: squatter\r\n")
                .expect("half a request");
        }
        held.push(tcp);
    }
    held
}

#[test]
fn idle_and_half_sent_connections_do_not_keep_a_scrape_out() {
    // Plain HTTP.
    let web = WebDir::new();
    web.web_config("");
    let exporter = web.start();
    let held = squat(&exporter.addr, 300, 30);
    let started = Instant::now();
    let scrape = get(&exporter.addr, "/metrics", "").expect("scrape among 330 squatters");
    assert!(scrape.has_metrics(), "{}", scrape.head);
    eprintln!(
        "plain scrape among 330 idle connections: {:?}",
        started.elapsed()
    );
    drop(held);

    // TLS: idle connections sit in the handshake instead.
    let ca = Ca::new("cgperf test CA");
    let web = WebDir::new();
    web.tls_files(&ca.server(), &ca);
    web.web_config(TLS_SERVER);
    let exporter = web.start();
    let held = squat(&exporter.addr, 300, 30);
    let started = Instant::now();
    let scrape = tls_get(&exporter.addr, &tls_client(&ca, None), "/metrics", "")
        .expect("TLS scrape among 330 squatters");
    assert!(scrape.has_metrics(), "{}", scrape.head);
    eprintln!(
        "TLS scrape among 330 idle connections: {:?}",
        started.elapsed()
    );
    drop(held);
}

/// Whether the server closed `stream` (EOF or reset) before the read
/// timeout.
fn closed_by_server(stream: &mut dyn Read) -> bool {
    let mut buf = [0; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn silent_clients_are_closed_after_the_timeouts() {
    let ca = Ca::new("cgperf test CA");
    let web = WebDir::new();
    web.tls_files(&ca.server(), &ca);
    web.web_config(TLS_SERVER);
    // Room for everyone: only the timeouts close connections here.
    let exporter = Exporter::spawn(web.command(&["--web.max-connections=1000"]));
    let started = Instant::now();
    // Never starts the TLS handshake.
    let mut silent = connect(&exporter.addr);
    // Completes the handshake, then sends no request.
    let mut mute = tls_stream(&exporter.addr, &tls_client(&ca, None));
    while mute.conn.is_handshaking() {
        mute.conn
            .complete_io(&mut mute.sock)
            .expect("TLS handshake");
    }
    for stream in [&mut silent as &mut dyn Read, &mut mute as &mut dyn Read] {
        // 10 s timeouts; the socket read timeout is IO_TIMEOUT on top of
        // the time already spent, so allow for a second read.
        let closed = closed_by_server(stream) || closed_by_server(stream);
        let after = started.elapsed();
        assert!(closed, "still open after {after:?}");
        assert!(
            after >= Duration::from_secs(5),
            "closed too early: {after:?}"
        );
        eprintln!("silent client closed after {after:?}");
    }
}

fn collections(body: &str) -> f64 {
    value(body, "cgperf_collections_total", &[]).expect("cgperf_collections_total")
}

#[test]
fn thirty_two_scrapers_for_twenty_seconds() {
    const SCRAPERS: usize = 32;
    const DURATION: Duration = Duration::from_secs(20);
    const ROUNDS: u64 = 10;
    const PER_ROUND: u64 = 20_000;
    let cg = TestCgroup::create("cgperf-web-load");
    let config = config_file(
        "interval: 1s
groups:
  sched: [task-clock, context-switches, cpu-migrations, page-faults]
tracepoints:
  - sched:sched_switch
  - syscalls:sys_enter_getppid
cgroups:
  - path: /
  - match: /*
labels: [kubernetes, systemd, containers]
",
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()));
    let exporter = Exporter::spawn(cmd);
    let tp = [
        ("cgroup", cg.rel.as_str()),
        ("event", "syscalls:sys_enter_getppid"),
    ];
    exporter.wait_for("the test cgroup's series", |b| {
        value(b, "cgperf_events_total", &tp).is_some()
    });
    let before = exporter.scrape();
    let t0 = Instant::now();
    let c0 = collections(&before);
    let getppid0 = value(&before, "cgperf_events_total", &tp).expect("series");

    let addr = exporter.addr.clone();
    let scrapers: Vec<_> = (0..SCRAPERS)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut errors = Vec::new();
                while t0.elapsed() < DURATION {
                    let started = Instant::now();
                    match get(&addr, "/metrics", "") {
                        Ok(r) if r.has_metrics() => latencies.push(started.elapsed()),
                        Ok(r) => errors.push(format!("status {}", r.status)),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let workload = std::thread::spawn({
        let dir = cg.dir.clone();
        move || {
            for _ in 0..ROUNDS {
                getppid_workload(Some(&dir), PER_ROUND);
                std::thread::sleep(DURATION / (ROUNDS as u32 + 1));
            }
        }
    });
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for scraper in scrapers {
        let (l, e) = scraper.join().expect("scraper thread");
        latencies.extend(l);
        errors.extend(e);
    }
    workload.join().expect("workload thread");
    let elapsed = t0.elapsed();
    let after = exporter.scrape();
    let c1 = collections(&after);

    latencies.sort();
    let p = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "{SCRAPERS} scrapers, {:?}: {} scrapes ({:.0}/s), {} errors, p50 {:?}, p99 {:?}, max {:?}, body {} bytes",
        elapsed,
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        errors.len(),
        p(0.50),
        p(0.99),
        latencies.last().copied().unwrap_or_default(),
        after.len(),
    );
    assert!(
        errors.is_empty(),
        "{} errors, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );

    // Sampling kept its interval (1 s) under load.
    let expected = elapsed.as_secs_f64();
    assert!(
        (c1 - c0 - expected).abs() <= 2.0,
        "{} collections in {elapsed:?} at 1 s",
        c1 - c0
    );

    // And counting stayed exact.
    let body = exporter.wait_collections(2);
    let counted = value(&body, "cgperf_events_total", &tp).expect("series") - getppid0;
    assert_eq!(counted, (ROUNDS * PER_ROUND) as f64);
}

#[test]
fn max_connections_must_be_positive() {
    let (code, _, stderr) = run_cgperf(&["--web.max-connections=0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("web.max-connections"), "{stderr}");
}
