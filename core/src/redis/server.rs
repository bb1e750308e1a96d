//! Connections to one Redis server. Callers' requests run on the calling
//! thread over pooled blocking connections (no thread hop on the hot path);
//! background refreshes use one multiplexed async connection per server.
//! Both are per process: a forked child never writes to a socket it
//! inherited from its parent.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, Connection, ConnectionAddr, ErrorKind, Pipeline,
    RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

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
    peers: Mutex<Option<Vec<String>>>,
}

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
            peers: Mutex::new(None),
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
    fn redirected(&self, addr: &str) -> Result<Arc<Server>> {
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
            .map_err(|e| Error::backend(&self.name, "redirect", e))?;
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

    fn checkout(&self) -> Result<(Connection, bool)> {
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
            match self
                .client
                .get_connection_with_timeout(self.connect_timeout)
            {
                Ok(conn) => break conn,
                // Connecting twice is always safe.
                Err(e) if interrupted_by_signal(&e) && interruptions < MAX_INTERRUPTIONS => {
                    interruptions += 1;
                }
                Err(e) => return Err(self.error("connect", e)),
            }
        };
        conn.set_write_timeout(Some(COMMAND_TIMEOUT))
            .map_err(|e| self.error("connect", e))?;
        Ok((conn, false))
    }

    fn checkin(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.0 == std::process::id() && idle.1.len() < MAX_IDLE {
            idle.1.push(conn);
        }
    }

    /// Runs `request` on a pooled connection. A pooled connection that turns
    /// out dead (the server restarted) is replaced once: it never carried the
    /// request to a live server, so repeating it is safe. A read cut short by
    /// a signal (EINTR: Ruby and Python install handlers) drops the
    /// connection, whose state is then unknown, and either repeats the
    /// request or reports [`Failure::Signal`], as `on_signal` says.
    pub(crate) fn run<T>(
        &self,
        operation: &str,
        read_timeout: Duration,
        on_signal: OnSignal,
        mut request: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        let mut stale_retried = false;
        let mut interruptions = 0;
        loop {
            let (mut conn, pooled) = self.checkout().map_err(|e| match stale_retried {
                // The dead connection may have carried the request after all.
                true => Failure::Broken(e),
                false => Failure::Unreachable(e),
            })?;
            conn.set_read_timeout(Some(read_timeout))
                .map_err(|e| Failure::Fatal(self.error(operation, e)))?;
            match request(&mut conn) {
                Ok(value) => {
                    self.checkin(conn);
                    return Ok(value);
                }
                Err(e) if is_cluster_reply(&e) => {
                    self.checkin(conn);
                    return Err(self.failure(operation, e));
                }
                Err(e) if interrupted_by_signal(&e) => match on_signal {
                    OnSignal::Report => return Err(Failure::Signal),
                    OnSignal::Repeat if interruptions < MAX_INTERRUPTIONS => interruptions += 1,
                    OnSignal::Repeat => return Err(Failure::Fatal(self.error(operation, e))),
                },
                Err(e) if pooled && !stale_retried && e.is_connection_dropped() => {
                    stale_retried = true;
                }
                Err(e) => return Err(self.failure(operation, e)),
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
    async fn in_background<T, F>(
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
            call(conn).await.map_err(|e| self.failure(operation, e))
        })
        .await
        .unwrap_or_else(|_| {
            Err(Failure::Broken(Error::backend(
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

    fn knows_peers(&self) -> bool {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Learns the other nodes of this server's Cluster (CLUSTER SLOTS;
    /// a server not in a Cluster refuses it) from the first call through it
    /// that succeeds, once per server and process. Best effort: a failure
    /// leaves it for the next call.
    fn learn_peers(&self) {
        if self.knows_peers() {
            return;
        }
        let asked = self.run("cluster slots", COMMAND_TIMEOUT, OnSignal::Report, |conn| {
            Ok(redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(conn))
        });
        if let Ok(slots) = asked {
            self.know_peers(slots);
        }
    }

    /// [`Server::learn_peers`] for background calls, before `deadline`.
    async fn learn_peers_in_background(&self, deadline: Instant) {
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
        *self.peers.lock().unwrap_or_else(|e| e.into_inner()) = Some(learned);
    }

    /// The `index`-th other node of this server's Cluster, if known.
    fn peer(&self, index: usize) -> Option<String> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.as_ref()?.get(index).cloned()
    }

    /// Forgets a background connection that failed, so the next use reconnects.
    pub(crate) fn drop_background(&self) {
        self.background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    pub(crate) fn error(&self, operation: &str, e: RedisError) -> Error {
        Error::backend(&self.name, operation, e)
    }

    fn failure(&self, operation: &str, e: RedisError) -> Failure {
        if e.redirect_node().is_some() {
            Failure::Redirect(e)
        } else if is_cluster_reply(&e) {
            Failure::Unsettled(self.error(operation, e))
        } else if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
            Failure::Broken(self.error(operation, e))
        } else {
            Failure::Fatal(self.error(operation, e))
        }
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

/// A Cluster node's answer about the slot rather than the request: it
/// lives elsewhere (MOVED, ASK), its keys are mid-migration (TRYAGAIN), or
/// a failed master's slots wait for a replica to take over (CLUSTERDOWN).
fn is_cluster_reply(e: &RedisError) -> bool {
    e.redirect_node().is_some()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown)
        )
}

fn interrupted_by_signal(e: &RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        // redis-rs keeps its cause behind an Arc, which is what source() gives.
        let io = cause.downcast_ref::<std::io::Error>().or_else(|| {
            cause
                .downcast_ref::<Shared>()
                .and_then(|inner| inner.downcast_ref())
        });
        if let Some(io) = io {
            return io.kind() == std::io::ErrorKind::Interrupted;
        }
        source = cause.source();
    }
    false
}

/// What to do when a signal cuts a request short.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnSignal {
    /// Send it again: the request's repetition changes nothing.
    Repeat,
    /// Let the caller decide (it may have taken effect).
    Report,
}

/// Why a request did not produce a value.
pub(crate) enum Failure {
    /// A Cluster node said the slot lives elsewhere (MOVED or ASK).
    Redirect(RedisError),
    /// TRYAGAIN or CLUSTERDOWN: the slot is mid-migration or its master is
    /// being replaced; the same request may succeed shortly.
    Unsettled(Error),
    /// A signal cut it short, with [`OnSignal::Report`].
    Signal,
    /// Never sent: the server could not be connected to.
    Unreachable(Error),
    /// Sent, but the connection failed or went silent before the answer.
    Broken(Error),
    Fatal(Error),
}

/// How many nodes one request may visit (redirects and the seed fallback).
const MAX_HOPS: usize = 5;
/// First pause before repeating a request a Cluster node asked to retry.
const UNSETTLED_PAUSE: Duration = Duration::from_millis(20);

/// The node that serves one lock's hash slot: the URL's server (the seed)
/// until a Cluster node redirects us, then the node it named. All keys of a
/// lock share one hash tag, so one node serves all of them, and this route
/// is all the slot map a lock needs.
///
/// Why not redis-rs's cluster client: it would add dependencies (crc16,
/// rand) to follow what is, for us, one slot per lock; and its connection
/// resends a request on any I/O error (EINTR and read timeouts included),
/// which a release must not do (see [`OnSignal::Report`]), and keeps its
/// timeouts per connection rather than per call.
pub(crate) struct Route {
    seed: Arc<Server>,
    current: Mutex<Arc<Server>>,
}

/// How far one request got: TRYAGAINs waited out, other nodes tried.
#[derive(Default)]
struct Progress {
    unsettled: u32,
    peers_tried: usize,
}

/// What one hop of a request came to, for the route to decide the next.
enum Next {
    /// Send it to this node (after ASKING if `asking`).
    Hop(Arc<Server>, bool),
    /// Send it to the same node again after a pause, unless that would
    /// be too late: then end with the error.
    Pause(Duration, Error),
}

impl Route {
    pub(crate) fn new(server: Arc<Server>) -> Self {
        Route {
            current: Mutex::new(server.clone()),
            seed: server,
        }
    }

    pub(crate) fn server(&self) -> Arc<Server> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_current(&self, server: Arc<Server>) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = server;
    }

    /// Where to go after `server` failed with `failure`, or the error to
    /// end the request with. `resendable`: the request may be sent again
    /// after a failure in mid-request (it changes nothing the second time).
    fn next(
        &self,
        server: &Arc<Server>,
        failure: Failure,
        resendable: bool,
        progress: &mut Progress,
    ) -> Result<Next> {
        match failure {
            Failure::Redirect(e) => {
                let (addr, _slot) = e.redirect_node().expect("a redirect names its node");
                let target = server.redirected(addr)?;
                let asking = e.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                if !asking {
                    self.set_current(target.clone());
                }
                Ok(Next::Hop(target, asking))
            }
            Failure::Unsettled(e) => {
                progress.unsettled += 1;
                Ok(Next::Pause(UNSETTLED_PAUSE * progress.unsettled.min(10), e))
            }
            // The seed itself is gone (it failed over): any other node of
            // its Cluster knows who serves the slot now.
            Failure::Unreachable(e) if Arc::ptr_eq(server, &self.seed) => {
                self.other_node(progress).ok_or(e)
            }
            Failure::Broken(e) if Arc::ptr_eq(server, &self.seed) => match resendable {
                true => self.other_node(progress).ok_or(e),
                false => Err(e),
            },
            // The node may be gone for good (a master failed over): the
            // seed knows who serves the slot now, for this request if it
            // was never sent or can be sent again, for the next one anyway.
            Failure::Unreachable(_) => {
                self.forget(server);
                Ok(Next::Hop(self.seed.clone(), false))
            }
            Failure::Broken(e) => {
                self.forget(server);
                match resendable {
                    true => Ok(Next::Hop(self.seed.clone(), false)),
                    false => Err(e),
                }
            }
            Failure::Signal => unreachable!("handled by the caller"),
            Failure::Fatal(e) => Err(e),
        }
    }

    /// The next node of the seed's Cluster this request has not tried.
    fn other_node(&self, progress: &mut Progress) -> Option<Next> {
        let address = self.seed.peer(progress.peers_tried)?;
        progress.peers_tried += 1;
        let node = self.seed.redirected(&address).ok()?;
        Some(Next::Hop(node, false))
    }

    /// Routes the next request via the seed, unless another one already
    /// moved the route on from `server`.
    fn forget(&self, server: &Arc<Server>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&current, server) {
            *current = self.seed.clone();
        }
    }

    /// Runs `request`, following Cluster redirects; a signal that cuts it
    /// short sends it again.
    pub(crate) fn run<T>(
        &self,
        operation: &str,
        read_timeout: Duration,
        request: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        let value = self.run_or_signal(operation, read_timeout, OnSignal::Repeat, request)?;
        Ok(value.expect("repeated requests never end in a signal"))
    }

    /// Like [`Route::run`], but Ok(None) when a signal cut the request
    /// short, for requests whose repetition could mislead (release) or that
    /// should go back to checking the caller's interrupt first (a wait).
    /// TRYAGAIN and CLUSTERDOWN are waited out for up to `read_timeout`.
    pub(crate) fn run_or_signal<T>(
        &self,
        operation: &str,
        read_timeout: Duration,
        on_signal: OnSignal,
        mut request: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<Option<T>> {
        let give_up_at = Instant::now() + read_timeout;
        let resendable = on_signal == OnSignal::Repeat;
        let (mut server, mut asking) = (self.server(), false);
        let (mut hops, mut progress) = (1, Progress::default());
        loop {
            let outcome = server.run(operation, read_timeout, on_signal, |conn| {
                if asking {
                    redis::cmd("ASKING").query::<()>(conn)?;
                }
                request(conn)
            });
            let failure = match outcome {
                Ok(value) => {
                    self.seed.learn_peers();
                    return Ok(Some(value));
                }
                Err(Failure::Signal) => return Ok(None),
                Err(failure) => failure,
            };
            match self.next(&server, failure, resendable, &mut progress)? {
                Next::Hop(_, _) if hops == MAX_HOPS => {
                    return Err(too_many_hops(&server, operation));
                }
                Next::Hop(target, ask) => {
                    (server, asking, hops) = (target, ask, hops + 1);
                }
                Next::Pause(pause, e) => {
                    if Instant::now() + pause >= give_up_at {
                        return Err(e);
                    }
                    std::thread::sleep(pause);
                }
            }
        }
    }

    /// The background counterpart of [`Route::run`] (refreshes, renewals):
    /// runs `call` on the serving node's multiplexed connection, following
    /// redirects and waiting out TRYAGAIN, all within `limit`. `call` must
    /// be safe to repeat: a node that fails in mid-call is replaced by the
    /// seed, and the call sent again.
    pub(crate) async fn in_background<T, F>(
        &self,
        operation: &str,
        limit: Duration,
        call: impl Fn(Link) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let deadline = Instant::now() + limit;
        let (mut server, mut asking) = (self.server(), false);
        let (mut hops, mut progress) = (1, Progress::default());
        loop {
            let failure = match server
                .in_background(operation, deadline, |conn| call(Link { conn, asking }))
                .await
            {
                Ok(value) => {
                    self.seed.learn_peers_in_background(deadline).await;
                    return Ok(value);
                }
                Err(failure) => failure,
            };
            match self.next(&server, failure, true, &mut progress)? {
                Next::Hop(_, _) if hops == MAX_HOPS => {
                    return Err(too_many_hops(&server, operation));
                }
                // A future polled past its deadline still runs once: no
                // hop may start late and send what the caller gave up on.
                Next::Hop(_, _) if Instant::now() >= deadline => {
                    return Err(Error::backend(&server.name, operation, "no answer in time"));
                }
                Next::Hop(target, ask) => {
                    (server, asking, hops) = (target, ask, hops + 1);
                }
                Next::Pause(pause, e) => {
                    if Instant::now() + pause >= deadline {
                        return Err(e);
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

fn too_many_hops(server: &Server, operation: &str) -> Error {
    Error::backend(
        &server.name,
        operation,
        "no node served the slot after 5 tries (Cluster redirects, unreachable nodes)",
    )
}

/// A background connection as one request's hop sees it: after an ASK
/// redirect every command goes out as ASKING + command in one pipeline,
/// so no other request on the multiplexed connection slips in between.
/// A script invoked through it keeps redis-rs's NOSCRIPT fallback.
pub(crate) struct Link {
    conn: MultiplexedConnection,
    asking: bool,
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if !self.asking {
            return self.conn.req_packed_command(cmd);
        }
        Box::pin(async move {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(cmd.clone());
            let mut values = self.conn.req_packed_commands(&pipe, 1, 1).await?;
            values.pop().ok_or_else(|| {
                RedisError::from((ErrorKind::UnexpectedReturnType, "no reply after ASKING"))
            })
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.conn.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
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
