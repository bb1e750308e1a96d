//! What [`NoGvl::nonblocking`](super::NoGvl::nonblocking) lets a binding
//! reach while it keeps the GVL: the local state of a core object (flags,
//! ids, tokens, settings), never a method that may ask the server. A
//! [`Local`] view forwards only the core methods documented to touch no
//! server, one `impl` per core type below, so asking Redis with the GVL
//! held (`lock.locked()`, `session.destroy()`) does not compile: such a
//! call has to go through `blocking`. Add a method here only if its core
//! documentation says it reads a flag, the clock or settings.

use std::time::Duration;

use lockyard::{gcs, quorum, redis};

/// A core object seen by a call that keeps the GVL: only the methods below.
pub(crate) struct Local<'a, T>(&'a T);

impl<'a, T> Local<'a, T> {
    /// Only `NoGvl` hands out views, of the object it keeps.
    pub(super) fn new(inner: &'a T) -> Self {
        Local(inner)
    }
}

impl Local<'_, redis::Lock> {
    pub(crate) fn healthy(&self) -> bool {
        self.0.healthy()
    }
    pub(crate) fn check_health(&self) -> lockyard::Result<()> {
        self.0.check_health()
    }
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.0.fencing_token()
    }
    pub(crate) fn identity(&self) -> String {
        self.0.identity()
    }
    pub(crate) fn default_timeout(&self) -> Option<Duration> {
        self.0.default_timeout()
    }
}

impl Local<'_, redis::Session> {
    pub(crate) fn healthy(&self) -> bool {
        self.0.healthy()
    }
    pub(crate) fn check_health(&self) -> lockyard::Result<()> {
        self.0.check_health()
    }
    pub(crate) fn id(&self) -> &str {
        self.0.id()
    }
    pub(crate) fn ttl(&self) -> Duration {
        self.0.ttl()
    }
    pub(crate) fn lock_delay(&self) -> Duration {
        self.0.lock_delay()
    }
    pub(crate) fn behavior(&self) -> redis::Behavior {
        self.0.behavior()
    }
    /// `builder`'s lock, to be held under this session.
    pub(crate) fn bind(&self, builder: redis::LockBuilder) -> redis::LockBuilder {
        builder.session(self.0)
    }
    /// The election `name`, campaigning under this session.
    pub(crate) fn election(&self, url: &str, name: &str) -> lockyard::Result<redis::Election> {
        redis::Election::new(url, name, self.0)
    }
}

impl Local<'_, redis::WaitGroup> {
    pub(crate) fn healthy(&self, token: &str) -> bool {
        self.0.healthy(token)
    }
    pub(crate) fn check_health(&self, token: &str) -> lockyard::Result<()> {
        self.0.check_health(token)
    }
    pub(crate) fn fencing_token(&self, token: &str) -> Option<u64> {
        self.0.fencing_token(token)
    }
}

impl Local<'_, redis::Election> {
    pub(crate) fn is_leader(&self) -> bool {
        self.0.is_leader()
    }
    pub(crate) fn check_health(&self) -> lockyard::Result<()> {
        self.0.check_health()
    }
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.0.fencing_token()
    }
    pub(crate) fn observe(&self) -> redis::Observer {
        self.0.observe()
    }
}

impl Local<'_, quorum::RwLock> {
    pub(crate) fn held(&self) -> bool {
        self.0.held()
    }
    pub(crate) fn healthy(&self) -> bool {
        self.0.healthy()
    }
    pub(crate) fn check_health(&self) -> lockyard::Result<()> {
        self.0.check_health()
    }
    pub(crate) fn nodes(&self) -> &[String] {
        self.0.nodes()
    }
    pub(crate) fn default_timeout(&self) -> Option<Duration> {
        self.0.default_timeout()
    }
}

impl Local<'_, gcs::Lock> {
    pub(crate) fn healthy(&self) -> bool {
        self.0.healthy()
    }
    pub(crate) fn check_health(&self) -> lockyard::Result<()> {
        self.0.check_health()
    }
    pub(crate) fn last_refresh_error(&self) -> Option<String> {
        self.0.last_refresh_error()
    }
    pub(crate) fn owned_according_to_internal_state(&self) -> bool {
        self.0.owned_according_to_internal_state()
    }
    pub(crate) fn locked_according_to_internal_state(&self) -> bool {
        self.0.locked_according_to_internal_state()
    }
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.0.fencing_token()
    }
    pub(crate) fn identity(&self) -> String {
        self.0.identity()
    }
    pub(crate) fn default_timeout(&self) -> Option<Duration> {
        self.0.default_timeout()
    }
    pub(crate) fn ttl(&self) -> Duration {
        self.0.ttl()
    }
}
