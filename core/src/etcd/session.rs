//! An etcd session: one lease, kept alive every ttl/3, that locks live
//! under (etcd's `concurrency.Session`, with the Redis sessions' meaning).
//! Its locks' keys ride on the session's lease, so they are lost together
//! when it is; `destroy()` revokes it and frees them at once.
//!
//! `lock_delay`: a session that has one also holds a second lease, of ttl +
//! lock_delay, renewed right after the first and only while it is. Each
//! lock it holds puts a bar, `lockyard/<name>.bar`, on that lease; every
//! entry of the name (under any session or none) waits while a bar of
//! another session is there. A clean release deletes its bar; a lost
//! session's bars outlive its keys by lock_delay; `destroy()` revokes them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::Client;
use super::leases::{self, Lease, Leases};
use super::target::Target;
use crate::behavior::Behavior;
use crate::ending::Ending;
use crate::error::{Error, Result};
use crate::identity::random_hex;
use crate::lease::DEFAULT_CONNECT_TIMEOUT;
use crate::limits;
use crate::runtime;

/// A lease that locks live under; see the module docs.
///
/// ```no_run
/// use std::time::{Duration, Instant};
/// use lockyard::etcd::{Lock, Session};
///
/// let url = "etcd://127.0.0.1:2379";
/// let session = Session::builder(url).ttl(Duration::from_secs(15)).build()?;
/// let lock = Lock::builder(url, "task-7").session(&session).value("worker-3").build()?;
/// if let Some(guard) = lock.try_acquire()? {
///     guard.check_health()?; // the session's health, and the key's
/// }
/// session.destroy()?; // frees every lock held under it at once
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct Session {
    state: Arc<SessionState>,
}

/// Options for a [`Session`]; start with [`Session::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct SessionBuilder {
    url: String,
    ttl: Duration,
    behavior: Behavior,
    lock_delay: Duration,
    connect_timeout: Duration,
}

impl SessionBuilder {
    /// The session's ttl unless [`SessionBuilder::ttl`] sets one.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);
    /// The session's lock_delay unless [`SessionBuilder::lock_delay`] sets one.
    pub const DEFAULT_LOCK_DELAY: Duration = Duration::from_secs(15);

    /// How long the session outlives its last keep-alive (default
    /// [`DEFAULT_TTL`](Self::DEFAULT_TTL)): its lease's ttl, in whole
    /// seconds (rounded up; at least 1 s, at most 30 days).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// What the session's end does to its locks' values (default
    /// [`Behavior::default`]): with [`Behavior::Release`] a lock's value
    /// stays readable through [`holder`](super::holder) while its name is
    /// barred after a lost session.
    pub fn behavior(mut self, behavior: Behavior) -> Self {
        self.behavior = behavior;
        self
    }
    /// How long the names of a session lost without [`Session::destroy`]
    /// stay barred after its lease ran out (default
    /// [`DEFAULT_LOCK_DELAY`](Self::DEFAULT_LOCK_DELAY); zero disables it;
    /// whole seconds, rounded up; at most 30 days).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }
    /// How long one request to a member may take before the next member is
    /// tried (default [`DEFAULT_CONNECT_TIMEOUT`](crate::lease::DEFAULT_CONNECT_TIMEOUT)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Validates the options, grants the session's lease (and its bar
    /// lease) and starts keeping them alive.
    ///
    /// # Errors
    /// [`Error::Config`] for a ttl under 1 s, a ttl, lock_delay or
    /// connect_timeout over 30 days, or a bad URL; [`Error::Backend`] if no
    /// member answers.
    pub fn build(self) -> Result<Session> {
        let unbuilt = self.prepare()?;
        let lease = runtime::block_on(unbuilt.leases.live(unbuilt.until))?;
        Ok(unbuilt.finish(lease))
    }

    /// The async twin of [`SessionBuilder::build`]: the lease is granted on
    /// lockyard's runtime and awaited on any executor. Dropped before it
    /// completes, it revokes a lease it was granted.
    ///
    /// # Errors
    /// Those of [`SessionBuilder::build`].
    pub async fn build_async(self) -> Result<Session> {
        let unbuilt = self.prepare()?;
        let (leases, until) = (unbuilt.leases.clone(), unbuilt.until);
        let granting = async move { leases.live(until).await };
        let lease = runtime::on_runtime("an etcd session", granting).await?;
        Ok(unbuilt.finish(lease))
    }

    /// Checks the options and makes the session's leases, not yet granted.
    fn prepare(self) -> Result<Unbuilt> {
        let target = Target::parse(&self.url)?;
        let ttl_secs = leases::ttl_secs(self.ttl)?;
        let lock_delay = limits::period("lock_delay", self.lock_delay)?;
        let connect_timeout = limits::positive_period("connect_timeout", self.connect_timeout)?;
        let delay_secs = lock_delay.as_secs() as i64 + i64::from(lock_delay.subsec_nanos() > 0);
        let client = Arc::new(Client::new(target, connect_timeout));
        let bar_ttl = (delay_secs > 0).then_some(ttl_secs + delay_secs);
        Ok(Unbuilt {
            leases: Arc::new(Leases::session(&client, ttl_secs, bar_ttl)),
            until: Instant::now() + connect_timeout * 3,
            client,
            behavior: self.behavior,
            lock_delay,
            ttl: Duration::from_secs(ttl_secs as u64),
        })
    }
}

/// A session whose lease is being granted. Dropped unfinished, its leases
/// revoke what was granted.
struct Unbuilt {
    client: Arc<Client>,
    leases: Arc<Leases>,
    /// When the grant gives up.
    until: Instant,
    behavior: Behavior,
    lock_delay: Duration,
    ttl: Duration,
}

impl Unbuilt {
    fn finish(self, lease: Arc<Lease>) -> Session {
        Session {
            state: Arc::new(SessionState {
                id: random_hex(8),
                client: self.client,
                leases: self.leases,
                lease,
                behavior: self.behavior,
                lock_delay: self.lock_delay,
                ttl: self.ttl,
                ending: Ending::new(),
                pid: crate::pid::current(),
            }),
        }
    }
}

impl Session {
    /// Options for a session on the etcd cluster at `url`.
    pub fn builder(url: impl Into<String>) -> SessionBuilder {
        SessionBuilder {
            url: url.into(),
            ttl: SessionBuilder::DEFAULT_TTL,
            behavior: Behavior::default(),
            lock_delay: SessionBuilder::DEFAULT_LOCK_DELAY,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The session's random id, written in its bars.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// The lease's ttl, in whole seconds.
    pub fn ttl(&self) -> Duration {
        self.state.ttl
    }

    /// See [`SessionBuilder::behavior`].
    pub fn behavior(&self) -> Behavior {
        self.state.behavior
    }

    /// See [`SessionBuilder::lock_delay`].
    pub fn lock_delay(&self) -> Duration {
        self.state.lock_delay
    }

    /// Whether the session (and so every lock under it) is surely live:
    /// not destroyed, its lease not gone, kept alive within its ttl. Reads
    /// a flag and the clock; never touches etcd.
    pub fn healthy(&self) -> bool {
        self.state.check_health().is_ok()
    }

    /// # Errors
    /// [`Error::LockUnhealthy`] if the session was destroyed or may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.state.check_health()
    }

    /// Frees every lock held under the session at once (no lock_delay):
    /// revokes its leases, so that its keys and bars go. Locks under it
    /// report unhealthy afterwards. Called again (on any thread), it waits
    /// until the first call has ended the session, then does nothing. In a
    /// process forked from the one that built it, it only marks the session
    /// ended for this process.
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answered; the session is ended here
    /// all the same, and etcd frees what it held when the leases run out.
    pub fn destroy(&self) -> Result<()> {
        self.state.destroy()
    }

    /// The async twin of [`Session::destroy`], run on lockyard's blocking
    /// threads. Dropped before it ends, the destroy runs to its end.
    ///
    /// # Errors
    /// Those of [`Session::destroy`].
    pub async fn destroy_async(&self) -> Result<()> {
        let (state, first) = (self.state.clone(), self.state.ending.begin(|| {}));
        let what = state.what();
        runtime::unblocked(move || state.end_destroy(first))
            .await
            .unwrap_or_else(|| Err(runtime::shut_down(&what)))
    }

    /// Destroys the session as a drop does, in the background, and returns
    /// at once (a garbage collector's finalizer).
    pub fn destroy_in_background(&self) {
        let (state, first) = (self.state.clone(), self.state.ending.begin(|| {}));
        runtime::spawn_blocking(move || {
            if let Err(e) = state.end_destroy(first) {
                log::warn!("destroying etcd session {} failed: {e}", state.id);
            }
        });
    }

    pub(crate) fn state(&self) -> &Arc<SessionState> {
        &self.state
    }
}

impl Drop for Session {
    /// A dropped session is destroyed, unless a destroy is under way
    /// already: a drop never waits for one (after
    /// [`Session::destroy_in_background`], it must return at once).
    fn drop(&mut self) {
        if !self.state.ending.begin(|| {}) {
            return;
        }
        if let Err(e) = self.state.end_destroy(true) {
            log::warn!(
                "destroying etcd session {} on drop failed: {e}",
                self.state.id
            );
        }
    }
}

pub(crate) struct SessionState {
    pub(crate) id: String,
    pub(crate) client: Arc<Client>,
    pub(crate) leases: Arc<Leases>,
    /// The one lease of [`SessionState::leases`], never granted again.
    lease: Arc<Lease>,
    pub(crate) behavior: Behavior,
    lock_delay: Duration,
    ttl: Duration,
    /// Destroyed (or being destroyed) once, however many ask.
    ending: Ending,
    pid: u32,
}

impl SessionState {
    /// The value a lock with `value` keeps in its bars: with behavior
    /// `release`, readable through `holder` while the name is barred.
    pub(crate) fn kept_value(&self, value: Option<&str>) -> Option<String> {
        match self.behavior {
            Behavior::Release => value.map(str::to_owned),
            _ => None,
        }
    }

    fn what(&self) -> String {
        format!("etcd session {}", self.id)
    }

    /// Ok while locks may be taken under the session: a Config error once
    /// it was destroyed, LockUnhealthy once it may be lost, Config in a
    /// forked child (its keep-alive runs in the parent).
    pub(crate) fn usable(&self) -> Result<()> {
        if self.ending.begun() {
            return Err(Error::config(format!(
                "{} was destroyed; locks cannot be taken under it",
                self.what()
            )));
        }
        if self.pid != crate::pid::current() {
            return Err(Error::config(format!(
                "{} belongs to the process that built it (pid {}); build a session in this one",
                self.what(),
                self.pid
            )));
        }
        self.check_health()
    }

    fn check_health(&self) -> Result<()> {
        if self.ending.begun() {
            return Err(Error::LockUnhealthy {
                what: self.what(),
                reason: "the session was destroyed".into(),
            });
        }
        match self.lease.health.problem() {
            None => Ok(()),
            Some(reason) => Err(Error::LockUnhealthy {
                what: self.what(),
                reason,
            }),
        }
    }

    /// Destroys the session once: a later call waits until the first one
    /// (of this process) has ended it, then does nothing.
    fn destroy(&self) -> Result<()> {
        self.end_destroy(self.ending.begin(|| {}))
    }

    /// Ends a destroy begun by `self.ending`: the `first` one revokes the
    /// lease (a forked child only marks it ended for itself), a later one
    /// waits for that.
    fn end_destroy(&self, first: bool) -> Result<()> {
        self.ending.run(first, || {
            if self.pid != crate::pid::current() {
                return Ok(());
            }
            runtime::block_on(self.leases.end("the session was destroyed"))
        })
    }
}
