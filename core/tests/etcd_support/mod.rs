//! A private etcd member (or cluster) per test, from Debian's etcd-server,
//! on loopback ports below the ephemeral range, killed on drop.

#![allow(dead_code)]

mod elections;
// The Redis tests' copy: a test that includes both supports loads it twice.
#[allow(clippy::duplicate_mod)]
#[path = "../support/fork.rs"]
mod fork;
mod proxy;
#[allow(unused_imports)] // only the election tests use them
pub use elections::{began, ended, session_at};
#[allow(unused_imports)] // only the fork tests use them
pub use fork::{answer_parent, child_answer, pipe};
#[allow(unused_imports)] // only the review tests use them
pub use proxy::{Act, LateMember, Proxy, RuleProxy};

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A member's data dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(port: u16) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("lockyard-etcd-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct EtcdServer {
    child: Option<Child>,
    pub client_port: u16,
    peer_port: u16,
    name: String,
    cluster: String,
    /// The same for every member of one cluster.
    token: String,
    dir: TempDir,
    /// Serves clients over TLS and asks for their certificate (see
    /// [`EtcdServer::start_tls`]): the files live in this directory.
    tls: Option<PathBuf>,
}

/// A port below the ephemeral range (32768-) that is free now.
fn low_port() -> u16 {
    loop {
        let mut byte = [0u8; 2];
        getrandom_port(&mut byte);
        let port = 20000 + u16::from_le_bytes(byte) % 10000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn getrandom_port(bytes: &mut [u8; 2]) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mixed = nanos ^ (std::process::id() << 7) ^ nanos.rotate_left(13);
    bytes.copy_from_slice(&(mixed as u16).to_le_bytes());
}

impl EtcdServer {
    /// One member on its own.
    pub fn start() -> EtcdServer {
        let (client_port, peer_port) = (low_port(), low_port());
        let name = "solo".to_owned();
        let cluster = format!("{name}=http://127.0.0.1:{peer_port}");
        let mut server = EtcdServer {
            child: None,
            client_port,
            peer_port,
            name,
            cluster,
            token: format!("t{peer_port}"),
            dir: TempDir::new(peer_port),
            tls: None,
        };
        server.start_again();
        server.wait_ready();
        server
    }

    /// One member that speaks TLS to clients, with a certificate from a
    /// CA of its own, and lets in only clients with a certificate from
    /// that CA (`--client-cert-auth`).
    pub fn start_tls() -> EtcdServer {
        let (client_port, peer_port) = (low_port(), low_port());
        let name = "solo".to_owned();
        let dir = TempDir::new(peer_port);
        let tls = dir.0.join("tls");
        make_certificates(&tls);
        let mut server = EtcdServer {
            child: None,
            client_port,
            peer_port,
            cluster: format!("{name}=http://127.0.0.1:{peer_port}"),
            name,
            token: format!("t{peer_port}"),
            dir,
            tls: Some(tls),
        };
        server.start_again();
        server.wait_ready();
        server
    }

    /// A TLS member's file (`ca.pem`, `client.pem`, `client.key`, ...).
    pub fn tls_file(&self, name: &str) -> String {
        let dir = self.tls.as_ref().expect("a TLS member");
        dir.join(name).to_string_lossy().into_owned()
    }

    /// Three members on loopback, forming one cluster.
    pub fn cluster(size: usize) -> Vec<EtcdServer> {
        let ports: Vec<(u16, u16)> = (0..size).map(|_| (low_port(), low_port())).collect();
        let cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("t{}", ports[0].1);
        let mut members: Vec<EtcdServer> = ports
            .into_iter()
            .enumerate()
            .map(|(i, (client_port, peer_port))| EtcdServer {
                child: None,
                client_port,
                peer_port,
                name: format!("m{i}"),
                cluster: cluster.clone(),
                token: token.clone(),
                dir: TempDir::new(peer_port),
                tls: None,
            })
            .collect();
        for member in &mut members {
            member.start_again();
        }
        for member in &members {
            member.wait_ready();
        }
        members
    }

    /// Starts (again) on the same data dir and ports.
    pub fn start_again(&mut self) {
        let client = format!("{}://127.0.0.1:{}", self.scheme(), self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut etcd = Command::new("etcd");
        if self.tls.is_some() {
            etcd.args(["--cert-file", &self.tls_file("server.pem")])
                .args(["--key-file", &self.tls_file("server.key")])
                .args(["--trusted-ca-file", &self.tls_file("ca.pem")])
                .arg("--client-cert-auth");
        }
        let child = etcd
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.0.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &self.cluster,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--initial-cluster-token", &self.token])
            // Quick elections, so failover tests take seconds.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd (Debian's etcd-server) must be installed: scripts/setup does it");
        self.child = Some(child);
    }

    /// Kills the member (SIGKILL); [`EtcdServer::start_again`] brings it back.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn wait_ready(&self) {
        let started = Instant::now();
        while !self.ctl(&["endpoint", "health"]).0 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "etcd on {} did not start",
                self.client_port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn scheme(&self) -> &str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The member's URL; a TLS member's names the CA and client files.
    pub fn url(&self) -> String {
        match self.tls {
            None => format!("etcd://127.0.0.1:{}", self.client_port),
            Some(_) => format!(
                "etcds://127.0.0.1:{}?cacert={}&cert={}&key={}",
                self.client_port,
                self.tls_file("ca.pem"),
                self.tls_file("client.pem"),
                self.tls_file("client.key")
            ),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// Runs etcdctl against this member: (success, stdout).
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let mut etcdctl = Command::new("etcdctl");
        if self.tls.is_some() {
            etcdctl
                .args(["--cacert", &self.tls_file("ca.pem")])
                .args(["--cert", &self.tls_file("client.pem")])
                .args(["--key", &self.tls_file("client.key")]);
        }
        let out = etcdctl
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(format!("{}://{}", self.scheme(), self.endpoint()))
            .args(["--command-timeout", "2s"])
            .args(args)
            .output()
            .expect("etcdctl (Debian's etcd-client) must be installed");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Every key under `lockyard/`, sorted.
    pub fn keys(&self) -> Vec<String> {
        let (ok, out) = self.ctl(&["get", "--prefix", "lockyard/", "--keys-only"]);
        assert!(ok, "etcdctl get failed");
        let mut keys: Vec<String> = out
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys
    }

    /// The ids of every lease etcd holds, in hex.
    pub fn leases(&self) -> Vec<String> {
        let (ok, out) = self.ctl(&["lease", "list"]);
        assert!(ok, "etcdctl lease list failed");
        out.lines()
            .filter(|l| !l.starts_with("found"))
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The id of the lease etcd granted with `ttl` seconds.
    pub fn lease_granted_with(&self, ttl: u64) -> String {
        let wanted = format!("granted with TTL({ttl}s)");
        self.leases()
            .into_iter()
            .find(|id| self.ctl(&["lease", "timetolive", id]).1.contains(&wanted))
            .unwrap_or_else(|| panic!("no lease of {ttl} s: {:?}", self.leases()))
    }

    /// Sends `signal` ("STOP", "CONT") to the member.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

/// A CA, a certificate for 127.0.0.1 signed by it (server and client
/// use: etcd 3.4's gateway presents it to etcd itself), and a client
/// certificate, as PEM files in `dir`; and `other-ca.pem`, a CA that signed
/// none of them.
fn make_certificates(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("openssl must be installed");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let (pem, private) = (format!("{ca}.pem"), format!("{ca}.key"));
        let subject = format!("/CN=lockyard test {ca}");
        let mut args = vec!["req", "-x509", "-days", "2", "-subj", &subject];
        args.extend(key);
        args.extend(["-keyout", &private, "-out", &pem]);
        openssl(&args);
    }
    for (who, usage) in [
        ("server", "serverAuth,clientAuth"),
        ("client", "clientAuth"),
    ] {
        let extensions = format!("{who}.ext");
        std::fs::write(
            dir.join(&extensions),
            format!("subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n"),
        )
        .unwrap();
        let (private, request, pem) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.pem"),
        );
        let subject = format!("/CN=lockyard-{who}");
        let mut args = vec!["req", "-subj", &subject];
        args.extend(key);
        args.extend(["-keyout", &private, "-out", &request]);
        openssl(&args);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &request,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &extensions,
            "-out",
            &pem,
        ]);
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until `done` is true or `limit` passes.
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// A lock of `ttl` seconds on `url`.
pub fn lock_at(url: &str, name: &str, ttl: u64) -> lockyard::etcd::Lock {
    lockyard::etcd::Lock::builder(url, name)
        .ttl(Duration::from_secs(ttl))
        .build()
        .unwrap()
}

/// A wait group of `limit` slots of `ttl` seconds on `url`.
pub fn group_at(url: &str, name: &str, limit: u32, ttl: u64) -> lockyard::etcd::WaitGroup {
    lockyard::etcd::WaitGroup::builder(url, name, limit)
        .ttl(Duration::from_secs(ttl))
        .build()
        .unwrap()
}
