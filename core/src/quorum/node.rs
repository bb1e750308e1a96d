//! One lock server as the quorum algorithm sees it: dsync's `NetLocker`.
//! Every request answers either Ok (granted or not) or Err (could not ask):
//! a "no" counts against quorum, a failure counts as a node that did not
//! answer, and the two lead to different errors.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, ScriptInvocation};

use crate::error::{Error, Result};
use crate::redis::Server;

/// A request's answer, sendable to the internal runtime.
pub(crate) type Reply<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// Write (exclusive) or read (shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Write,
    Read,
}

/// A node's answer to a grant request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Granted: a write grant's fencing value, 0 for reads.
    Yes(u64),
    No,
    /// Restarted without its data: grants nothing until every lease it may
    /// have forgotten has run out (see `scripts/guard.lua`).
    Recovering,
    /// The name's holders listed other nodes (their fingerprint).
    OtherNodes(String),
}

impl Grant {
    fn from_reply((code, detail): (u8, String)) -> Grant {
        match code {
            1 => Grant::Yes(detail.parse().unwrap_or(0)),
            2 => Grant::Recovering,
            3 => Grant::OtherNodes(detail),
            _ => Grant::No,
        }
    }
}

/// What one attempt asks every node: one uid per attempt, so a late answer
/// to an abandoned attempt can never release a later attempt's grant.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) resource: String,
    pub(crate) uid: String,
    /// The holder's identity: the name of its "writer waiting" mark, the
    /// same across its attempts.
    pub(crate) waiter: String,
    pub(crate) mode: Mode,
    pub(crate) ttl_ms: u64,
    /// How long a waiting writer's mark keeps new readers out.
    pub(crate) waiting_ms: u64,
    /// The client's node list, see `lock.rs`.
    pub(crate) fingerprint: Arc<str>,
}

pub(crate) trait NetLocker: Send + Sync {
    /// `host:port`, for messages.
    fn name(&self) -> &str;
    /// `host:port/db`: what the node-list fingerprint is made of.
    fn address(&self) -> String {
        self.name().to_owned()
    }
    /// A write grant, with this node's fencing value.
    fn lock(self: Arc<Self>, request: Arc<Request>) -> Reply<Grant>;
    /// A read grant (its value is 0).
    fn rlock(self: Arc<Self>, request: Arc<Request>) -> Reply<Grant>;
    /// Gives back a write grant and the waiter's mark; false when the grant
    /// was already gone.
    fn unlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool>;
    /// Gives back a read grant; false when it was already gone.
    fn runlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool>;
    /// Extends a live grant by the request's TTL; false when it is gone.
    fn refresh(self: Arc<Self>, request: Arc<Request>) -> Reply<bool>;
    /// Records `token` as this node's last fencing value while the request's
    /// write grant is live; false when it is gone.
    fn seal(self: Arc<Self>, request: Arc<Request>, token: u64) -> Reply<bool>;
    /// Ends the restart guard of a node found new, not restarted
    /// (`scripts/adopt.lua`); false when the node restarted again since.
    fn adopt(self: Arc<Self>) -> Reply<bool>;
}

/// Grant in the request's mode.
pub(crate) fn acquire(node: Arc<dyn NetLocker>, request: Arc<Request>) -> Reply<Grant> {
    match request.mode {
        Mode::Write => node.lock(request),
        Mode::Read => node.rlock(request),
    }
}

/// Release in the request's mode.
pub(crate) fn release(node: Arc<dyn NetLocker>, request: Arc<Request>) -> Reply<bool> {
    match request.mode {
        Mode::Write => node.unlock(request),
        Mode::Read => node.runlock(request),
    }
}

macro_rules! script {
    ($file:literal) => {
        Script::new(include_str!(concat!("scripts/", $file)))
    };
    (guarded $file:literal) => {
        Script::new(concat!(
            include_str!("scripts/guard.lua"),
            include_str!(concat!("scripts/", $file))
        ))
    };
}

struct Scripts {
    lock: Script,
    rlock: Script,
    unlock: Script,
    runlock: Script,
    refresh: Script,
    seal: Script,
    adopt: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    lock: script!(guarded "lock.lua"),
    rlock: script!(guarded "rlock.lua"),
    unlock: script!(guarded "unlock.lua"),
    runlock: script!(guarded "runlock.lua"),
    refresh: script!(guarded "refresh.lua"),
    seal: script!("seal.lua"),
    adopt: script!("adopt.lua"),
});

/// The node's one fencing counter, shared by every name and never
/// expiring, so that no idle time makes a node forget a sealed token (see
/// the fencing notes in `engine.rs`); one key per node, however many names
/// come and go. No braces: it cannot collide with a name's keys. Nodes are
/// plain servers, so a script may touch it beside a name's hash tag.
const FENCE: &str = "lockyard:rw:fence";

/// The node's restart guard (`scripts/guard.lua`): one per node, never
/// expiring, missing exactly when the node lost its data.
const ALIVE: &str = "lockyard:rw:alive";

/// Keys of one name on one node, all under the name's hash tag.
struct Keys {
    writer: String,
    readers: String,
    waiting: String,
    /// The node-list fingerprint of the name's holders.
    nodes: String,
    /// The name's own fencing key of versions before [`FENCE`]: read (and
    /// raised by a seal) while it lives, so a token sealed there is not
    /// forgotten across the upgrade. It expires by itself.
    legacy_fence: String,
}

impl Keys {
    fn new(resource: &str) -> Keys {
        let base = format!("lockyard:{{{resource}}}:rw");
        Keys {
            writer: format!("{base}:writer"),
            readers: format!("{base}:readers"),
            waiting: format!("{base}:waiting"),
            nodes: format!("{base}:nodes"),
            legacy_fence: format!("{base}:fence"),
        }
    }
}

/// A plain Redis server (not a Cluster) as a lock node, over the process's
/// one multiplexed connection to it.
pub(crate) struct RedisNode {
    server: Arc<Server>,
    /// Longest a request may take before its connection counts as dead.
    request_timeout: Duration,
}

impl RedisNode {
    pub(crate) fn new(server: Arc<Server>, request_timeout: Duration) -> Self {
        RedisNode {
            server,
            request_timeout,
        }
    }

    /// Runs a script, once more on a fresh connection if the connection
    /// broke: a node that restarted leaves a dead pooled connection behind,
    /// and every script here may be repeated (a repeated grant finds its own
    /// uid and is granted again). A connection that went silent is dropped
    /// too, so the next request (a retry of an unlock, say) reconnects
    /// rather than queueing behind it.
    fn run<T: redis::FromRedisValue + Send + 'static>(
        self: Arc<Self>,
        operation: &'static str,
        script: &'static Script,
        prepare: impl Fn(&mut ScriptInvocation<'static>) + Send + 'static,
    ) -> Reply<T> {
        Box::pin(async move {
            let mut invocation = script.prepare_invoke();
            prepare(&mut invocation);
            match self.invoke(operation, &invocation).await {
                Err(Failed::Broken(_)) => self.invoke(operation, &invocation).await,
                outcome => outcome,
            }
            .map_err(|(Failed::Broken(e) | Failed::Other(e))| e)
        })
    }

    async fn invoke<T: redis::FromRedisValue>(
        &self,
        operation: &str,
        invocation: &ScriptInvocation<'static>,
    ) -> std::result::Result<T, Failed> {
        let mut conn = self.server.background().await.map_err(Failed::Other)?;
        let call = invocation.invoke_async(&mut conn);
        // Given up on, by this timeout or by the caller's of the same length
        // (which may end first and drop this future), a call leaves its
        // connection silent under it: either way it is dropped here.
        let unanswered = Unanswered(&self.server);
        let Ok(outcome) = tokio::time::timeout(self.request_timeout, call).await else {
            let silent = format!("no answer within {:?}", self.request_timeout);
            return Err(Failed::Other(Error::backend_transient(
                &self.server.name,
                operation,
                silent,
            )));
        };
        std::mem::forget(unanswered);
        outcome.map_err(|e| {
            let broken = e.is_connection_dropped() || e.is_io_error();
            if broken || e.is_timeout() {
                self.server.drop_background();
            }
            let error = self.server.error(operation, e);
            if broken {
                Failed::Broken(error)
            } else {
                Failed::Other(error)
            }
        })
    }
}

/// Drops the server's pooled connection unless forgotten: a request that
/// got no answer leaves it silent, and the next one must reconnect rather
/// than queue behind it (a retry of an unlock the node missed, say).
struct Unanswered<'a>(&'a Server);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        self.0.drop_background();
    }
}

/// Why a request failed: `Broken` when the connection broke under it.
enum Failed {
    Broken(Error),
    Other(Error),
}

impl NetLocker for RedisNode {
    fn name(&self) -> &str {
        &self.server.name
    }

    fn address(&self) -> String {
        self.server.address()
    }

    fn lock(self: Arc<Self>, request: Arc<Request>) -> Reply<Grant> {
        let reply = self.run("lock", &SCRIPTS.lock, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.readers).key(keys.waiting);
            call.key(FENCE)
                .key(keys.legacy_fence)
                .key(ALIVE)
                .key(keys.nodes);
            call.arg(&request.uid).arg(&request.waiter);
            call.arg(request.ttl_ms).arg(request.waiting_ms);
            call.arg(&*request.fingerprint);
        });
        Box::pin(async move { Ok(Grant::from_reply(reply.await?)) })
    }

    fn rlock(self: Arc<Self>, request: Arc<Request>) -> Reply<Grant> {
        let reply = self.run("rlock", &SCRIPTS.rlock, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.readers).key(keys.waiting);
            call.key(ALIVE).key(keys.nodes);
            call.arg(&request.uid).arg(request.ttl_ms);
            call.arg(&*request.fingerprint);
        });
        Box::pin(async move { Ok(Grant::from_reply(reply.await?)) })
    }

    fn unlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.run("unlock", &SCRIPTS.unlock, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.waiting);
            call.key(keys.readers).key(keys.nodes);
            call.arg(&request.uid).arg(&request.waiter);
        })
    }

    fn runlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.run("runlock", &SCRIPTS.runlock, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.readers).key(keys.writer).key(keys.nodes);
            call.arg(&request.uid);
        })
    }

    fn refresh(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.run("refresh", &SCRIPTS.refresh, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.readers);
            call.key(ALIVE).key(keys.nodes);
            call.arg(&request.uid).arg(request.ttl_ms);
            call.arg(match request.mode {
                Mode::Write => "write",
                Mode::Read => "read",
            });
        })
    }

    fn seal(self: Arc<Self>, request: Arc<Request>, token: u64) -> Reply<bool> {
        self.run("seal", &SCRIPTS.seal, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(FENCE).key(keys.legacy_fence);
            call.arg(&request.uid).arg(token);
        })
    }

    fn adopt(self: Arc<Self>) -> Reply<bool> {
        self.run("adopt", &SCRIPTS.adopt, |call| {
            call.key(ALIVE);
        })
    }
}
