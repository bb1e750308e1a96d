//! `lockyard::quorum::RwLock`: the quorum algorithm with per-thread holds,
//! guards and a builder, shaped like `lockyard::redis::Lock`.

use std::sync::Arc;
use std::time::Duration;

use super::engine::{Hold, Quorum};
use super::guards::{Guard, Guarded, ReadGuard, WriteGuard};
use super::node::{Mode, NetLocker, RedisNode};
use crate::error::{Error, Result};
use crate::holds::PerHolder;
use crate::identity::{
    as_holder_number, binding_holder, holder_identity, holder_number, random_hex,
    task_holder_number,
};
use crate::lease::{Lease, LeaseOptions, DEFAULT_TTL};
use crate::limits;
use crate::redis::{check_name, server};
use crate::runtime::{self, Ended};
use crate::wait::{Deadline, Interrupt, NEVER};

/// The most nodes a lock may span (as dsync).
const MAX_NODES: usize = 32;

/// A read/write lock over N independent Redis servers: many readers or one
/// writer, granted by a quorum of the servers, so it keeps working while up
/// to ⌊(n−1)/2⌋ of them are down or unreachable.
///
/// Each thread is a separate holder. Held locks are refreshed in the
/// background; [`RwLock::check_health`] tells whether the hold may be lost.
///
/// ```no_run
/// use std::time::Duration;
/// use lockyard::quorum::RwLock;
///
/// let urls = ["redis://a:6379", "redis://b:6379", "redis://c:6379"];
/// let lock = RwLock::builder(urls, "index").ttl(Duration::from_secs(30)).build()?;
/// {
///     let guard = lock.write(Some(Duration::from_secs(10)))?;
///     guard.check_health()?;
///     println!("writing with fencing token {}", guard.fencing_token()?);
/// } // released
/// let reading = lock.read(None)?;
/// # drop(reading);
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct RwLock {
    quorum: Arc<Quorum>,
    urls: Vec<String>,
    prefix: String,
    default_timeout: Option<Duration>,
    /// This process's holds, by holder (thread).
    holds: PerHolder<Arc<Hold>>,
}

/// Options for a [`RwLock`]; start with [`RwLock::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct RwLockBuilder {
    urls: Vec<String>,
    name: String,
    lease: LeaseOptions,
    timeout: Option<Duration>,
}

crate::lease::lease_setters! {
    RwLockBuilder;
    /// How long each node keeps a grant after its holder's last refresh (default
    /// [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL); at most 30 days).
    ttl;
    /// Refresh period; must be below ttl / max_refresh_fails (default: a third of that).
    refresh_interval;
    /// Consecutive refreshes that reach no quorum before the lock turns unhealthy
    /// (default [`DEFAULT_MAX_REFRESH_FAILS`](crate::lease::DEFAULT_MAX_REFRESH_FAILS)).
    max_refresh_fails;
    /// How long connecting to a node may take (default [`DEFAULT_CONNECT_TIMEOUT`](crate::lease::DEFAULT_CONNECT_TIMEOUT); at most 30 days).
    connect_timeout;
}

impl RwLockBuilder {
    /// The wait of [`RwLock::write_lock`] and [`RwLock::read_lock`] (default: forever;
    /// at most 100 years).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Validates the options; touches no server.
    ///
    /// # Errors
    /// [`Error::Config`] for no URLs, more than 32, the same server twice,
    /// an unparsable URL, a Sentinel URL, an empty name, or a lease that cannot be kept alive.
    pub fn build(self) -> Result<RwLock> {
        let connect_timeout = self.lease.connect_timeout()?;
        limits::wait(self.timeout)?;
        let request_timeout = self.timing()?.request_timeout;
        let mut nodes: Vec<Arc<dyn NetLocker>> = Vec::with_capacity(self.urls.len());
        for url in &self.urls {
            let server = server(url, connect_timeout)?;
            if server.follows_sentinels() {
                // Its fencing and failover rules are the Redis Lock's; a
                // quorum's nodes are independent servers that never fail over.
                return Err(Error::config(format!(
                    "{}: a quorum lock takes independent Redis servers, not Sentinel URLs",
                    server.name
                )));
            }
            let node = Arc::new(RedisNode::new(server, request_timeout));
            if nodes.iter().any(|seen| seen.name() == node.name()) {
                return Err(Error::config(format!(
                    "the server {} is listed twice: each node must be a separate server",
                    node.name()
                )));
            }
            nodes.push(node);
        }
        self.build_on(nodes)
    }

    pub(crate) fn build_on(self, nodes: Vec<Arc<dyn NetLocker>>) -> Result<RwLock> {
        if nodes.is_empty() || nodes.len() > MAX_NODES {
            return Err(Error::config(format!(
                "a quorum lock needs 1 to {MAX_NODES} servers, got {}",
                nodes.len()
            )));
        }
        check_name(&self.name)?;
        let Timing {
            lease,
            attempt_timeout,
            request_timeout,
        } = self.timing()?;
        let what = format!("rw lock {:?}", self.name);
        let quorum = Arc::new(Quorum {
            fingerprint: fingerprint(&nodes).into(),
            nodes,
            resource: self.name.clone(),
            waiting_mark: (attempt_timeout * 2).max(Duration::from_millis(200)),
            attempt_timeout,
            request_timeout,
            lease,
            what: what.clone(),
        });
        let giver = quorum.clone();
        Ok(RwLock {
            quorum,
            urls: self.urls,
            prefix: random_hex(8),
            default_timeout: self.timeout,
            holds: PerHolder::new(what, move |hold: Arc<Hold>| giver.release(&hold)),
        })
    }

    fn timing(&self) -> Result<Timing> {
        let lease = self.lease.lease(DEFAULT_TTL)?;
        // A node slower than this is "not answering" for one attempt; its
        // grant, if it comes, is adopted or released when it does.
        let attempt_timeout = Duration::from_millis(500).min(lease.ttl / 2);
        Ok(Timing {
            request_timeout: (attempt_timeout * 4).max(self.lease.connect_timeout.min(lease.ttl)),
            attempt_timeout,
            lease,
        })
    }
}

struct Timing {
    lease: Lease,
    attempt_timeout: Duration,
    request_timeout: Duration,
}

/// A short name for the set of nodes, recorded with every grant: clients
/// that list different servers for one name do not exclude each other (a
/// quorum of one list need not meet a quorum of the other), so a node
/// refuses a client whose fingerprint differs from its holders'. Made of
/// the sorted `host:port/db` of each node: the order of the list does not
/// matter, the spelling of a host does (write the same URLs everywhere).
/// The count leads, so a message can say how many servers the other
/// client listed. FNV-1a: stable across builds and platforms, unlike
/// `DefaultHasher`; it detects mistakes, it resists no adversary.
fn fingerprint(nodes: &[Arc<dyn NetLocker>]) -> String {
    let mut addresses: Vec<String> = nodes.iter().map(|node| node.address()).collect();
    addresses.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in addresses.join(",").bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}-{hash:016x}", nodes.len())
}

impl RwLock {
    /// Options for the lock `name` on the Redis servers at `urls`.
    pub fn builder<I, S>(urls: I, name: impl Into<String>) -> RwLockBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RwLockBuilder {
            urls: urls.into_iter().map(Into::into).collect(),
            name: name.into(),
            lease: LeaseOptions::default(),
            timeout: None,
        }
    }

    /// Waits up to `timeout` (None: forever) for the write lock.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out, [`Error::AlreadyLocked`]
    /// if this thread holds the lock already (read or write),
    /// [`Error::Backend`] when fewer nodes than a quorum answer (nodes that
    /// deny because someone else holds the lock count as answers: a busy
    /// lock is waited for, whatever the node count).
    pub fn write(&self, timeout: Option<Duration>) -> Result<WriteGuard<'_>> {
        self.guarded(Mode::Write, timeout)?;
        Ok(WriteGuard(Guard::new(self)))
    }

    /// Waits up to `timeout` (None: forever) for a read lock, shared with
    /// other readers. Errors as [`RwLock::write`].
    pub fn read(&self, timeout: Option<Duration>) -> Result<ReadGuard<'_>> {
        self.guarded(Mode::Read, timeout)?;
        Ok(ReadGuard(Guard::new(self)))
    }

    /// [`RwLock::write`] with the builder's `timeout`.
    pub fn write_lock(&self) -> Result<WriteGuard<'_>> {
        self.write(self.default_timeout)
    }

    /// [`RwLock::read`] with the builder's `timeout`.
    pub fn read_lock(&self) -> Result<ReadGuard<'_>> {
        self.read(self.default_timeout)
    }

    /// The builder's `timeout`.
    pub fn default_timeout(&self) -> Option<Duration> {
        self.default_timeout
    }

    fn guarded(&self, mode: Mode, timeout: Option<Duration>) -> Result<()> {
        self.acquire_interruptibly(mode, timeout.into(), NEVER)
    }

    /// Acquires the write lock for the calling thread without a guard (for
    /// bindings; release with [`RwLock::release`]), waiting until
    /// `deadline` (a [`Deadline`], or a timeout: None waits forever, zero
    /// tries once). `interrupted` is asked at least every 50 ms while
    /// waiting; when it answers true nothing stays held and the call
    /// returns [`Error::Interrupted`].
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes, and those of
    /// [`RwLock::write`].
    pub fn acquire_write_interruptibly(
        &self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        self.acquire_interruptibly(Mode::Write, deadline.into(), interrupted)
    }

    /// A read lock for the calling thread, like
    /// [`RwLock::acquire_write_interruptibly`].
    pub fn acquire_read_interruptibly(
        &self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        self.acquire_interruptibly(Mode::Read, deadline.into(), interrupted)
    }

    fn acquire_interruptibly(
        &self,
        mode: Mode,
        deadline: Deadline,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        self.holds.acquire(holder_number(), deadline, || {
            let identity = holder_identity(&self.prefix);
            let waiting = self.quorum.acquire(mode, &identity, deadline);
            // Given up, the wait is dropped: it gives back what it holds.
            match runtime::block_on_interruptibly(waiting, None, interrupted) {
                Ended::Done(hold) => Ok(hold?.map(Arc::new)),
                Ended::Interrupted => Err(Error::Interrupted(self.quorum.describe(mode))),
                Ended::TimedOut => unreachable!("the wait has no time limit of its own"),
            }
        })
    }

    /// Releases the calling thread's read or write lock. Ok(false) when it
    /// had already been lost on a quorum of the nodes.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread holds nothing.
    pub fn release(&self) -> Result<bool> {
        self.holds
            .release(holder_number(), |hold| self.quorum.release(&hold))
    }

    /// Ends a block that acquired the lock on the calling thread, like
    /// [`RwLock::release`], except in a process forked inside the block,
    /// where the hold is the parent's and this does nothing (Ok(true)).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread holds nothing.
    pub fn leave(&self) -> Result<bool> {
        self.holds
            .leave(holder_number(), |hold| self.quorum.release(&hold))
    }

    /// Whether the calling thread holds the lock and its lease is surely
    /// still live on a quorum. Reads a flag and the clock; no network.
    pub fn healthy(&self) -> bool {
        self.holds.healthy(holder_number())
    }

    /// Ok if the calling thread holds the lock and it is healthy.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if not held, [`Error::LockUnhealthy`] if it may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.holds.check_health(holder_number())
    }

    /// The fencing token of the calling thread's write lock: strictly
    /// increasing across all write holders of this name. None for a read
    /// lock or when nothing is held. The first call per grant records the
    /// token on a quorum of the nodes (one round trip); later calls read it.
    ///
    /// # Errors
    /// [`Error::LockUnhealthy`] if the token could not be recorded on a
    /// quorum: the lock may be lost.
    pub fn fencing_token(&self) -> Result<Option<u64>> {
        match self.hold() {
            None => Ok(None),
            Some(hold) => self.quorum.fencing_token(&hold),
        }
    }

    /// Whether the calling thread holds the lock (read or write), by local state.
    pub fn held(&self) -> bool {
        self.hold().is_some()
    }

    /// Gives the calling thread's hold back in the background and returns
    /// at once (a binding's holder that must not block).
    pub fn leave_in_background(&self) {
        self.holds.leave_in_background(holder_number());
    }

    /// The async twin of [`RwLock::write`]: waits up to `timeout` (None:
    /// forever) on the calling task's runtime, holding no thread, and
    /// returns a guard of the task's hold. Each task is a holder, as each
    /// thread is for [`RwLock::write`]. Dropping the future before it
    /// completes leaves nothing granted; dropping the guard gives the lock
    /// back in the background, never blocking the executor
    /// ([`WriteGuard::release_async`] waits for the answer instead).
    ///
    /// # Errors
    /// Those of [`RwLock::write`]; [`Error::AlreadyLocked`] if the calling
    /// task holds it already; [`Error::Config`] when awaited outside a
    /// tokio runtime.
    pub async fn write_async(&self, timeout: Option<Duration>) -> Result<WriteGuard<'_>> {
        let holder = task_holder_number();
        self.take_async(holder, Mode::Write, Deadline::after(timeout))
            .await?;
        Ok(WriteGuard(Guard::for_task(self, holder)))
    }

    /// The async twin of [`RwLock::read`], like [`RwLock::write_async`].
    ///
    /// # Errors
    /// Those of [`RwLock::write_async`].
    pub async fn read_async(&self, timeout: Option<Duration>) -> Result<ReadGuard<'_>> {
        let holder = task_holder_number();
        self.take_async(holder, Mode::Read, Deadline::after(timeout))
            .await?;
        Ok(ReadGuard(Guard::for_task(self, holder)))
    }

    /// [`RwLock::write_async`] with the builder's `timeout`.
    ///
    /// # Errors
    /// Those of [`RwLock::write_async`].
    pub async fn write_lock_async(&self) -> Result<WriteGuard<'_>> {
        self.write_async(self.default_timeout).await
    }

    /// [`RwLock::read_async`] with the builder's `timeout`.
    ///
    /// # Errors
    /// Those of [`RwLock::write_async`].
    pub async fn read_lock_async(&self) -> Result<ReadGuard<'_>> {
        self.read_async(self.default_timeout).await
    }

    /// The async twin of [`RwLock::release`], for the calling task's hold.
    /// Dropped before the answer, the release finishes in the background.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling task holds nothing.
    pub async fn release_async(&self) -> Result<bool> {
        self.release_holder_async(task_holder_number()).await
    }

    /// The async twin of [`RwLock::fencing_token`], for the calling task's
    /// hold.
    ///
    /// # Errors
    /// Those of [`RwLock::fencing_token`].
    pub async fn fencing_token_async(&self) -> Result<Option<u64>> {
        self.fencing_token_of(task_holder_number()).await
    }

    /// The write lock (`write`) or a read lock for the holder `key` (as
    /// [`crate::as_holder`] takes), until `deadline`: for a binding whose
    /// holders are not tokio tasks (asyncio Tasks). It reads the hold with
    /// `as_holder(key, ...)` and ends it with [`RwLock::release_for_async`]
    /// or [`RwLock::leave_for_async`].
    ///
    /// # Errors
    /// Those of [`RwLock::write_async`]; [`Error::Timeout`] when the
    /// deadline passes.
    pub async fn acquire_for_async(&self, key: u64, write: bool, deadline: Deadline) -> Result<()> {
        let mode = if write { Mode::Write } else { Mode::Read };
        self.take_async(binding_holder(key), mode, deadline).await
    }

    /// [`RwLock::release_async`] for the holder `key`.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if `key` holds nothing.
    pub async fn release_for_async(&self, key: u64) -> Result<bool> {
        self.release_holder_async(binding_holder(key)).await
    }

    /// The async twin of [`RwLock::leave`], for the holder `key`: Ok(true)
    /// in a process forked inside the block, whose hold is the parent's.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if `key` holds nothing.
    pub async fn leave_for_async(&self, key: u64) -> Result<bool> {
        self.on_tokio()?;
        match self.holds.leave_out(binding_holder(key))? {
            Some(hold) => self.give_back_async(hold).await,
            None => Ok(true),
        }
    }

    /// [`RwLock::fencing_token_async`] for the holder `key`.
    ///
    /// # Errors
    /// Those of [`RwLock::fencing_token`].
    pub async fn fencing_token_for_async(&self, key: u64) -> Result<Option<u64>> {
        self.fencing_token_of(binding_holder(key)).await
    }

    /// Ok on a tokio runtime, where the `_async` calls' timers live;
    /// [`Error::Config`] anywhere else.
    pub(super) fn on_tokio(&self) -> Result<()> {
        runtime::check_on_tokio("an _async call", &self.quorum.what)
    }

    async fn take_async(&self, holder: u64, mode: Mode, deadline: Deadline) -> Result<()> {
        self.on_tokio()?;
        let identity = as_holder_number(holder, || holder_identity(&self.prefix));
        let quorum = self.quorum.clone();
        let taking = Box::pin(async move {
            Ok(quorum
                .acquire(mode, &identity, deadline)
                .await?
                .map(Arc::new))
        });
        self.holds.acquire_async(holder, deadline, taking).await
    }

    pub(super) async fn release_holder_async(&self, holder: u64) -> Result<bool> {
        self.on_tokio()?;
        let hold = self.holds.take_out(holder)?;
        self.give_back_async(hold).await
    }

    /// Gives `hold` back; dropped before the answer, the nodes not heard
    /// from are asked again in the background.
    async fn give_back_async(&self, hold: Arc<Hold>) -> Result<bool> {
        self.holds.released(self.quorum.release_async(&hold).await)
    }

    pub(super) async fn fencing_token_of(&self, holder: u64) -> Result<Option<u64>> {
        self.on_tokio()?;
        match self.holds.with(holder, Arc::clone) {
            None => Ok(None),
            Some(hold) => self.quorum.fencing_token_async(&hold).await,
        }
    }

    /// Gives back every hold of this process in the background and returns
    /// at once: for a lock about to be dropped where blocking is not allowed
    /// (a garbage collector's finalizer). The drop then finds nothing left.
    pub fn release_all_in_background(&self) {
        self.holds.release_all_in_background();
    }

    /// The nodes' URLs, as given.
    pub fn nodes(&self) -> &[String] {
        &self.urls
    }

    /// Stops refreshing without releasing, as a crashed holder would.
    #[cfg(test)]
    pub(crate) fn abandon(&self) {
        self.holds.get().remove(&holder_number());
    }

    fn hold(&self) -> Option<Arc<Hold>> {
        self.holds.with(holder_number(), Arc::clone)
    }
}

impl Drop for RwLock {
    /// A dropped lock gives back what this process still holds.
    fn drop(&mut self) {
        self.holds.release_all();
    }
}

impl Guarded for RwLock {
    fn release(&self) -> Result<bool> {
        RwLock::release(self)
    }
    fn leave(&self) -> Result<bool> {
        RwLock::leave(self)
    }
    fn healthy(&self) -> bool {
        RwLock::healthy(self)
    }
    fn check_health(&self) -> Result<()> {
        RwLock::check_health(self)
    }
    fn fencing_token(&self) -> Result<Option<u64>> {
        RwLock::fencing_token(self)
    }
    fn leave_in_background(&self) {
        RwLock::leave_in_background(self)
    }
}
