//! A Redis lock: the limit-1 semaphore, held per thread.

use std::sync::Arc;
use std::time::Duration;

use super::caller::Caller;
use super::hold::Hold;
use super::keys::Keys;
use super::route::Route;
use super::semaphore::Semaphore;
use super::server::server;
use super::session::{Binding, Session, SessionState};
use super::slots::Shape;
use crate::error::{Error, Result};
use crate::holds::PerHolder;
use crate::identity::{
    as_holder_number, binding_holder, holder_identity, holder_number, random_hex, request_token,
};
use crate::lease::{
    Lease, LeaseOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_REFRESH_FAILS, DEFAULT_TTL,
};
use crate::limits;
use crate::wait::{Deadline, InTime, Interrupt, NEVER};

/// A distributed mutual-exclusion lock on one Redis server (or Cluster).
///
/// Each thread is a separate holder: one `Lock` shared between threads
/// excludes them from each other exactly as it excludes other hosts.
/// While held, the lock is refreshed in the background; [`LockGuard::check_health`]
/// tells whether it may have been lost (lease ran out while the process was
/// paused, refreshes failed, another holder took over).
///
/// ```no_run
/// use std::time::Duration;
/// use lockyard::redis::Lock;
///
/// let lock = Lock::builder("redis://127.0.0.1:6379/0", "deploy")
///     .ttl(Duration::from_secs(30))
///     .build()?;
/// let guard = lock.acquire(Some(Duration::from_secs(10)))?;
/// guard.check_health()?; // before each step that must not run twice
/// println!("holding with fencing token {}", guard.fencing_token());
/// drop(guard); // released
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct Lock {
    semaphore: Semaphore,
    prefix: String,
    /// Stored with each grant under a session ("" for none).
    value: String,
    default_timeout: Option<Duration>,
    /// This process's holds, by thread.
    holds: PerHolder<Hold>,
}

/// Options for a [`Lock`]; start with [`Lock::builder`].
#[derive(Clone)]
#[must_use]
pub struct LockBuilder {
    url: String,
    name: String,
    lease: LeaseOptions,
    timeout: Option<Duration>,
    identity_prefix: Option<String>,
    session: Option<Arc<SessionState>>,
    value: Option<String>,
}

crate::lease::lease_setters! {
    LockBuilder;
    /// How long the lock outlives its holder's last refresh (default
    /// [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL); at most 30 days, [`MAX_PERIOD`](crate::MAX_PERIOD)).
    /// Not for a lock under a session, which lives as long as the session.
    ttl;
    /// Refresh period; must be below ttl / max_refresh_fails
    /// (default: a third of that).
    refresh_interval;
    /// Consecutive transient refresh failures that make the lock unhealthy
    /// (default [`DEFAULT_MAX_REFRESH_FAILS`](crate::lease::DEFAULT_MAX_REFRESH_FAILS)).
    max_refresh_fails;
    /// How long connecting to Redis may take before it counts as unreachable
    /// (default [`DEFAULT_CONNECT_TIMEOUT`](crate::lease::DEFAULT_CONNECT_TIMEOUT); at most 30 days).
    connect_timeout;
}

impl LockBuilder {
    /// Holds the lock under `session`: no TTL or refresher of its own, the
    /// session's renewal keeps it, its health is the session's, and it is
    /// freed when the session is destroyed or lost (after the session's
    /// lock_delay when lost).
    pub fn session(mut self, session: &Session) -> Self {
        self.session = Some(session.state().clone());
        self
    }
    /// A value stored with each grant under a session, returned by
    /// [`holder`](super::holder) and `Election::leader`.
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }
    /// The wait of [`Lock::lock`] (default: forever; at most 100 years,
    /// [`MAX_WAIT`](crate::MAX_WAIT)).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }
    /// Prefix of holder identities (default: random hex). Holders are
    /// `<prefix>-<pid>/<thread>`.
    pub fn identity_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.identity_prefix = Some(prefix.into());
        self
    }

    /// Validates the options; touches no server.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty name, a TTL under 1 ms or over 30
    /// days, a timeout over 100 years, an unparsable URL, or a refresh interval that cannot keep the lease alive.
    pub fn build(self) -> Result<Lock> {
        let keys = Keys::new(&self.name)?;
        let (lease, binding) = match &self.session {
            None if self.value.is_some() => {
                return Err(Error::config(
                    "a value is stored only for a lock under a session",
                ));
            }
            None => (self.lease.lease(DEFAULT_TTL)?, None),
            Some(_) if self.lease.ttl.is_some() || self.lease.refresh_interval.is_some() => {
                return Err(Error::config(
                    "a lock under a session has no ttl or refresh_interval of its own: it lives as long as the session",
                ));
            }
            Some(session) => {
                session.usable()?;
                (
                    session.lease().clone(),
                    Some(Binding::new(session.clone(), false)),
                )
            }
        };
        let connect_timeout = self.lease.connect_timeout()?;
        limits::wait(self.timeout)?;
        let prefix = match self.identity_prefix {
            Some(prefix) if prefix.is_empty() => {
                return Err(Error::config("identity_prefix must not be empty"));
            }
            Some(prefix) => prefix,
            None => match &self.session {
                Some(session) => session.id().to_owned(),
                None => random_hex(8),
            },
        };
        let route = Route::new(server(&self.url, connect_timeout)?);
        let what = format!("lock {:?}", self.name);
        let semaphore = Semaphore::new(route, keys, Shape::Lock, lease, what.clone(), binding);
        let giver = semaphore.clone();
        Ok(Lock {
            holds: PerHolder::new(what, move |hold| giver.release(hold)),
            semaphore,
            prefix,
            value: self.value.unwrap_or_default(),
            default_timeout: self.timeout,
        })
    }
}

impl Lock {
    /// Options for the lock `name` on the Redis server at `url`.
    pub fn builder(url: impl Into<String>, name: impl Into<String>) -> LockBuilder {
        LockBuilder {
            url: url.into(),
            name: name.into(),
            lease: LeaseOptions::default(),
            timeout: None,
            identity_prefix: None,
            session: None,
            value: None,
        }
    }

    /// Waits up to `timeout` (None: forever) and returns a guard that
    /// releases the lock when dropped.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out, [`Error::Config`] for a
    /// timeout over 100 years, [`Error::AlreadyLocked`]
    /// if this thread holds it already, [`Error::Backend`] if Redis cannot
    /// be reached.
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

    /// Acquires for the calling thread without a guard (for bindings and
    /// callers that release elsewhere with [`Lock::release`]), waiting
    /// until `deadline` (a [`Deadline`], or a timeout: None waits forever,
    /// zero tries once). `interrupted` is asked at least every 50 ms while
    /// waiting; when it answers true the wait is abandoned, nothing stays
    /// held, and the call returns [`Error::Interrupted`].
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes, and those of
    /// [`Lock::acquire`].
    pub fn acquire_interruptibly(
        &self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        let deadline = deadline.into();
        self.holds.acquire(holder_number(), deadline, || {
            let token = request_token(&holder_identity(&self.prefix));
            self.semaphore
                .acquire(&token, &self.value, deadline, interrupted)
        })
    }

    /// Releases the calling thread's hold. Ok(false) when the lock had
    /// already been lost (its lease ran out or another holder took over).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread does not hold it.
    pub fn release(&self) -> Result<bool> {
        self.holds
            .release(holder_number(), |hold| self.semaphore.release(hold))
    }

    /// Ends a block that acquired the lock on the calling thread (a guard's
    /// drop, a binding's `with` or `synchronize`): releases the hold like
    /// [`Lock::release`], except in a process forked inside the block,
    /// where the hold is the parent's and this does nothing (Ok(true)).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread holds nothing.
    pub fn leave(&self) -> Result<bool> {
        self.holds
            .leave(holder_number(), |hold| self.semaphore.release(hold))
    }

    /// [`Lock::leave`] that returns at once: the hold is given back in the
    /// background (a guard of an async task dropped, which must not block
    /// its executor).
    pub fn leave_in_background(&self) {
        self.holds.leave_in_background(holder_number());
    }

    /// Whether the calling thread holds the lock and its lease is surely
    /// still live. Reads a flag and the clock; never touches Redis.
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

    /// The fencing token of the calling thread's grant: strictly increasing
    /// across all holders of this name, so a protected resource can reject
    /// writes from a holder that lost the lock.
    pub fn fencing_token(&self) -> Option<u64> {
        self.holds.with(holder_number(), |hold| hold.fence)
    }

    /// Asks Redis whether the calling thread holds the lock: whether the
    /// grant this thread took is still live there.
    /// Without a grant the answer is no, but Redis is still asked, so an
    /// unreachable server is reported the same way either way.
    pub fn owned(&self) -> Result<bool> {
        let token = self.holds.with(holder_number(), |hold| hold.token.clone());
        Ok(self.semaphore.inspect(token.as_deref())?.1)
    }

    /// Asks Redis whether anyone holds the lock.
    pub fn locked(&self) -> Result<bool> {
        Ok(self.semaphore.inspect(None)?.0 > 0)
    }

    /// Gives back every hold of this process in the background and returns
    /// at once, without waiting on Redis: for a lock about to be dropped
    /// where blocking is not allowed (a garbage collector's finalizer). The
    /// drop then finds nothing left to release.
    pub fn release_all_in_background(&self) {
        self.holds.release_all_in_background();
    }

    crate::guard::async_twins!();

    /// The async twin of [`Lock::leave`], for the holder `key` (see
    /// [`Lock::acquire_for_async`]): Ok(true) in a process forked inside
    /// the block, whose hold is the parent's.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if `key` holds nothing.
    pub async fn leave_for_async(&self, key: u64) -> Result<bool> {
        match self.holds.leave_out(binding_holder(key))? {
            Some(hold) => self
                .holds
                .released(self.semaphore.release_async(hold).await),
            None => Ok(true),
        }
    }

    /// The async twin of [`Lock::locked`].
    pub async fn locked_async(&self) -> Result<bool> {
        Ok(self.semaphore.inspect_async(None).await?.0 > 0)
    }

    async fn take_async(&self, holder: u64, deadline: Deadline) -> Result<()> {
        let identity = as_holder_number(holder, || holder_identity(&self.prefix));
        let token = request_token(&identity);
        let taking = Box::pin(self.semaphore.acquire_async(&token, &self.value, deadline));
        self.holds.acquire_async(holder, deadline, taking).await
    }

    async fn release_holder_async(&self, holder: u64) -> Result<bool> {
        let hold = self.holds.take_out(holder)?;
        self.holds
            .released(self.semaphore.release_async(hold).await)
    }

    /// The calling thread's holder identity (`<prefix>-<pid>/<thread>`).
    pub fn identity(&self) -> String {
        holder_identity(&self.prefix)
    }
}

impl Drop for Lock {
    /// A dropped lock gives back what this process still holds, rather than
    /// leaving it to expire.
    fn drop(&mut self) {
        self.holds.release_all();
    }
}

/// Proof that a thread (or, from [`Lock::acquire_async`], a task) holds a
/// [`Lock`]; releases it on drop.
pub type LockGuard<'a> = crate::guard::Guard<'a, Lock>;

crate::guard::async_guard!(Lock);

crate::guard::thread_lock!(Lock);

/// The value of the current holder of the lock `name` (set with
/// [`LockBuilder::value`] under a session), or None when nobody holds it or
/// its holder stored no value. After a holder under a session with
/// [`Behavior::Release`](super::Behavior::Release) let go (released,
/// destroyed or lost), its value stays readable here until the name is
/// granted again; with [`Behavior::Delete`](super::Behavior::Delete) it is
/// gone with the grant.
///
/// # Errors
/// [`Error::Config`] for a bad name or URL, [`Error::Backend`] if Redis
/// cannot be reached.
pub fn holder(url: &str, name: &str) -> Result<Option<String>> {
    let semaphore = Semaphore::new(
        Route::new(server(url, DEFAULT_CONNECT_TIMEOUT)?),
        Keys::new(name)?,
        Shape::Lock,
        Lease::new(DEFAULT_TTL, None, DEFAULT_MAX_REFRESH_FAILS)?,
        format!("lock {name:?}"),
        None,
    );
    Ok(semaphore.holder(&Caller::patient())?.value)
}
