//! The GCS lock over HTTP with faults a proxy injects between it and the
//! faithful test server (tests/faithful_gcs.py behind
//! tests/gcs_fault_proxy.py, which also plays the OAuth token endpoint): a
//! token endpoint that fails or is slow (issue 21, case 7), replies lost on
//! the wire. Needs python3 and openssl (for a throwaway service-account
//! key); skipped with a note without them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockyard::gcs::{Lock, LockBuilder};
use lockyard::Error;

const MS: fn(u64) -> Duration = Duration::from_millis;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> PathBuf {
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

/// Starts a script that prints `port <N>` once listening.
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

/// A throwaway service-account key whose `token_uri` is the proxy.
fn service_account(token_uri: &str) -> Option<String> {
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
            "private_key": key,
            "token_uri": token_uri,
        })
        .to_string(),
    )
}

struct Gcs {
    _server: Server,
    _proxy: Server,
    proxy: String,
    key: String,
}

impl Gcs {
    fn start() -> Option<Gcs> {
        let Some(python) = python() else {
            eprintln!("skipped: no python3 for tests/faithful_gcs.py");
            return None;
        };
        let (server, upstream) = start(&python, "faithful_gcs.py", &[]);
        let (proxy_server, proxy) =
            start(&python, "gcs_fault_proxy.py", &["--upstream", &upstream]);
        let Some(key) = service_account(&format!("http://{proxy}/token")) else {
            eprintln!("skipped: openssl could not make a service-account key");
            return None;
        };
        Some(Gcs {
            _server: server,
            _proxy: proxy_server,
            proxy,
            key,
        })
    }

    /// A lock that reaches the server through the proxy, with a token
    /// from the proxy's token endpoint for every request.
    fn lock(&self) -> LockBuilder {
        Lock::builder("locks", "http-faults")
            .endpoint(format!("http://{}", self.proxy))
            .credentials_json(&self.key)
            .ttl(Duration::from_secs(10))
            .backoff_min(MS(20))
            .backoff_max(MS(100))
    }

    fn inject(&self, op: &str, fault: &str, times: u32) {
        let body = format!(r#"{{"op":"{op}","fault":"{fault}","times":{times}}}"#);
        let mut stream = TcpStream::connect(&self.proxy).unwrap();
        write!(
            stream,
            "POST /_proxy/faults HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }
}

/// Issue 21, case 7: the token endpoint fails for longer than gcp_auth's
/// own five tries. Acquire and release ride it out like any 503.
#[test]
fn a_failing_token_endpoint_is_retried_like_any_transient_error() {
    let Some(gcs) = Gcs::start() else { return };
    let lock = gcs.lock().build().unwrap();
    gcs.inject("token", "503", 12);
    let started = Instant::now();
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(30)), &|| false);
    assert!(acquired.unwrap(), "after {:?}", started.elapsed());
    gcs.inject("token", "503", 12);
    assert!(lock.release().unwrap(), "released, not left for its ttl");
    assert!(!lock.locked().unwrap());
}

/// A token endpoint slower than the request timeout counts as transient.
#[test]
fn a_slow_token_endpoint_counts_as_transient() {
    let Some(gcs) = Gcs::start() else { return };
    let lock = gcs.lock().request_timeout(MS(500)).build().unwrap();
    gcs.inject("token", "slow:2", 1);
    assert!(lock
        .acquire_interruptibly(Some(Duration::from_secs(10)), &|| false)
        .unwrap());
    assert!(lock.release().unwrap());
}

/// Credentials the token endpoint never accepts stay a typed error (after
/// the tolerance for a failing endpoint), not an endless wait: here a key
/// that is not a key at all fails at once.
#[test]
fn a_key_that_cannot_sign_is_a_backend_error_at_once() {
    let Some(gcs) = Gcs::start() else { return };
    // The key sits JSON-escaped in the document: "\n" is a backslash and an n.
    let key = gcs
        .key
        .replace("PRIVATE KEY-----\\n", "PRIVATE KEY-----\\nAAAA");
    assert_ne!(key, gcs.key);
    let lock = gcs.lock().credentials_json(key).build().unwrap();
    let started = Instant::now();
    let err = lock.acquire(None).err().unwrap();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// Issue 21, case 5 on the wire: the delete reaches the server, the reply
/// is dropped and the connection closed.
#[test]
fn over_http_a_delete_whose_reply_was_lost_counts_as_released() {
    let Some(gcs) = Gcs::start() else { return };
    let lock = gcs.lock().build().unwrap();
    assert!(lock.acquire_interruptibly(None, &|| false).unwrap());
    gcs.inject("delete", "lose_reply", 1);
    assert!(lock.release().unwrap());
    assert!(!lock.locked().unwrap());
}

/// Issue 21, case 3 on the wire: a refresh lands without its reply, and the
/// read after the next refresh's 412 gets a 503.
#[test]
fn over_http_a_503_after_a_lost_refresh_reply_is_not_a_loss() {
    let Some(gcs) = Gcs::start() else { return };
    let lock = gcs.lock().refresh_interval(MS(200)).build().unwrap();
    assert!(lock.acquire_interruptibly(None, &|| false).unwrap());
    gcs.inject("update", "lose_reply", 1);
    gcs.inject("get", "503", 1);
    std::thread::sleep(MS(1500));
    assert!(lock.healthy(), "{:?}", lock.check_health());
    assert!(lock.release().unwrap());
}
