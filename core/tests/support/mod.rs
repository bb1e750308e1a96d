//! A private redis-server per test, on a free port, killed on drop.

#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let port = free_port();
        let dir = TempDir::new();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .current_dir(&dir.0)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/setup installs it)");
        let server = RedisServer {
            child,
            port,
            _dir: dir,
        };
        let started = Instant::now();
        while server.raw().is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to the server process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Client connections the server has open, not counting the one asking.
    pub fn clients(&self) -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.raw().unwrap())
            .unwrap();
        list.lines().count() - 1
    }

    /// A plain connection for looking at what the library left in Redis.
    pub fn raw(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection()
    }

    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut self.raw().unwrap())
            .unwrap();
        keys.sort();
        keys
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "lockyard-test-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits until `condition` holds, or panics after `limit`.
pub fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A 3-master Redis Cluster (no replicas) on free ports, torn down on drop.
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
}

struct ClusterNode {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<ClusterNode> = (0..3)
            .map(|_| {
                // The cluster bus listens on port + 10000.
                let port = loop {
                    let port = free_port();
                    if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
                        break port;
                    }
                };
                let dir = TempDir::new();
                let child = Command::new("redis-server")
                    .args([
                        "--port",
                        &port.to_string(),
                        "--bind",
                        "127.0.0.1",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                    ])
                    .args([
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ])
                    .current_dir(&dir.0)
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("redis-server must be installed");
                ClusterNode {
                    child,
                    port,
                    _dir: dir,
                }
            })
            .collect();
        let cluster = RedisCluster { nodes };
        for node in &cluster.nodes {
            let started = Instant::now();
            while redis::Client::open(format!("redis://127.0.0.1:{}", node.port))
                .and_then(|c| c.get_connection())
                .is_err()
            {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "cluster node did not start"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli must be installed");
        assert!(status.success(), "redis-cli --cluster create failed");
        for node in &cluster.nodes {
            eventually(Duration::from_secs(20), "the cluster is ok", || {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut cluster.connection(node.port))
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
            });
        }
        cluster
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    pub fn url(&self, node: usize) -> String {
        format!("redis://127.0.0.1:{}", self.nodes[node].port)
    }

    pub fn connection(&self, port: u16) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// The port of the node serving `key`.
    pub fn node_of(&self, key: &str) -> u16 {
        let port = self.ports()[0];
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.connection(port))
            .unwrap();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.connection(port))
            .unwrap();
        for range in slots {
            let redis::Value::Array(items) = range else {
                continue;
            };
            let (redis::Value::Int(from), redis::Value::Int(to)) = (&items[0], &items[1]) else {
                continue;
            };
            if (*from..=*to).contains(&i64::from(slot)) {
                let redis::Value::Array(master) = &items[2] else {
                    break;
                };
                let redis::Value::Int(port) = master[1] else {
                    break;
                };
                return port as u16;
            }
        }
        panic!("no node serves slot {slot}");
    }
}

/// A TCP proxy in front of `upstream_port` that holds every chunk for
/// `delay` before passing it on: a node on a slow network link.
pub struct DelayProxy {
    pub port: u16,
}

impl DelayProxy {
    pub fn start(upstream_port: u16, delay: Duration) -> DelayProxy {
        use std::io::{Read, Write};
        use std::net::TcpStream;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let pump = move |mut from: TcpStream, mut to: TcpStream| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(read) = from.read(&mut buf) {
                    if read == 0 {
                        break;
                    }
                    std::thread::sleep(delay);
                    if to.write_all(&buf[..read]).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(std::net::Shutdown::Both);
            });
        };
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(server, client);
            }
        });
        DelayProxy { port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// This test binary re-run as a child process that runs only the test
/// `entry`, with `env_var` set to `spec`; talks over its stdin/stdout.
pub struct Helper {
    pub child: Child,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Helper {
    pub fn start(entry: &str, env_var: &str, spec: String) -> Helper {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", entry, "--nocapture", "--test-threads=1"])
            .env(env_var, spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        Helper {
            stdout: std::io::BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    /// Skips test-harness chatter up to the line containing `prefix` and
    /// returns the rest of that line.
    pub fn expect(&mut self, prefix: &str) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the helper process exited early"
            );
            // libtest prints "test <entry> ... " on the same line.
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    }

    /// Sends an empty line and returns the answer after `prefix`.
    pub fn ask(&mut self, prefix: &str) -> String {
        use std::io::Write;
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
        self.expect(prefix)
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy in front of `upstream_port` whose existing connections can
/// be made to go silent (open, but no byte passes either way) while new
/// ones work: a stuck connection, as a NAT or a half-dead peer leaves one.
pub struct StallProxy {
    pub port: u16,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl StallProxy {
    pub fn start(upstream_port: u16) -> StallProxy {
        use std::io::{Read, Write};
        use std::net::TcpStream;
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = Arc::new(AtomicU64::new(0));
        let pump = |mut from: TcpStream, mut to: TcpStream, born: u64, now: Arc<AtomicU64>| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(read) = from.read(&mut buf) {
                    if read == 0 {
                        break;
                    }
                    if now.load(Ordering::SeqCst) != born {
                        // Silent from now on: swallow everything.
                        continue;
                    }
                    if to.write_all(&buf[..read]).is_err() {
                        break;
                    }
                }
            });
        };
        let current = generation.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                let born = current.load(Ordering::SeqCst);
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    born,
                    current.clone(),
                );
                pump(server, client, born, current.clone());
            }
        });
        StallProxy { port, generation }
    }

    /// Every connection open now goes silent; later ones work.
    pub fn stall_existing(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}
