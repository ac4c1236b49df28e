//! Loading web configs: what is accepted, and what each mistake says.

use super::load;
use std::path::Path;

/// A directory with a CA, a server certificate and key signed by it, and
/// a key that belongs to neither.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("cert");
        let other = rcgen::KeyPair::generate().expect("key");
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text).expect("write");
        };
        write("ca.crt", ca_cert.pem());
        write("server.crt", cert.pem());
        write("server.key", key.serialize_pem());
        write("other.key", other.serialize_pem());
        Self { dir }
    }

    fn config(&self, yaml: &str) -> std::path::PathBuf {
        let path = self.dir.path().join("web.yml");
        std::fs::write(&path, yaml).expect("write");
        path
    }
}

fn error(path: &Path) -> String {
    match load(path) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_file_is_plain_http_without_auth() {
    let files = Files::new();
    let web = load(&files.config("")).expect("loads");
    assert!(web.tls.is_none() && web.basic_auth.is_none() && web.headers.is_empty());
    let web = load(&files.config("tls_server_config:\n  cert_file: \"\"\n")).expect("loads");
    assert!(web.tls.is_none(), "empty values count as absent");
}

#[test]
fn relative_paths_are_relative_to_the_file() {
    let files = Files::new();
    let path = files.config(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
         min_version: TLS13\n",
    );
    let web = load(&path).expect("loads");
    let tls = web.tls.expect("TLS on");
    assert_eq!(tls.alpn_protocols, vec![b"http/1.1".to_vec()]);
    for auth in [
        "NoClientCert",
        "RequestClientCert",
        "RequireAnyClientCert",
        "RequireClientCert",
    ] {
        let path = files.config(&format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: {auth}\n"
        ));
        assert!(load(&path).expect(auth).tls.is_some());
    }
}

#[test]
fn users_and_headers() {
    let files = Files::new();
    let hash = bcrypt::hash("secret", 4).expect("hash");
    let web = load(&files.config(&format!(
        "basic_auth_users:\n  alice: {hash}\n  bob: '{hash}'\nhttp_server_config:\n  http2: true\n  headers:\n    \
         X-Frame-Options: deny\n    Content-Security-Policy: \"default-src 'self'\"\n    X-XSS-Protection: ''\n"
    )))
    .expect("loads");
    assert_eq!(web.basic_auth.expect("auth on").users(), 2);
    assert_eq!(web.headers.len(), 2, "blank values are unset");
    assert_eq!(web.headers["x-frame-options"], "deny");
}

#[test]
fn mistakes_are_explained_with_file_and_position() {
    let files = Files::new();
    let cases: &[(&str, &[&str])] = &[
        ("basic_auth_user:\n  a: b\n", &[":1:1:", "basic_auth_user"]),
        ("tls_server_config:\n  cert: x\n", &[":2:", "cert"]),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: Yes\n",
            &[":4:", "Yes", "RequireAndVerifyClientCert"],
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS10\n",
            &[":4:", "TLS10", "TLS12"],
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n",
            &["needs both cert_file and key_file"],
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n",
            &[":2:14:", "cert_file", "missing.crt"],
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n",
            &["do not go together"],
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n",
            &[":3:", "key_file", "private key"],
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n",
            &[":4:", "client_auth_type is NoClientCert"],
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: VerifyClientCertIfGiven\n",
            &[":4:", "needs client_ca_file"],
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS13\n  max_version: TLS12\n",
            &[":4:", "above max_version"],
        ),
        (
            "basic_auth_users:\n  alice: plaintext\n",
            &[":2:10:", "alice", "not a bcrypt hash"],
        ),
        (
            "basic_auth_users:\n  'a:b': x\n",
            &[":2:10:", "a:b", "contains `:`"],
        ),
        (
            "basic_auth_users:\n  alice: a\n  alice: b\n",
            &[":3:", "alice"],
        ),
        (
            "http_server_config:\n  headers:\n    Server: cgperf\n",
            &[":3:", "Server", "cannot be set"],
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            &[":3:", "deny, sameorigin", "allow"],
        ),
        ("tls_server_config: [\n", &[":"]),
    ];
    for (yaml, wanted) in cases {
        let path = files.config(yaml);
        let said = error(&path);
        assert!(
            said.starts_with(&path.display().to_string()),
            "{yaml}: names the file: {said}"
        );
        for want in *wanted {
            assert!(said.contains(want), "{yaml}: wanted {want:?} in: {said}");
        }
    }
}

#[test]
fn unreadable_file() {
    let said = error(Path::new("/nonexistent/web.yml"));
    assert!(said.contains("/nonexistent/web.yml") && said.contains("cannot read"));
}
