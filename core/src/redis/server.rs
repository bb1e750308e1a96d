//! Connections to one Redis server. Callers' requests run on the calling
//! thread over pooled blocking connections (no thread hop on the hot path);
//! background refreshes use one multiplexed async connection per server.
//! Both are per process: a forked child never writes to a socket it
//! inherited from its parent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, Connection, ConnectionAddr, ErrorKind, RedisError, RedisResult,
    Value,
};

use super::caller::{Caller, LEAST_TIME};
use super::failure::{interrupted_by_signal, is_cluster_reply, Failure, OnSignal};
use crate::error::{Error, Result};

const MAX_IDLE: usize = 16;

/// Signals in a row after which a request gives up.
const MAX_INTERRUPTIONS: u32 = 100;

/// How long a single command may take before the server counts as unreachable.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct Server {
    client: Client,
    /// `host:port` or the socket path, for error messages.
    pub(crate) name: String,
    connect_timeout: Duration,
    idle: Mutex<(u32, Vec<Connection>)>,
    background: Mutex<Option<(u32, MultiplexedConnection)>>,
    /// The other nodes of this server's Cluster (`host:port`), learned once
    /// while it answers, so that a route can still find its slot after this
    /// node itself failed over; empty when it is not in a Cluster.
    peers: OnceLock<Vec<String>>,
    /// The smoothed round trip of callers' requests (µs; 0 before the
    /// first connection), which bounds how far a caller's deadline may cut
    /// a request short (see [`Server::least_time`]).
    round_trip_us: AtomicU64,
}

/// Before the first connection to a server, how long connecting may take
/// however close the caller's deadline: its round trip is not known yet.
const FIRST_CONNECT_LEAST_TIME: Duration = Duration::from_secs(1);

type Registry = Mutex<HashMap<(String, Duration), Arc<Server>>>;
static SERVERS: LazyLock<Registry> = LazyLock::new(Default::default);

/// Checks a URL the way users write them (`redis://`, `rediss://`,
/// `unix://`, `redis+unix://`, user:password, db) and returns its server.
pub(crate) fn server(url: &str, connect_timeout: Duration) -> Result<Arc<Server>> {
    let key = (url.to_owned(), connect_timeout);
    if let Some(server) = registry().get(&key) {
        return Ok(server.clone());
    }
    let client = Client::open(url)
        .map_err(|e| Error::config(format!("unparsable Redis URL {:?}: {e}", redact(url))))?;
    let server = Arc::new(Server::new(client, connect_timeout));
    registry().insert(key, server.clone());
    Ok(server)
}

fn registry() -> std::sync::MutexGuard<'static, HashMap<(String, Duration), Arc<Server>>> {
    SERVERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

impl Server {
    fn new(client: Client, connect_timeout: Duration) -> Self {
        // No CLIENT SETINFO when connecting: its two replies would be read
        // each with the whole connect timeout, which a caller's deadline
        // cannot cut.
        let client = Client::open(
            client.get_connection_info().clone().set_redis_settings(
                client
                    .get_connection_info()
                    .redis_settings()
                    .clone()
                    .set_skip_set_lib_name(),
            ),
        )
        .unwrap_or(client);
        if matches!(
            client.get_connection_info().addr(),
            ConnectionAddr::TcpTls { .. }
        ) {
            // rustls needs a process-wide crypto provider; a second install is a no-op.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Server {
            name: client.get_connection_info().addr().to_string(),
            client,
            connect_timeout,
            idle: Mutex::new((std::process::id(), Vec::new())),
            background: Mutex::new(None),
            peers: OnceLock::new(),
            round_trip_us: AtomicU64::new(0),
        }
    }

    /// `host:port/db`: which data set this URL reaches, however written.
    #[cfg(feature = "quorum")]
    pub(crate) fn address(&self) -> String {
        let info = self.client.get_connection_info();
        format!("{}/{}", info.addr(), info.redis_settings().db())
    }

    /// The same server settings (auth, db, TLS) at another address: where a
    /// Cluster node redirected us.
    pub(crate) fn redirected(&self, addr: &str) -> Result<Arc<Server>> {
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                Error::backend(&self.name, "redirect", format!("bad address {addr:?}"))
            })?;
        let info = self.client.get_connection_info().clone();
        let addr = match info.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let client = Client::open(info.set_addr(addr))
            .map_err(|e| Error::redis(&self.name, "redirect", e))?;
        let key = (
            format!("redirect:{}", client.get_connection_info().addr()),
            self.connect_timeout,
        );
        let mut servers = registry();
        let server = servers
            .entry(key)
            .or_insert_with(|| Arc::new(Server::new(client, self.connect_timeout)));
        Ok(server.clone())
    }

    /// A pooled connection (true), or a new one; connecting is cut to the
    /// caller's deadline and ended by its interrupt.
    fn checkout(&self, caller: &Caller) -> std::result::Result<(Connection, bool), Failure> {
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let pid = std::process::id();
            if idle.0 != pid {
                // Inherited from the parent: closing our copies is harmless to it.
                *idle = (pid, Vec::new());
            }
            if let Some(conn) = idle.1.pop() {
                return Ok((conn, true));
            }
        }
        let mut interruptions = 0;
        let conn = loop {
            let started = Instant::now();
            let timeout = caller.read_timeout(self.connect_timeout, self.least_time());
            match self.client.get_connection_with_timeout(timeout) {
                Ok(conn) => {
                    if self.round_trip_us.load(Ordering::Relaxed) == 0 {
                        self.took(started.elapsed());
                    }
                    break conn;
                }
                Err(e) if interrupted_by_signal(&e) && caller.interrupted() => {
                    return Err(Failure::Interrupted);
                }
                // Connecting twice is always safe.
                Err(e) if interrupted_by_signal(&e) && interruptions < MAX_INTERRUPTIONS => {
                    interruptions += 1;
                }
                Err(_) if caller.is_late() => return Err(Failure::Late),
                Err(e) => return Err(Failure::Unreachable(self.error("connect", e))),
            }
        };
        conn.set_write_timeout(Some(COMMAND_TIMEOUT))
            .map_err(|e| Failure::Unreachable(self.error("connect", e)))?;
        Ok((conn, false))
    }

    /// Folds one round trip into the smoothed one (as TCP's SRTT, 1/8).
    fn took(&self, round_trip: Duration) {
        let sample = u64::try_from(round_trip.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = self
            .round_trip_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |smoothed| {
                Some(match smoothed {
                    0 => sample,
                    _ => smoothed - smoothed / 8 + sample / 8,
                })
            });
    }

    /// The least time a caller's deadline leaves a request: three round
    /// trips, and at least [`LEAST_TIME`].
    fn least_time(&self) -> Duration {
        match self.round_trip_us.load(Ordering::Relaxed) {
            0 => FIRST_CONNECT_LEAST_TIME,
            us => LEAST_TIME.max(Duration::from_micros(us).saturating_mul(3)),
        }
    }

    fn checkin(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.0 == std::process::id() && idle.1.len() < MAX_IDLE {
            idle.1.push(conn);
        }
    }

    /// Runs `request` on a pooled connection for `caller`, waiting up to
    /// `read_timeout` for the answer, or less if the caller gives up
    /// sooner. A pooled connection that turns out dead (the server
    /// restarted) is replaced once: it never carried the request to a live
    /// server, so repeating it is safe. A read cut short by a signal (EINTR:
    /// Ruby and Python install handlers) drops the connection, whose state
    /// is then unknown, and ends the request if the caller is interrupted;
    /// otherwise it repeats the request or reports [`Failure::Signal`], as
    /// `on_signal` says.
    pub(crate) fn run<T>(
        &self,
        operation: &str,
        read_timeout: Duration,
        caller: &Caller,
        on_signal: OnSignal,
        mut request: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        let mut stale_retried = false;
        let mut interruptions = 0;
        loop {
            let (mut conn, pooled) = self.checkout(caller).map_err(|failure| match failure {
                // The dead connection may have carried the request after all.
                Failure::Unreachable(e) if stale_retried => Failure::Broken(e),
                failure => failure,
            })?;
            conn.set_read_timeout(Some(caller.read_timeout(read_timeout, self.least_time())))
                .map_err(|e| Failure::Fatal(self.error(operation, e)))?;
            let sent = Instant::now();
            match request(&mut conn) {
                Ok(value) => {
                    // A request allowed more than the command timeout blocks
                    // on the server by design (BLPOP, XREAD): its time is
                    // not a round trip.
                    if read_timeout <= COMMAND_TIMEOUT {
                        self.took(sent.elapsed());
                    }
                    self.checkin(conn);
                    return Ok(value);
                }
                Err(e) if is_cluster_reply(&e) => {
                    self.checkin(conn);
                    return Err(Failure::of(&self.name, operation, e));
                }
                Err(e) if interrupted_by_signal(&e) && caller.interrupted() => {
                    return Err(Failure::Interrupted);
                }
                Err(e) if interrupted_by_signal(&e) => match on_signal {
                    OnSignal::Report => return Err(Failure::Signal),
                    OnSignal::Repeat if interruptions < MAX_INTERRUPTIONS => interruptions += 1,
                    OnSignal::Repeat => return Err(Failure::Fatal(self.error(operation, e))),
                },
                Err(e) if caller.is_late() && e.is_timeout() => return Err(Failure::Late),
                Err(e) if pooled && !stale_retried && e.is_connection_dropped() => {
                    stale_retried = true;
                }
                Err(e) => return Err(Failure::of(&self.name, operation, e)),
            }
            if caller.is_late() {
                return Err(Failure::Late);
            }
        }
    }

    /// The connection background refreshes use, created on first need.
    pub(crate) async fn background(&self) -> Result<MultiplexedConnection> {
        let pid = std::process::id();
        if let Some((owner, conn)) = self
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            if *owner == pid {
                return Ok(conn.clone());
            }
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(COMMAND_TIMEOUT));
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.error("connect", e))?;
        *self.background.lock().unwrap_or_else(|e| e.into_inner()) = Some((pid, conn.clone()));
        Ok(conn)
    }

    /// Runs `call` on the background connection, giving up at `deadline`.
    /// A call that fails or runs out of time drops the connection, so the
    /// next one (the caller's retry) starts on a fresh one: a connection gone
    /// silent must not cost every later call its whole timeout too. A
    /// Cluster reply (a redirect, TRYAGAIN) leaves it: it answered.
    pub(crate) async fn in_background<T, F>(
        &self,
        operation: &str,
        deadline: Instant,
        call: impl FnOnce(MultiplexedConnection) -> F,
    ) -> std::result::Result<T, Failure>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let outcome = tokio::time::timeout_at(deadline.into(), async {
            let conn = self.background().await.map_err(Failure::Unreachable)?;
            call(conn)
                .await
                .map_err(|e| Failure::of(&self.name, operation, e))
        })
        .await
        .unwrap_or_else(|_| {
            Err(Failure::Broken(Error::backend_transient(
                &self.name,
                operation,
                "no answer in time",
            )))
        });
        if matches!(
            outcome,
            Err(Failure::Unreachable(_) | Failure::Broken(_) | Failure::Fatal(_))
        ) {
            self.drop_background();
        }
        outcome
    }

    /// Lock-free: every successful call asks it.
    fn knows_peers(&self) -> bool {
        self.peers.get().is_some()
    }

    /// Learns the other nodes of this server's Cluster (CLUSTER SLOTS;
    /// a server not in a Cluster refuses it) from the first call through it
    /// that succeeds, once per server and process. Best effort: a failure
    /// leaves it for the next call.
    pub(crate) fn learn_peers(&self) {
        if self.knows_peers() {
            return;
        }
        let asked = self.run(
            "cluster slots",
            COMMAND_TIMEOUT,
            &Caller::patient(),
            OnSignal::Report,
            |conn| Ok(redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(conn)),
        );
        if let Ok(slots) = asked {
            self.know_peers(slots);
        }
    }

    /// [`Server::learn_peers`] for background calls, before `deadline`.
    pub(crate) async fn learn_peers_in_background(&self, deadline: Instant) {
        if self.knows_peers() {
            return;
        }
        let asked = tokio::time::timeout_at(deadline.into(), async {
            let mut conn = self.background().await.ok()?;
            Some(
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<Value>(&mut conn)
                    .await,
            )
        })
        .await;
        if let Ok(Some(slots)) = asked {
            self.know_peers(slots);
        }
    }

    fn know_peers(&self, slots: RedisResult<Value>) {
        let learned = match slots {
            Ok(slots) => node_addresses(&slots, &self.name),
            // An error reply (cluster support disabled, no permission): the
            // server answers, and asking again would only cost a round trip.
            Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => Vec::new(),
            Err(_) => return,
        };
        // Two calls may learn at once; either list will do.
        let _ = self.peers.set(learned);
    }

    /// The `index`-th other node of this server's Cluster, if known.
    pub(crate) fn peer(&self, index: usize) -> Option<String> {
        self.peers.get()?.get(index).cloned()
    }

    /// Forgets a background connection that failed, so the next use reconnects.
    pub(crate) fn drop_background(&self) {
        self.background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    pub(crate) fn error(&self, operation: &str, e: RedisError) -> Error {
        Error::redis(&self.name, operation, e)
    }
}

/// Every node (`host:port`, masters and replicas) in a CLUSTER SLOTS
/// reply but `own`.
fn node_addresses(slots: &Value, own: &str) -> Vec<String> {
    let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
    let mut nodes = Vec::new();
    let Value::Array(ranges) = slots else {
        return nodes;
    };
    for range in ranges {
        let Value::Array(items) = range else { continue };
        for node in items.iter().skip(2) {
            let Value::Array(node) = node else { continue };
            let (Some(host), Some(Value::Int(port))) = (node.first().and_then(text), node.get(1))
            else {
                continue;
            };
            let address = format!("{host}:{port}");
            if !host.is_empty() && address != own && !nodes.contains(&address) {
                nodes.push(address);
            }
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unparsable_urls_are_config_errors() {
        for url in ["", "http://x", "redis://host:notaport", "nonsense"] {
            let err = server(url, Duration::from_secs(1)).err().expect(url);
            assert!(matches!(err, Error::Config(_)), "{url}: {err}");
        }
    }

    #[test]
    fn urls_users_write_are_accepted() {
        for url in [
            "redis://127.0.0.1:6379/0",
            "redis://user:secret@localhost:6380/3",
            "rediss://example.com:6380",
            "unix:///run/redis.sock",
            "redis+unix:///run/redis.sock?db=2",
        ] {
            assert!(server(url, Duration::from_secs(1)).is_ok(), "{url}");
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://***@h:1/0");
    }
}
