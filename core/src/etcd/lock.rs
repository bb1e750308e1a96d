//! The etcd lock: the limit-1 line of [`Queue`], held per thread.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::client::Client;
use super::grant::{self, Grant};
use super::leases::{self, Leases};
use super::queue::{Barring, Queue, Shape};
use super::session::{Session, SessionState};
use super::target::Target;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::holds::PerHolder;
use crate::identity::{
    as_holder_number, binding_holder, holder_identity, holder_number, random_hex,
};
use crate::lease::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TTL};
use crate::limits;
use crate::runtime;
use crate::wait::{Deadline, InTime, Interrupt, NEVER};

/// A distributed mutual-exclusion lock on etcd, for locks that must hold
/// through a failover: etcd commits each grant through Raft before it
/// answers, so no grant is lost when a member dies.
///
/// Each thread is a separate holder, as with [`crate::redis::Lock`].
/// Waiters are served in the order they asked; the fencing token is the
/// create revision of the holder's key, strictly increasing across the
/// cluster.
///
/// ```no_run
/// use std::time::Duration;
/// use lockyard::etcd::Lock;
///
/// let lock = Lock::builder("etcd://127.0.0.1:2379", "deploy")
///     .ttl(Duration::from_secs(30))
///     .build()?;
/// let guard = lock.acquire(Some(Duration::from_secs(10)))?;
/// guard.check_health()?; // before each step that must not run twice
/// println!("holding with fencing token {}", guard.fencing_token());
/// drop(guard); // released
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct Lock {
    queue: Arc<Queue>,
    client: Arc<Client>,
    ttl_secs: i64,
    /// This process's leases for the lock's ttl (found again after a fork),
    /// or the session's.
    leases: Mutex<Arc<Leases>>,
    session: Option<Arc<SessionState>>,
    /// What the holder's key stores: the value given, else the identity.
    value: Option<String>,
    prefix: String,
    default_timeout: Option<Duration>,
    holds: PerHolder<Grant>,
}

impl crate::holds::Held for Grant {
    fn health(&self) -> &Health {
        &self.held.health
    }
}

/// Options for a [`Lock`]; start with [`Lock::builder`].
#[derive(Clone)]
#[must_use]
pub struct LockBuilder {
    url: String,
    name: String,
    ttl: Duration,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    identity_prefix: Option<String>,
    session: Option<Arc<SessionState>>,
    value: Option<String>,
}

impl LockBuilder {
    /// Holds the lock under `session`: its key rides on the session's
    /// lease (the lock's own `ttl` is unused), its health is the session's
    /// and the key's, and the session's `lock_delay` bars the name after a
    /// lost session. The session and the lock must name the same members.
    pub fn session(mut self, session: &Session) -> Self {
        self.session = Some(session.state().clone());
        self
    }
    /// What the holder's key stores, for [`holder`](super::holder) and
    /// `lockyard status` to show (default: the holder's identity).
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }
    /// How long the lock outlives its holder's process (default
    /// [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL)): the ttl of the etcd
    /// lease its key rides on, in whole seconds (rounded up).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// The wait of [`Lock::lock`] (default: forever; at most 100 years,
    /// [`MAX_WAIT`](crate::MAX_WAIT)).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }
    /// How long one request to a member may take before the next member is
    /// tried (default [`DEFAULT_CONNECT_TIMEOUT`](crate::lease::DEFAULT_CONNECT_TIMEOUT)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
    /// Prefix of holder identities (default: random hex). Holders are
    /// `<prefix>-<pid>/<thread>`; the holder's key stores its identity.
    pub fn identity_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.identity_prefix = Some(prefix.into());
        self
    }

    /// Validates the options; touches no server.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty name, a ttl under 1 s or over 30 days,
    /// a timeout over 100 years, or a URL that is not `etcd://` or `etcds://`
    /// with at least one member.
    pub fn build(self) -> Result<Lock> {
        let target = Target::parse(&self.url)?;
        let ttl_secs = leases::ttl_secs(self.ttl)?;
        limits::wait(self.timeout)?;
        let connect_timeout = limits::positive_period("connect_timeout", self.connect_timeout)?;
        let prefix = match self.identity_prefix {
            Some(prefix) if prefix.is_empty() => {
                return Err(Error::config("identity_prefix must not be empty"));
            }
            Some(prefix) => prefix,
            None => random_hex(8),
        };
        let what = format!("lock {:?}", self.name);
        let (client, leases, queue) = match &self.session {
            None => {
                let client = Arc::new(Client::new(target, connect_timeout));
                let queue = Queue::new(client.clone(), &self.name, Shape::Lock, what.clone())?;
                (client.clone(), Leases::shared(&client, ttl_secs), queue)
            }
            Some(session) => {
                if !session.client.targets(&target) {
                    return Err(Error::config(
                        "the session is on other etcd members than the lock's URL",
                    ));
                }
                let client = session.client.clone();
                let mut queue = Queue::new(client.clone(), &self.name, Shape::Lock, what.clone())?;
                if session.leases.bars() {
                    queue = queue.barred_by(Barring {
                        kept: session.kept_value(self.value.as_deref()),
                        session: session.id.clone(),
                    });
                }
                (client, session.leases.clone(), queue)
            }
        };
        let queue = Arc::new(queue);
        let giver = queue.clone();
        Ok(Lock {
            holds: PerHolder::new(what, move |grant| grant::give_back(&giver, &grant)),
            leases: Mutex::new(leases),
            session: self.session,
            value: self.value,
            queue,
            client,
            ttl_secs,
            prefix,
            default_timeout: self.timeout,
        })
    }
}

impl Lock {
    /// Options for the lock `name` on the etcd cluster at `url`
    /// (`etcd://host:2379`, several members comma-separated, `etcds://`
    /// for TLS, `user:password@` for etcd's auth).
    pub fn builder(url: impl Into<String>, name: impl Into<String>) -> LockBuilder {
        LockBuilder {
            url: url.into(),
            name: name.into(),
            ttl: DEFAULT_TTL,
            timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            identity_prefix: None,
            session: None,
            value: None,
        }
    }

    /// Waits up to `timeout` (None: forever) and returns a guard that
    /// releases the lock when dropped.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out, [`Error::AlreadyLocked`]
    /// if this thread holds it already, [`Error::Backend`] if no member
    /// answers, or if the waiter's own lease is lost while it waits.
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<LockGuard<'_>> {
        self.acquire_interruptibly(timeout, NEVER)?;
        Ok(LockGuard::new(self))
    }

    /// One attempt, never waits: a guard if the lock was free.
    pub fn try_acquire(&self) -> Result<Option<LockGuard<'_>>> {
        let acquired = self
            .acquire_interruptibly(Duration::ZERO, NEVER)
            .in_time()?;
        Ok(acquired.then(|| LockGuard::new(self)))
    }

    /// Waits with the builder's `timeout`, like [`Lock::acquire`].
    pub fn lock(&self) -> Result<LockGuard<'_>> {
        self.acquire(self.default_timeout)
    }

    /// The builder's `timeout`.
    pub fn default_timeout(&self) -> Option<Duration> {
        self.default_timeout
    }

    /// Acquires for the calling thread without a guard, waiting until
    /// `deadline`; `interrupted` is asked at least every 50 ms. A wait that
    /// ends without the lock leaves nothing queued.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes, [`Error::Interrupted`],
    /// and those of [`Lock::acquire`].
    pub fn acquire_interruptibly(
        &self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        let deadline = deadline.into().check()?;
        self.holds.acquire(holder_number(), deadline, || {
            self.take(deadline, interrupted)
        })
    }

    fn take(&self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<Option<Grant>> {
        let (key, value) = self.place()?;
        grant::take(
            &self.queue,
            &self.leases(),
            &key,
            &value,
            deadline,
            interrupted,
        )
    }

    /// The calling holder's key in the line and what it stores; refused
    /// under a session that cannot take locks any more.
    fn place(&self) -> Result<(String, String)> {
        if let Some(session) = &self.session {
            session.usable()?;
        }
        let key = self.queue.key(&random_hex(12));
        let value = match &self.value {
            Some(value) => value.clone(),
            None => holder_identity(&self.prefix),
        };
        Ok((key, value))
    }

    /// This process's leases (after a fork, the child's own), or the
    /// session's.
    fn leases(&self) -> Arc<Leases> {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        if self.session.is_none() && leases.pid() != crate::pid::current() {
            *leases = Leases::shared(&self.client, self.ttl_secs);
        }
        leases.clone()
    }

    /// Releases the calling thread's hold. Ok(false) when the lock had
    /// already been lost (its lease ran out, or its key was deleted).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread does not hold it.
    pub fn release(&self) -> Result<bool> {
        self.holds.release(holder_number(), |grant| {
            grant::give_back(&self.queue, &grant)
        })
    }

    /// Ends a block that acquired the lock on the calling thread: releases
    /// like [`Lock::release`], except in a process forked inside the block,
    /// where the hold is the parent's and this does nothing (Ok(true)).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread holds nothing.
    pub fn leave(&self) -> Result<bool> {
        self.holds.leave(holder_number(), |grant| {
            grant::give_back(&self.queue, &grant)
        })
    }

    /// [`Lock::leave`] that returns at once: the hold is given back in the
    /// background (a guard of an async task dropped, which must not block
    /// its executor).
    pub fn leave_in_background(&self) {
        self.holds.leave_in_background(holder_number());
    }

    /// Whether the calling thread holds the lock and its lease is surely
    /// still live. Reads a flag and the clock; never touches etcd.
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

    /// The fencing token of the calling thread's grant: its key's create
    /// revision, strictly increasing across every key of the cluster.
    pub fn fencing_token(&self) -> Option<u64> {
        self.holds
            .with(holder_number(), |hold| hold.held.revision as u64)
    }

    /// Asks etcd whether the calling thread holds the lock.
    pub fn owned(&self) -> Result<bool> {
        let key = self
            .holds
            .with(holder_number(), |hold| hold.held.key.clone());
        let holders = runtime::block_on(self.queue.holders())?;
        Ok(key.is_some_and(|key| holders.iter().any(|entry| entry.key == key)))
    }

    /// Asks etcd whether anyone holds the lock (or its name, as a wait
    /// group).
    pub fn locked(&self) -> Result<bool> {
        runtime::block_on(self.queue.anyone_holds())
    }

    /// Gives back every hold of this process in the background and returns
    /// at once (a garbage collector's finalizer).
    pub fn release_all_in_background(&self) {
        self.holds.release_all_in_background();
    }

    /// The calling thread's holder identity (`<prefix>-<pid>/<thread>`).
    pub fn identity(&self) -> String {
        holder_identity(&self.prefix)
    }

    crate::guard::async_twins!();

    /// The async twin of [`Lock::leave`], for the holder `key`: Ok(true)
    /// in a process forked inside the block, whose hold is the parent's.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if `key` holds nothing.
    pub async fn leave_for_async(&self, key: u64) -> Result<bool> {
        match self.holds.leave_out(binding_holder(key))? {
            Some(grant) => self.give_back_async(grant).await,
            None => Ok(true),
        }
    }

    /// The async twin of [`Lock::locked`].
    pub async fn locked_async(&self) -> Result<bool> {
        let queue = self.queue.clone();
        runtime::on_runtime(self.queue.what(), async move { queue.anyone_holds().await }).await
    }

    async fn take_async(&self, holder: u64, deadline: Deadline) -> Result<()> {
        let deadline = deadline.check()?;
        let (key, value) = as_holder_number(holder, || self.place())?;
        let taking = Box::pin(grant::take_async(
            self.queue.clone(),
            self.leases(),
            key,
            value,
            deadline,
        ));
        self.holds.acquire_async(holder, deadline, taking).await
    }

    async fn release_holder_async(&self, holder: u64) -> Result<bool> {
        let grant = self.holds.take_out(holder)?;
        self.give_back_async(grant).await
    }

    async fn give_back_async(&self, grant: Grant) -> Result<bool> {
        let released = grant::give_back_async(self.queue.clone(), grant).await;
        self.holds.released(released)
    }
}

impl Drop for Lock {
    /// A dropped lock gives back what this process still holds, rather than
    /// leaving it to its lease.
    fn drop(&mut self) {
        self.holds.release_all();
    }
}

/// Proof that the calling thread (or, from [`Lock::acquire_async`], task)
/// holds a [`Lock`]; releases it on drop.
pub type LockGuard<'a> = crate::guard::Guard<'a, Lock>;

crate::guard::thread_lock!(Lock);
crate::guard::async_guard!(Lock);
