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
        RedisServer::start_on(free_port())
    }

    /// Kills the server and starts a new one on the same port, with no
    /// persistence: everything it held is forgotten.
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Kills the server; [`RedisServer::start_again`] brings it back empty.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn start_again(&mut self) {
        *self = RedisServer::start_on(self.port);
    }

    fn start_on(port: u16) -> RedisServer {
        RedisServer::start_as(port, redis_server)
    }

    /// A replica of the server on `master_port`.
    /// A server that asks clients for `password` (AUTH).
    pub fn with_password(password: &str) -> RedisServer {
        RedisServer::start_as(free_port(), |port, dir| {
            let mut command = redis_server(port, dir);
            command.args(["--requirepass", password]);
            command
        })
    }

    pub fn replica_of(master_port: u16) -> RedisServer {
        RedisServer::start_as(free_port(), |port, dir| {
            let mut command = redis_server(port, dir);
            command.args(["--replicaof", "127.0.0.1", &master_port.to_string()]);
            command
        })
    }

    /// A sentinel (`redis-server --sentinel`) watching the master on
    /// `master_port` as `SENTINEL_MASTER`, with timings short enough for a
    /// failover to take a few seconds (but not so short that a master
    /// slowed by a busy machine is failed over by mistake).
    pub fn sentinel(master_port: u16) -> RedisServer {
        RedisServer::sentinel_with(master_port, 2, "")
    }

    /// [`RedisServer::sentinel`] with `quorum` and more configuration
    /// lines (passwords).
    pub fn sentinel_with(master_port: u16, quorum: u32, more: &str) -> RedisServer {
        RedisServer::start_as(free_port(), |port, dir| {
            let config = dir.0.join("sentinel.conf");
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind 127.0.0.1\n\
                     sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master_port} {quorum}\n\
                     sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                     sentinel failover-timeout {SENTINEL_MASTER} 2000\n{more}"
                ),
            )
            .unwrap();
            let mut command = Command::new("redis-server");
            command
                .arg(&config)
                .arg("--sentinel")
                .current_dir(&dir.0)
                .stdout(Stdio::null());
            command
        })
    }

    fn start_as(port: u16, command: impl Fn(u16, &TempDir) -> Command) -> RedisServer {
        let dir = TempDir::new();
        let child = command(port, &dir)
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
        let connection = redis::Client::open(self.url())?
            .get_connection_with_timeout(Duration::from_secs(10))?;
        connection.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(connection)
    }

    /// How many scripts (`EVALSHA`) this server ran so far.
    pub fn evalsha_calls(&self) -> u64 {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.raw().unwrap())
            .unwrap();
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().unwrap())
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

/// The master name sentinels started by [`RedisServer::sentinel`] watch.
pub const SENTINEL_MASTER: &str = "locks";

/// A master, its replica and three sentinels watching them, on free ports.
pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// Starts them all and waits until the sentinels know the replica and
    /// each other (only then can they agree on a failover) and the replica
    /// has caught up.
    pub fn start() -> SentinelSet {
        let master = RedisServer::start();
        let replica = RedisServer::replica_of(master.port);
        let sentinels: Vec<_> = (0..3).map(|_| RedisServer::sentinel(master.port)).collect();
        let set = SentinelSet {
            master,
            replica,
            sentinels,
        };
        eventually(
            Duration::from_secs(20),
            "the sentinels know each other",
            || {
                set.sentinels.iter().all(|sentinel| {
                    let fields = sentinel.master_state();
                    fields.get("num-other-sentinels").map(String::as_str) == Some("2")
                        && fields.get("num-slaves").map(String::as_str) == Some("1")
                })
            },
        );
        set.wait_for_replica();
        set
    }

    /// `redis+sentinel://` naming the three sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER}/0", hosts.join(","))
    }

    /// Waits until the replica has everything the master wrote. (WAIT
    /// waits for its own connection's writes only: hence the write.)
    pub fn wait_for_replica(&self) {
        let mut master = self.master.raw().unwrap();
        redis::cmd("SET")
            .arg("test:replicated")
            .arg(1)
            .query::<()>(&mut master)
            .unwrap();
        eventually(Duration::from_secs(10), "the replica caught up", || {
            redis::cmd("WAIT")
                .arg(1)
                .arg(100)
                .query::<i64>(&mut master)
                .unwrap()
                == 1
        });
    }

    /// From now on nothing the master writes reaches the replica: its
    /// link is cut, and it may not sync again (no PSYNC/SYNC for it).
    pub fn stop_replication(&self) {
        let mut master = self.master.raw().unwrap();
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("-psync")
            .arg("-sync")
            .query::<()>(&mut master)
            .unwrap();
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query::<i64>(&mut master)
            .unwrap();
    }

    /// SIGKILLs the master and waits until the sentinels have promoted
    /// the replica (all of them name it, and it says it is a master).
    pub fn kill_master_and_wait_for_failover(&mut self) {
        self.master.stop();
        self.wait_for_promotion();
    }

    fn wait_for_promotion(&self) {
        let promoted = self.replica.port.to_string();
        eventually(Duration::from_secs(30), "the replica was promoted", || {
            self.sentinels
                .iter()
                .all(|sentinel| sentinel.master_state().get("port") == Some(&promoted))
                && self.replica.role() == "master"
        });
    }

    /// SIGSTOPs the master, waits until the sentinels promoted the
    /// replica, then lets the old master go on (SIGCONT): it answers as a
    /// master, over the connections it had, until the sentinels get round
    /// to demoting it (seconds). Swaps `master` and `replica`.
    pub fn pause_master_through_a_failover(&mut self) {
        self.master.signal("STOP");
        self.wait_for_promotion();
        self.master.signal("CONT");
        std::mem::swap(&mut self.master, &mut self.replica);
    }

    /// The highest config epoch any sentinel knows for the master.
    pub fn epoch(&self) -> u64 {
        self.sentinels
            .iter()
            .filter_map(|sentinel| sentinel.master_state().get("config-epoch")?.parse().ok())
            .max()
            .unwrap_or(0)
    }
}

impl RedisServer {
    /// `SENTINEL MASTER` as field → value, on a sentinel (empty if it does
    /// not answer).
    fn master_state(&self) -> std::collections::HashMap<String, String> {
        let Ok(mut conn) = self.raw() else {
            return Default::default();
        };
        let fields: Vec<String> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(SENTINEL_MASTER)
            .query(&mut conn)
            .unwrap_or_default();
        fields
            .chunks(2)
            .filter(|pair| pair.len() == 2)
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect()
    }

    /// The holders of `name` with their lease deadlines (server ms), in
    /// whichever form the scripts keep them: the holders set, or the short
    /// form of a sole holder taken on the fast path (the holders key as a
    /// string "<kind> <limit> <fence> <deadline ms> <token>").
    pub fn holders(&self, name: &str) -> Vec<(String, u64)> {
        let mut conn = self.raw().unwrap();
        let key = format!("lockyard:{{{name}}}:holders");
        let kind: String = redis::cmd("TYPE").arg(&key).query(&mut conn).unwrap();
        if kind == "string" {
            let short: String = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
            let fields: Vec<&str> = short.splitn(5, ' ').collect();
            let [_, _, _, deadline, token] = fields[..] else {
                panic!("not a short form: {short}");
            };
            return vec![(token.to_owned(), deadline.parse().unwrap())];
        }
        redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut conn)
            .unwrap()
    }

    /// "master" or "slave" ("" if it does not answer).
    pub fn role(&self) -> String {
        let Ok(mut conn) = self.raw() else {
            return String::new();
        };
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn).unwrap_or_default();
        match role.first() {
            Some(redis::Value::BulkString(role)) => String::from_utf8_lossy(role).into_owned(),
            _ => String::new(),
        }
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

/// A redis-server on `port` that keeps nothing on disk, run in `dir`;
/// callers add their own options and spawn it.
fn redis_server(port: u16, dir: &TempDir) -> Command {
    let mut command = Command::new("redis-server");
    command
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
        .stdout(Stdio::null());
    command
}

impl ClusterNode {
    /// A cluster-enabled redis-server on a free port, answering. A port
    /// (or its bus port, port + 10000) found free can be taken by another
    /// test's connection before the server binds it: the server then exits,
    /// and is started again on another port.
    fn start(replicas: usize) -> ClusterNode {
        for _ in 0..5 {
            let port = loop {
                let port = free_port();
                if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
                    break port;
                }
            };
            let dir = TempDir::new();
            let child = redis_server(port, &dir)
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    // Without replicas a node wrongly found failed (a busy
                    // machine) would stop the cluster: keep the default.
                    if replicas > 0 { "1000" } else { "15000" },
                ])
                .spawn()
                .expect("redis-server must be installed");
            let mut node = ClusterNode {
                child,
                port,
                _dir: dir,
            };
            let started = Instant::now();
            loop {
                let answering = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                    .is_ok();
                if answering {
                    return node;
                }
                if node.child.try_wait().ok().flatten().is_some() {
                    break; // could not bind: another port
                }
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "cluster node did not start"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("no cluster node started in 5 tries");
    }
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with_replicas(0)
    }

    /// Three masters with `replicas` replicas each. Nodes count a silent
    /// peer as failed after 1 s, so a replica takes over in about 2 s.
    pub fn start_with_replicas(replicas: usize) -> RedisCluster {
        let nodes: Vec<ClusterNode> = (0..3 * (1 + replicas))
            .map(|_| ClusterNode::start(replicas))
            .collect();
        let cluster = RedisCluster { nodes };
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli must be installed");
        assert!(status.success(), "redis-cli --cluster create failed");
        cluster.wait_until_ok(&cluster.ports());
        if replicas > 0 {
            // A replica can take over only once it has synced.
            eventually(Duration::from_secs(20), "every replica is in sync", || {
                cluster.ports().iter().all(|&port| {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut cluster.connection(port))
                        .unwrap_or_default();
                    info.contains("role:master") || info.contains("master_link_status:up")
                })
            });
        }
        cluster
    }

    fn wait_until_ok(&self, ports: &[u16]) {
        for &port in ports {
            eventually(Duration::from_secs(20), "the cluster is ok", || {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut self.connection(port))
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
            });
        }
    }

    pub fn url_of(&self, port: u16) -> String {
        format!("redis://127.0.0.1:{port}")
    }

    /// The ports of the nodes that serve slots.
    pub fn masters(&self) -> Vec<u16> {
        self.ports()
            .into_iter()
            .filter(|&port| {
                let role: Vec<redis::Value> = redis::cmd("ROLE")
                    .query(&mut self.connection(port))
                    .unwrap_or_default();
                matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")
            })
            .collect()
    }

    pub fn slot_of(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.connection(self.ports()[0]))
            .unwrap()
    }

    fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.connection(port))
            .unwrap()
    }

    /// Opens the move of `slot` from `from` to `to`: `to` imports it,
    /// `from` migrates it; no key moves yet.
    pub fn begin_migration(&self, slot: u16, from: u16, to: u16) {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let setslot = |port: u16, state: &str, id: &str| {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(id)
                .query::<()>(&mut self.connection(port))
                .unwrap();
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
    }

    /// Moves `keys` (those that exist) of a migrating slot to `to`.
    pub fn migrate_keys(&self, from: u16, to: u16, keys: &[&str]) {
        let mut conn = self.connection(from);
        let present: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|key| {
                redis::cmd("EXISTS")
                    .arg(key)
                    .query(&mut conn)
                    .unwrap_or(false)
            })
            .collect();
        if present.is_empty() {
            return;
        }
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&present)
            .query::<()>(&mut conn)
            .unwrap();
    }

    /// Moves every key of a migrating slot to `to`.
    pub fn migrate_slot_keys(&self, slot: u16, from: u16, to: u16) {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(1000)
            .query(&mut self.connection(from))
            .unwrap();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.migrate_keys(from, to, &keys);
    }

    /// Ends a migration: every master learns that `to` serves `slot`.
    pub fn finish_migration(&self, slot: u16, to: u16) {
        // The importing node takes the slot with a new config epoch, from
        // the highest it knows of: unless it knows them all, a stale claim
        // of the old owner can win back the slot (moves in quick succession
        // leave epochs still spreading).
        eventually(Duration::from_secs(10), "the epochs agree", || {
            let epochs: std::collections::HashSet<String> = self
                .masters()
                .into_iter()
                .map(|port| {
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query(&mut self.connection(port))
                        .unwrap_or_default();
                    info.lines()
                        .find(|l| l.starts_with("cluster_current_epoch:"))
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect();
            epochs.len() == 1
        });
        let to_id = self.node_id(to);
        let mut masters = self.masters();
        // The importing node first, as redis-cli does.
        masters.sort_by_key(|&port| port != to);
        for port in masters {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query::<()>(&mut self.connection(port))
                .unwrap();
        }
    }

    /// Moves the slot of `key`, with all its keys, to the master `to`.
    pub fn move_slot_of(&self, key: &str, to: u16) {
        let (slot, from) = (self.slot_of(key), self.node_of(key));
        self.begin_migration(slot, from, to);
        self.migrate_slot_keys(slot, from, to);
        self.finish_migration(slot, to);
    }

    /// Kills the node at `port` and waits until a replica serves its slots.
    pub fn kill_master(&mut self, port: u16, served_key: &str) {
        // Replication is asynchronous: a master killed right after a write
        // may take it with it. The tests are about failing over, not that.
        self.wait_for_replicas(port, served_key);
        let at = self.nodes.iter().position(|n| n.port == port).unwrap();
        drop(self.nodes.remove(at));
        let ports = self.ports();
        eventually(Duration::from_secs(20), "a replica took over", || {
            let mut conn = self.connection(ports[0]);
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut conn)
                .unwrap_or_default();
            info.contains("cluster_state:ok") && self.node_of(served_key) != port
        });
    }

    /// Waits until every replica of the master at `port` has `key`.
    fn wait_for_replicas(&self, port: u16, key: &str) {
        let id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.connection(port))
            .unwrap();
        let replicas: Vec<String> = redis::cmd("CLUSTER")
            .arg("REPLICAS")
            .arg(&id)
            .query(&mut self.connection(port))
            .unwrap_or_default();
        for line in replicas {
            let Some(replica) = line
                .split(' ')
                .nth(1)
                .and_then(|addr| addr.split(['@', ':']).nth(1))
                .and_then(|p| p.parse::<u16>().ok())
            else {
                continue;
            };
            eventually(Duration::from_secs(10), "the replica has the key", || {
                let mut conn = self.connection(replica);
                let _: redis::RedisResult<()> = redis::cmd("READONLY").query(&mut conn);
                redis::cmd("EXISTS")
                    .arg(key)
                    .query::<bool>(&mut conn)
                    .unwrap_or(false)
            });
        }
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    pub fn url(&self, node: usize) -> String {
        format!("redis://127.0.0.1:{}", self.nodes[node].port)
    }

    pub fn connection(&self, port: u16) -> redis::Connection {
        let connection = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(10))
            .unwrap();
        // A test's own command that hangs fails here, naming where, rather
        // than running into the step's time limit with no word.
        connection
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        connection
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

/// A TCP proxy in front of `upstream_port` whose connections can be made
/// to go silent (open, but no byte passes): the existing ones while new
/// ones work (a stuck connection, as a NAT or a half-dead peer leaves one),
/// all of them (a partition as a client sees it), or only the replies
/// (requests reach the server, answers are lost).
pub struct StallProxy {
    pub port: u16,
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// 0: as `generation` says; 1: every byte swallowed; 2: replies only.
    silence: std::sync::Arc<std::sync::atomic::AtomicU8>,
}

impl StallProxy {
    pub fn start(upstream_port: u16) -> StallProxy {
        use std::io::{Read, Write};
        use std::net::TcpStream;
        use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = Arc::new(AtomicU64::new(0));
        let silence = Arc::new(AtomicU8::new(0));
        let pump = |mut from: TcpStream,
                    mut to: TcpStream,
                    replies: bool,
                    born: u64,
                    now: Arc<AtomicU64>,
                    silence: Arc<AtomicU8>| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(read) = from.read(&mut buf) {
                    if read == 0 {
                        break;
                    }
                    let silent = match silence.load(Ordering::SeqCst) {
                        1 => true,
                        2 => replies,
                        _ => now.load(Ordering::SeqCst) != born,
                    };
                    if silent {
                        // Silent from now on: swallow everything.
                        continue;
                    }
                    if to.write_all(&buf[..read]).is_err() {
                        break;
                    }
                }
            });
        };
        let (current, quiet) = (generation.clone(), silence.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                let born = current.load(Ordering::SeqCst);
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    false,
                    born,
                    current.clone(),
                    quiet.clone(),
                );
                pump(server, client, true, born, current.clone(), quiet.clone());
            }
        });
        StallProxy {
            port,
            generation,
            silence,
        }
    }

    /// Every connection open now goes silent; later ones work.
    pub fn stall_existing(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Every connection, open now or later, goes silent until `speak`.
    pub fn silence_all(&self) {
        self.silence.store(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Requests still reach the server; its replies are lost until `speak`.
    pub fn silence_replies(&self) {
        self.silence.store(2, std::sync::atomic::Ordering::SeqCst);
    }

    /// Ends `silence_all` or `silence_replies`.
    pub fn speak(&self) {
        self.silence.store(0, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// Forked children that answer their parent through a pipe.
pub mod fork;

/// The Lua scripts run on their own, exactly as the library sends them.
pub mod raw_script {
    /// The script whose body is `body` (a file of core/src/redis/scripts).
    pub fn script(body: &str) -> ::redis::Script {
        ::redis::Script::new(&lockyard::redis::script_source(body))
    }

    /// One invocation of `s` on `name` as the library sends it: the name's
    /// key prefix and holders key, the shared ARGV[1..2] (`limit`,
    /// `fence_base`), then `args`.
    pub fn invoke<T: ::redis::FromRedisValue>(
        conn: &mut ::redis::Connection,
        s: &::redis::Script,
        name: &str,
        limit: u32,
        fence_base: u64,
        args: &[&str],
    ) -> T {
        let mut inv = s.prepare_invoke();
        inv.key(format!("lockyard:{{{name}}}:"))
            .key(format!("lockyard:{{{name}}}:holders"))
            .arg(limit)
            .arg(fence_base);
        for a in args {
            inv.arg(*a);
        }
        inv.invoke(conn).unwrap()
    }
}
