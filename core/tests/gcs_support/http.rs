//! The GCS lock over real HTTP: the faithful test server
//! (tests/faithful_gcs.py) behind tests/gcs_fault_proxy.py, which injects
//! faults and plays the endpoints credentials talk to (an OAuth token
//! endpoint, STS, IAM credentials, a subject-token URL, the metadata
//! server). Needs python3; `GcsOverHttp::start` returns None with a note
//! without it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockyard::gcs::{Lock, LockBuilder};

/// A child process, killed when dropped.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> Option<PathBuf> {
    let venv = repo().join(".venv/bin/python");
    [venv, "python3".into()].into_iter().find(|python| {
        Command::new(python)
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success())
    })
}

/// Starts a script of tests/ that prints `port <N>` once listening.
fn start(python: &Path, script: &str, args: &[&str]) -> (Server, String) {
    let mut child = Command::new(python)
        .arg(repo().join("tests").join(script))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().strip_prefix("port ").expect(&line).to_owned();
    (Server(child), format!("127.0.0.1:{port}"))
}

/// A throwaway service-account key (made with openssl), or None without
/// openssl.
pub fn service_account_key() -> Option<String> {
    let out = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    let key = String::from_utf8(out.stdout).unwrap();
    Some(
        serde_json::json!({
            "type": "service_account",
            "client_email": "lock-tests@example.iam.gserviceaccount.com",
            "private_key_id": "test-key",
            "private_key": key,
            "project_id": "lock-tests",
        })
        .to_string(),
    )
}

/// The JSON API path of object `name` in the bucket `lock` uses.
fn object_path(name: &str) -> String {
    format!("/storage/v1/b/locks/o/{}", name.replace('/', "%2F"))
}

pub struct GcsOverHttp {
    _server: Server,
    _proxy: Server,
    /// `host:port` of the proxy.
    pub proxy: String,
}

impl GcsOverHttp {
    pub fn start() -> Option<GcsOverHttp> {
        let Some(python) = python() else {
            eprintln!("skipped: no python3 for tests/faithful_gcs.py");
            return None;
        };
        let (server, upstream) = start(&python, "faithful_gcs.py", &[]);
        let (proxy_server, proxy) =
            start(&python, "gcs_fault_proxy.py", &["--upstream", &upstream]);
        Some(GcsOverHttp {
            _server: server,
            _proxy: proxy_server,
            proxy,
        })
    }

    /// `authorized_user` credentials (gcloud's user login) whose token
    /// endpoint is the proxy's `/token`, which hands out tokens that
    /// expire at once: every request of the lock asks it.
    pub fn user_credentials(&self) -> String {
        serde_json::json!({
            "type": "authorized_user",
            "client_id": "lock-tests.apps.googleusercontent.com",
            "client_secret": "not-a-secret",
            "refresh_token": "refresh",
            "token_uri": format!("http://{}/token", self.proxy),
        })
        .to_string()
    }

    /// A lock that reaches the server through the proxy with `credentials`.
    pub fn lock(&self, name: &str, credentials: &str) -> LockBuilder {
        Lock::builder("locks", name)
            .endpoint(format!("http://{}", self.proxy))
            .credentials_json(credentials)
            .ttl(Duration::from_secs(10))
            .backoff_min(Duration::from_millis(20))
            .backoff_max(Duration::from_millis(100))
    }

    pub fn inject(&self, op: &str, fault: &str, times: u32) {
        let body = format!(r#"{{"op":"{op}","fault":"{fault}","times":{times}}}"#);
        let reply = self.control("POST", "/_proxy/faults", &body);
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }

    /// What the proxy saw: requests per operation, and `bearers`, every
    /// `Authorization` header that came with a storage request.
    pub fn stats(&self) -> serde_json::Value {
        let reply = self.control("GET", "/_proxy/stats", "");
        let (_, body) = reply.split_once("\r\n\r\n").expect(&reply);
        serde_json::from_str(body).unwrap()
    }

    /// Someone else's PATCH of the lock object `name`'s custom metadata
    /// (a person or a script, no lock of ours), through the proxy.
    pub fn patch_metadata(&self, name: &str, metadata: serde_json::Value) {
        let body = serde_json::json!({ "metadata": metadata }).to_string();
        let reply = self.control("PATCH", &object_path(name), &body);
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }

    /// The lock object `name` as the server has it, or None.
    pub fn object(&self, name: &str) -> Option<serde_json::Value> {
        let reply = self.control("GET", &object_path(name), "");
        if reply.starts_with("HTTP/1.1 404") {
            return None;
        }
        let (_, body) = reply.split_once("\r\n\r\n").expect(&reply);
        Some(serde_json::from_str(body).unwrap())
    }

    fn control(&self, method: &str, path: &str, body: &str) -> String {
        let mut stream = TcpStream::connect(&self.proxy).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }
}
