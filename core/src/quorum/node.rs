//! One lock server as the quorum algorithm sees it: dsync's `NetLocker`.
//! Every request answers either Ok (granted or not) or Err (could not ask):
//! a "no" counts against quorum, a failure counts as a node that did not
//! answer, and the two lead to different errors.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};

use redis::{Script, ScriptInvocation};

use crate::error::Result;
use crate::redis::Server;

/// A request's answer, sendable to the internal runtime.
pub(crate) type Reply<T> = Pin<Box<dyn Future<Output = Result<T>> + Send>>;

/// Write (exclusive) or read (shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Write,
    Read,
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
}

pub(crate) trait NetLocker: Send + Sync {
    /// `host:port`, for messages.
    fn name(&self) -> &str;
    /// A write grant: Some(this node's fencing value) or None when denied.
    fn lock(self: Arc<Self>, request: Arc<Request>) -> Reply<Option<u64>>;
    /// A read grant: true when granted.
    fn rlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool>;
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
}

/// Grant in the request's mode: Some(fencing value, 0 for reads) or None.
pub(crate) fn acquire(node: Arc<dyn NetLocker>, request: Arc<Request>) -> Reply<Option<u64>> {
    match request.mode {
        Mode::Write => node.lock(request),
        Mode::Read => {
            let granted = node.rlock(request);
            Box::pin(async move { Ok(granted.await?.then_some(0)) })
        }
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
}

struct Scripts {
    lock: Script,
    rlock: Script,
    unlock: Script,
    runlock: Script,
    refresh: Script,
    seal: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    lock: script!("lock.lua"),
    rlock: script!("rlock.lua"),
    unlock: script!("unlock.lua"),
    runlock: script!("runlock.lua"),
    refresh: script!("refresh.lua"),
    seal: script!("seal.lua"),
});

/// The node's one fencing counter, shared by every name and never
/// expiring, so that no idle time makes a node forget a sealed token (see
/// the fencing notes in `rw_lock.rs`); one key per node, however many names
/// come and go. No braces: it cannot collide with a name's keys. Nodes are
/// plain servers, so a script may touch it beside a name's hash tag.
const FENCE: &str = "lockyard:rw:fence";

/// Keys of one name on one node, all under the name's hash tag.
struct Keys {
    writer: String,
    readers: String,
    waiting: String,
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
            legacy_fence: format!("{base}:fence"),
        }
    }
}

/// A plain Redis server (not a Cluster) as a lock node, over the process's
/// one multiplexed connection to it.
pub(crate) struct RedisNode {
    server: Arc<Server>,
}

impl RedisNode {
    pub(crate) fn new(server: Arc<Server>) -> Self {
        RedisNode { server }
    }

    fn run<T: redis::FromRedisValue + Send + 'static>(
        self: Arc<Self>,
        operation: &'static str,
        script: &'static Script,
        prepare: impl FnOnce(&mut ScriptInvocation<'static>) + Send + 'static,
    ) -> Reply<T> {
        Box::pin(async move {
            let mut conn = self.server.background().await?;
            let mut invocation = script.prepare_invoke();
            prepare(&mut invocation);
            invocation.invoke_async(&mut conn).await.map_err(|e| {
                if e.is_connection_dropped() || e.is_io_error() || e.is_timeout() {
                    self.server.drop_background();
                }
                self.server.error(operation, e)
            })
        })
    }
}

impl NetLocker for RedisNode {
    fn name(&self) -> &str {
        &self.server.name
    }

    fn lock(self: Arc<Self>, request: Arc<Request>) -> Reply<Option<u64>> {
        let reply: Reply<Vec<u64>> = self.run("lock", &SCRIPTS.lock, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.readers).key(keys.waiting);
            call.key(FENCE).key(keys.legacy_fence);
            call.arg(&request.uid).arg(&request.waiter);
            call.arg(request.ttl_ms).arg(request.waiting_ms);
        });
        Box::pin(async move {
            match reply.await?[..] {
                [1, fence] => Ok(Some(fence)),
                _ => Ok(None),
            }
        })
    }

    fn rlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.run("rlock", &SCRIPTS.rlock, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.readers).key(keys.waiting);
            call.arg(&request.uid).arg(request.ttl_ms);
        })
    }

    fn unlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.run("unlock", &SCRIPTS.unlock, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.waiting);
            call.arg(&request.uid).arg(&request.waiter);
        })
    }

    fn runlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.run("runlock", &SCRIPTS.runlock, move |call| {
            call.key(Keys::new(&request.resource).readers)
                .arg(&request.uid);
        })
    }

    fn refresh(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.run("refresh", &SCRIPTS.refresh, move |call| {
            let keys = Keys::new(&request.resource);
            call.key(keys.writer).key(keys.readers).arg(&request.uid);
            call.arg(request.ttl_ms).arg(match request.mode {
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
}
