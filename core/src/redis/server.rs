//! Connections to one Redis server. Callers' requests run on the calling
//! thread over pooled blocking connections (no thread hop on the hot path);
//! async callers' requests run on their own runtime over async
//! connections made on it (see [`Channel::Caller`]); background refreshes
//! use one multiplexed async connection per server. All are per process: a
//! forked child never writes to a socket it inherited from its parent. A
//! server behind Redis Sentinel follows its master through failovers (see
//! [`super::sentinel`]).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, RedisError, RedisResult};

use super::caller::Caller;
use super::client::{install_tls_provider, without_lib_name};
use super::failure::{interrupted_by_signal, is_cluster_reply, Failure, OnSignal};
use super::sentinel::{Discovery, Node, Sentinels};
use crate::error::{Error, Result};

mod peers;
mod registry;
mod round_trip;
mod shared;
mod target;
mod wakes;

pub(crate) use registry::server;
use round_trip::RoundTrip;
use shared::{Shared, SharedByRuntime};
pub(crate) use target::NodeConnection;
use target::Target;
use wakes::Wakes;
pub(crate) use wakes::{Ear, Heard};

const MAX_IDLE: usize = 16;

/// Which connection an async call runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// The server's one multiplexed connection on lockyard's runtime:
    /// refreshes, renewals, give-ups left to the background.
    Background,
    /// The calling task's runtime's one multiplexed connection, which its
    /// concurrent calls share: for requests answered at once.
    Caller,
    /// A connection of the calling task's runtime used by one call at a
    /// time, so that a blocking read on it (BLPOP, XREAD BLOCK) blocks
    /// nobody else.
    CallerAlone,
}

/// An async caller's idle connection and the runtime that drives it.
struct AsyncIdle {
    runtime: tokio::runtime::Id,
    node: Arc<Node>,
    conn: MultiplexedConnection,
}

/// Signals in a row after which a request gives up.
const MAX_INTERRUPTIONS: u32 = 100;

/// How long a single command may take before the server counts as unreachable.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct Server {
    target: Target,
    /// `host:port` or the socket path (`master@sentinel,…` behind
    /// Sentinel), for error messages.
    pub(crate) name: String,
    connect_timeout: Duration,
    idle: Mutex<(u32, Vec<NodeConnection>)>,
    background: Mutex<Option<(u32, Arc<Node>, MultiplexedConnection)>>,
    /// Idle connections of async callers' blocking reads, each on the
    /// runtime it was made on.
    async_idle: Mutex<(u32, Vec<AsyncIdle>)>,
    /// Async callers' shared connections, one per runtime.
    shared: SharedByRuntime,
    /// The other nodes of this server's Cluster (`host:port`), learned once
    /// while it answers, so that a route can still find its slot after this
    /// node itself failed over; empty when it is not in a Cluster.
    peers: OnceLock<Vec<String>>,
    /// How far a caller's deadline may cut this server's requests short.
    round_trip: RoundTrip,
    /// Async waiters' shared BLPOPs.
    wakes: Wakes,
}

impl Server {
    fn new(client: Client, connect_timeout: Duration) -> Self {
        let client = without_lib_name(client);
        if matches!(
            client.get_connection_info().addr(),
            ConnectionAddr::TcpTls { .. }
        ) {
            install_tls_provider();
        }
        let name = client.get_connection_info().addr().to_string();
        Server::with(
            Target::Fixed(Arc::new(Node::fixed(client))),
            name,
            connect_timeout,
        )
    }

    fn following(sentinels: Sentinels, connect_timeout: Duration) -> Self {
        if sentinels.tls() {
            install_tls_provider();
        }
        let name = sentinels.name();
        let discovery = Discovery::new(sentinels, connect_timeout);
        Server::with(Target::Sentinel(Arc::new(discovery)), name, connect_timeout)
    }

    fn with(target: Target, name: String, connect_timeout: Duration) -> Self {
        Server {
            target,
            name,
            connect_timeout,
            idle: Mutex::new((crate::pid::current(), Vec::new())),
            background: Mutex::new(None),
            async_idle: Mutex::new((crate::pid::current(), Vec::new())),
            shared: SharedByRuntime::default(),
            peers: OnceLock::new(),
            round_trip: RoundTrip::default(),
            wakes: Wakes::default(),
        }
    }

    /// `host:port/db`: which data set this URL reaches, however written.
    /// (The quorum lock, its only user, refuses Sentinel URLs.)
    #[cfg(feature = "quorum")]
    pub(crate) fn address(&self) -> String {
        match &self.target {
            Target::Fixed(node) => {
                let info = node.client.get_connection_info();
                format!("{}/{}", info.addr(), info.redis_settings().db())
            }
            Target::Sentinel(_) => self.name.clone(),
        }
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
        let Target::Fixed(node) = &self.target else {
            return Err(Error::backend(
                &self.name,
                "redirect",
                format!("a Sentinel-managed master sent a Cluster redirect to {addr}"),
            ));
        };
        let info = node.client.get_connection_info().clone();
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
        let mut servers = registry::servers();
        let server = servers
            .entry(key)
            .or_insert_with(|| Arc::new(Server::new(client, self.connect_timeout)));
        Ok(server.clone())
    }

    /// A pooled connection (true), or a new one; connecting is cut to the
    /// caller's deadline and ended by its interrupt. `after_stale`: a
    /// pooled one just turned out dead, and may have carried the request.
    fn checkout(
        &self,
        caller: &Caller,
        after_stale: bool,
    ) -> std::result::Result<(NodeConnection, bool), Failure> {
        let mut pooled = None;
        {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let pid = crate::pid::current();
            if idle.0 != pid {
                // Inherited from the parent: closing our copies is harmless to it.
                *idle = (pid, Vec::new());
            }
            while let Some(conn) = idle.1.pop() {
                if self.is_current(&conn.node) {
                    pooled = Some(conn);
                    break;
                }
                // A connection to a master that failed over closes here.
            }
        }
        // Asked outside the pool's lock: it may ask the sentinels.
        if let Some(conn) = pooled.filter(|conn| self.still_master(&conn.node, caller.give_up_at()))
        {
            return Ok((conn, true));
        }
        // No master found: asking the sentinels again at once would only
        // double the wait for the same answer.
        let node = self
            .node(caller.give_up_at())
            .map_err(|e| match caller.is_late() {
                true => Failure::Late,
                false => Failure::Fatal(e),
            })?;
        let unreachable = |e| match after_stale {
            // The dead connection may have carried the request after all.
            true => Failure::Broken(self.error("connect", e)),
            false => Failure::Unreachable(self.error("connect", e)),
        };
        let mut interruptions = 0;
        let conn = loop {
            let started = Instant::now();
            let timeout = caller.read_timeout(self.connect_timeout, self.round_trip.least_time());
            match node.client.get_connection_with_timeout(timeout) {
                Ok(conn) => {
                    self.round_trip.took_first(started.elapsed());
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
                Err(e) => {
                    self.forget(&node);
                    return Err(unreachable(e));
                }
            }
        };
        conn.set_write_timeout(Some(COMMAND_TIMEOUT))
            .map_err(unreachable)?;
        Ok((NodeConnection::new(conn, node), false))
    }

    fn checkin(&self, conn: NodeConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.0 == crate::pid::current() && idle.1.len() < MAX_IDLE && self.is_current(&conn.node)
        {
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
        mut request: impl FnMut(&mut NodeConnection) -> RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        let mut stale_retried = false;
        let mut interruptions = 0;
        loop {
            let (mut conn, pooled) = self.checkout(caller, stale_retried)?;
            conn.set_read_timeout(caller.read_timeout(read_timeout, self.round_trip.least_time()))
                .map_err(|e| Failure::Fatal(self.error(operation, e)))?;
            let sent = Instant::now();
            match request(&mut conn) {
                Ok(value) => {
                    // A request allowed more than the command timeout blocks
                    // on the server by design (BLPOP, XREAD): its time is
                    // not a round trip.
                    if read_timeout <= COMMAND_TIMEOUT {
                        self.round_trip.took(sent.elapsed());
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
                    // The node restarted or the master died: its other
                    // pooled connections are as dead, and the one retry
                    // must not be spent on one of them.
                    self.forget_idle_connections(&conn.node);
                    self.forget(&conn.node);
                    stale_retried = true;
                }
                Err(e) => {
                    let failure = Failure::of(&self.name, operation, e);
                    if matches!(failure, Failure::Broken(_) | Failure::ReadOnly(_)) {
                        self.forget(&conn.node);
                    }
                    return Err(failure);
                }
            }
            if caller.is_late() {
                return Err(Failure::Late);
            }
        }
    }

    /// The connection background refreshes use, created on first need.
    pub(crate) async fn background(&self) -> Result<MultiplexedConnection> {
        Ok(self.background_node().await?.1)
    }

    /// [`Server::background`], and the node it reaches.
    async fn background_node(&self) -> Result<(Arc<Node>, MultiplexedConnection)> {
        let pid = crate::pid::current();
        let cached = self
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|(owner, node, _)| *owner == pid && self.is_current(node))
            .map(|(_, node, conn)| (node.clone(), conn.clone()));
        if let Some((node, conn)) = cached {
            if self.still_master_in_background(&node).await {
                return Ok((node, conn));
            }
        }
        let node = self.node_in_background().await?;
        let conn = self.connect_async(&node, Some(COMMAND_TIMEOUT)).await?;
        *self.background.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((pid, node.clone(), conn.clone()));
        Ok((node, conn))
    }

    /// Runs `call` on a connection of `channel`, giving up at `deadline`.
    /// A call that fails or runs out of time drops the connection, so the
    /// next one (the caller's retry) starts on a fresh one: a connection gone
    /// silent must not cost every later call its whole timeout too. A
    /// Cluster reply (a redirect, TRYAGAIN) leaves it: it answered.
    pub(crate) async fn call<T, F>(
        &self,
        channel: Channel,
        operation: &str,
        deadline: Instant,
        call: impl Fn(MultiplexedConnection, u64) -> F,
    ) -> std::result::Result<T, Failure>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        // The shared connection this call used, to forget if it failed.
        let mut used: Option<Shared> = None;
        let outcome = tokio::time::timeout_at(deadline.into(), async {
            let mut stale_replaced = false;
            loop {
                let (node, conn, pooled) = match channel {
                    Channel::Background => self.background_node().await.map(|(n, c)| (n, c, false)),
                    Channel::Caller => self.shared_connection(stale_replaced).await.map(
                        |(node, conn, shared, existed)| {
                            used = Some(shared);
                            (node, conn, existed)
                        },
                    ),
                    Channel::CallerAlone => self.caller_connection(!stale_replaced).await,
                }
                .map_err(Failure::Unreachable)?;
                match call(conn.clone(), node.fence_base).await {
                    Ok(value) => return Ok((value, node, conn)),
                    // A pooled caller's connection the server closed while
                    // it was idle (a restart, its `timeout`, a proxy) is
                    // replaced once, as the blocking pool does: its driver
                    // had ended, so it never carried the request.
                    Err(e) if pooled && !stale_replaced && e.is_connection_dropped() => {
                        // The master may have died: behind Sentinel, ask again.
                        self.forget(&node);
                        self.forget_caller_connections(&node);
                        stale_replaced = true;
                    }
                    Err(e) => return Err(Failure::of(&self.name, operation, e)),
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(Failure::Broken(Error::backend_transient(
                &self.name,
                operation,
                "no answer in time",
            )))
        });
        match outcome {
            Ok((value, node, conn)) => {
                if channel == Channel::CallerAlone {
                    self.keep_caller_connection(node, conn);
                }
                Ok(value)
            }
            Err(failure) => {
                let dead = matches!(
                    failure,
                    Failure::Unreachable(_)
                        | Failure::Broken(_)
                        | Failure::ReadOnly(_)
                        | Failure::Fatal(_)
                );
                match channel {
                    Channel::Background if dead => self.drop_background(),
                    Channel::Caller if dead => {
                        if let Some(shared) = &used {
                            self.forget_shared(shared);
                        }
                    }
                    _ => {}
                }
                Err(failure)
            }
        }
    }

    /// An idle connection of this process on the calling task's runtime,
    /// or a new one made there: its I/O then runs on the caller's runtime,
    /// and a connection made on a runtime since shut down is never used.
    async fn caller_connection(
        &self,
        from_pool: bool,
    ) -> Result<(Arc<Node>, MultiplexedConnection, bool)> {
        let runtime = tokio::runtime::Handle::current().id();
        let pooled = if !from_pool {
            None
        } else {
            let mut idle = self.async_idle.lock().unwrap_or_else(|e| e.into_inner());
            let pid = crate::pid::current();
            if idle.0 != pid {
                // Inherited from the parent: dropping them would wake their
                // drivers on the parent's runtime, which has no thread here.
                std::mem::forget(std::mem::replace(&mut *idle, (pid, Vec::new())));
            }
            let found = idle.1.iter().rposition(|c| c.runtime == runtime);
            found.map(|at| idle.1.remove(at))
        };
        if let Some(pooled) = pooled {
            if self.is_current(&pooled.node) && self.still_master_in_background(&pooled.node).await
            {
                return Ok((pooled.node, pooled.conn, true));
            }
        }
        let node = self.node_in_background().await?;
        // No response timeout of its own: each call's deadline bounds it,
        // and a BLPOP may rightly block longer than any fixed one.
        let conn = self.connect_async(&node, None).await?;
        Ok((node, conn, false))
    }

    /// A pooled blocking connection to `node` turned out closed: the others
    /// idle beside it most likely are too (the server restarted), and go.
    fn forget_idle_connections(&self, node: &Arc<Node>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.1.retain(|c| !Arc::ptr_eq(&c.node, node));
    }

    /// [`Server::forget_idle_connections`] for the async callers' pool.
    fn forget_caller_connections(&self, node: &Arc<Node>) {
        let mut idle = self.async_idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.1.retain(|c| !Arc::ptr_eq(&c.node, node));
    }

    /// A new multiplexed connection to `node`, driven by the calling task's
    /// runtime; a node that cannot be reached is forgotten.
    async fn connect_async(
        &self,
        node: &Arc<Node>,
        response_timeout: Option<Duration>,
    ) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(response_timeout);
        // Boxed: connecting is rare, and its future (2 KB) would otherwise
        // be part of every call's, a thousand of which may be in flight.
        Box::pin(
            node.client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|e| {
            self.forget(node);
            self.error("connect", e)
        })
    }

    /// Returns a caller's connection that answered to the idle pool. The
    /// pool keeps the newest [`MAX_IDLE`]: those of a runtime that ended
    /// (its connections closed with it) age out as others come back.
    fn keep_caller_connection(&self, node: Arc<Node>, conn: MultiplexedConnection) {
        let runtime = tokio::runtime::Handle::current().id();
        let mut idle = self.async_idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.0 != crate::pid::current() || !self.is_current(&node) {
            return;
        }
        if idle.1.len() == MAX_IDLE {
            idle.1.remove(0);
        }
        idle.1.push(AsyncIdle {
            runtime,
            node,
            conn,
        });
    }

    /// Forgets a background connection that failed, so the next use
    /// reconnects (behind Sentinel, to the master the sentinels name then).
    pub(crate) fn drop_background(&self) {
        let dropped = self
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((_, node, _)) = dropped {
            self.forget(&node);
        }
    }

    pub(crate) fn error(&self, operation: &str, e: RedisError) -> Error {
        Error::redis(&self.name, operation, e)
    }
}
