//! The way to the node that serves one lock's keys: Cluster redirects
//! followed, TRYAGAIN waited out, a failed-over node replaced (a Cluster
//! node, or the master behind Sentinel), for callers' requests and for
//! background refreshes alike.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use super::caller::{Caller, LEAST_TIME};
use super::failure::{Failure, OnSignal};
use super::server::{Channel, NodeConnection, Server};
use crate::error::{Error, Result};
use crate::runtime;

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

/// How far one request got: TRYAGAINs waited out, other nodes tried, the
/// sentinels asked again.
#[derive(Default)]
struct Progress {
    unsettled: u32,
    peers_tried: usize,
    rediscovered: bool,
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

    /// Learns the seed's Cluster peers if it has not yet, as every
    /// background call along this route does (see [`Route::call`]): for a
    /// call made outside the route, such as a pipeline of refreshes.
    pub(crate) async fn learn_peers_in_background(&self, deadline: Instant) {
        self.seed.learn_peers_in_background(deadline).await;
    }

    /// Whether `self` and `other` start from the same seed.
    pub(crate) fn same_seed(&self, other: &Route) -> bool {
        Arc::ptr_eq(&self.seed, &other.seed)
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
            // its Cluster knows who serves the slot now; behind Sentinel,
            // the sentinels know the new master.
            Failure::Unreachable(e) if Arc::ptr_eq(server, &self.seed) => self
                .other_node(progress)
                .or_else(|| self.rediscover(progress))
                .ok_or(e),
            Failure::Broken(e) if Arc::ptr_eq(server, &self.seed) => match resendable {
                true => self
                    .other_node(progress)
                    .or_else(|| self.rediscover(progress))
                    .ok_or(e),
                false => Err(e),
            },
            // A replica refused a write before making it: safe to send on.
            Failure::ReadOnly(e) => self.rediscover(progress).ok_or(e),
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
            Failure::Signal | Failure::Interrupted | Failure::Late => {
                unreachable!("handled by the caller")
            }
            Failure::Fatal(e) => Err(e),
        }
    }

    /// Behind Sentinel, the seed once more: the server forgot the master
    /// that failed, so it asks the sentinels for the new one. Once per
    /// request: a failover still under way is not waited out here.
    fn rediscover(&self, progress: &mut Progress) -> Option<Next> {
        if !self.seed.follows_sentinels() || progress.rediscovered {
            return None;
        }
        progress.rediscovered = true;
        Some(Next::Hop(self.seed.clone(), false))
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
    /// short sends it again. For requests no caller's deadline or interrupt
    /// bounds (releases, status reads): see [`Route::run_for`].
    pub(crate) fn run<T>(
        &self,
        operation: &str,
        read_timeout: Duration,
        request: impl FnMut(&mut NodeConnection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_for(&Caller::patient(), operation, read_timeout, request)
    }

    /// [`Route::run`] for `caller`: an interrupt ends it with
    /// [`Error::Interrupted`], and an answer still missing at the caller's
    /// deadline with [`Error::Timeout`] (the request may have taken effect).
    pub(crate) fn run_for<T>(
        &self,
        caller: &Caller,
        operation: &str,
        read_timeout: Duration,
        request: impl FnMut(&mut NodeConnection) -> RedisResult<T>,
    ) -> Result<T> {
        let value =
            self.run_or_signal(caller, operation, read_timeout, OnSignal::Repeat, request)?;
        Ok(value.expect("repeated requests never end in a signal"))
    }

    /// Like [`Route::run_for`], but Ok(None) when a signal cut the request
    /// short, for requests whose repetition could mislead (release) or that
    /// should go back to checking the caller's interrupt first (a wait).
    /// TRYAGAIN and CLUSTERDOWN are waited out for up to `read_timeout`.
    pub(crate) fn run_or_signal<T>(
        &self,
        caller: &Caller,
        operation: &str,
        read_timeout: Duration,
        on_signal: OnSignal,
        mut request: impl FnMut(&mut NodeConnection) -> RedisResult<T>,
    ) -> Result<Option<T>> {
        let started = Instant::now();
        let give_up_at = started + read_timeout;
        let resendable = on_signal == OnSignal::Repeat;
        let (mut server, mut asking) = (self.server(), false);
        let (mut hops, mut progress) = (1, Progress::default());
        loop {
            let outcome = server.run(operation, read_timeout, caller, on_signal, |conn| {
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
                Err(Failure::Interrupted) => {
                    return Err(Error::Interrupted(format!(
                        "{operation} on {}",
                        server.name
                    )));
                }
                Err(Failure::Late) => return Err(late(&server, operation, started)),
                Err(failure) => failure,
            };
            match self.next(&server, failure, resendable, &mut progress)? {
                Next::Hop(_, _) if hops == MAX_HOPS => {
                    return Err(too_many_hops(&server, operation));
                }
                Next::Hop(_, _) if caller.is_late() => {
                    return Err(late(&server, operation, started));
                }
                Next::Hop(target, ask) => {
                    (server, asking, hops) = (target, ask, hops + 1);
                }
                Next::Pause(pause, e) => {
                    if Instant::now() + pause >= give_up_at || caller.is_late() {
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
        self.call(Channel::Background, operation, deadline, true, call)
            .await
    }

    /// The async caller's counterpart of [`Route::run_for`]: runs `call`
    /// on the calling task's runtime, over the connection its concurrent
    /// calls share, like [`Route::in_background`], within `limit` cut to
    /// the caller's `give_up_at` (but never under [`LEAST_TIME`]). An
    /// answer still missing at the caller's deadline is [`Error::Timeout`]
    /// (the request may have taken effect). `resendable`: the call may be
    /// sent again after a failure in mid-call (a release may not: its
    /// second answer would misreport the first; it takes a connection of
    /// its own). For requests answered at once; a blocking read goes by
    /// [`Route::blocking_for_task`].
    pub(crate) async fn for_task<T, F>(
        &self,
        give_up_at: Option<Instant>,
        operation: &str,
        limit: Duration,
        resendable: bool,
        call: impl Fn(Link) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        // A call that may not be sent twice goes alone: a shared connection
        // that broke may have carried it, an idle pooled one cannot have.
        let channel = match resendable {
            true => Channel::Caller,
            false => Channel::CallerAlone,
        };
        self.in_task(channel, give_up_at, operation, limit, resendable, call)
            .await
    }

    /// [`Route::for_task`] for a read that blocks on the server (BLPOP,
    /// XREAD BLOCK), on a connection it uses alone meanwhile.
    pub(crate) async fn blocking_for_task<T, F>(
        &self,
        give_up_at: Option<Instant>,
        operation: &str,
        limit: Duration,
        call: impl Fn(Link) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let channel = Channel::CallerAlone;
        self.in_task(channel, give_up_at, operation, limit, true, call)
            .await
    }

    async fn in_task<T, F>(
        &self,
        channel: Channel,
        give_up_at: Option<Instant>,
        operation: &str,
        limit: Duration,
        resendable: bool,
        call: impl Fn(Link) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        runtime::check_on_tokio(operation, &self.server().name)?;
        let started = Instant::now();
        let read_timeout = Caller::new(give_up_at, &|| false).read_timeout(limit, LEAST_TIME);
        // Boxed: a waiting task's future is as large as its largest await,
        // and a thousand of them wait mostly elsewhere.
        let deadline = started + read_timeout;
        let called = Box::pin(self.call(channel, operation, deadline, resendable, call));
        match called.await {
            Err(e) if e.is_transient() && give_up_at.is_some_and(|at| Instant::now() >= at) => {
                Err(late(&self.server(), operation, started))
            }
            outcome => outcome,
        }
    }

    async fn call<T, F>(
        &self,
        channel: Channel,
        operation: &str,
        deadline: Instant,
        resendable: bool,
        call: impl Fn(Link) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let (mut server, mut asking) = (self.server(), false);
        let (mut hops, mut progress) = (1, Progress::default());
        loop {
            let failure = match server
                .call(channel, operation, deadline, |conn, fence_base| {
                    call(Link {
                        conn,
                        asking,
                        fence_base,
                    })
                })
                .await
            {
                Ok(value) => {
                    // Learned on lockyard's runtime only: the connection
                    // it asks on must not be made on a caller's runtime.
                    if channel == Channel::Background {
                        self.seed.learn_peers_in_background(deadline).await;
                    }
                    return Ok(value);
                }
                Err(failure) => failure,
            };
            match self.next(&server, failure, resendable, &mut progress)? {
                Next::Hop(_, _) if hops == MAX_HOPS => {
                    return Err(too_many_hops(&server, operation));
                }
                // A future polled past its deadline still runs once: no
                // hop may start late and send what the caller gave up on.
                Next::Hop(_, _) if Instant::now() >= deadline => {
                    return Err(Error::backend_transient(
                        &server.name,
                        operation,
                        "no answer in time",
                    ));
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

/// No answer before the caller's deadline.
fn late(server: &Server, operation: &str, started: Instant) -> Error {
    Error::Timeout {
        what: format!("an answer to {operation} from {}", server.name),
        waited: started.elapsed(),
    }
}

fn too_many_hops(server: &Server, operation: &str) -> Error {
    // The Cluster is mid-reshard or mid-failover: it settles on its own.
    Error::backend_transient(
        &server.name,
        operation,
        "no node served the slot after 5 tries (Cluster redirects, unreachable nodes)",
    )
}

/// A background connection as one request's hop sees it: after an ASK
/// redirect every command goes out as ASKING + command in one pipeline,
/// so no other request on the multiplexed connection slips in between.
/// A script invoked through it keeps redis-rs's NOSCRIPT fallback.
#[derive(Clone)]
pub(crate) struct Link {
    conn: MultiplexedConnection,
    asking: bool,
    fence_base: u64,
}

impl Link {
    /// See [`NodeConnection::fence_base`].
    pub(crate) fn fence_base(&self) -> u64 {
        self.fence_base
    }
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
