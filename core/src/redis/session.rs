//! A Redis session (Consul's session, on Redis): one lease, renewed every
//! ttl/2 in the background, that locks and elections can live under. Their
//! grants carry no TTL of their own: the session's renewal refreshes them
//! all, their health is the session's, and when the session is lost they
//! are lost together.
//!
//! Keys: the session itself is `lockyard:session:{<id>}` (PX ttl); each
//! grant under it is an ordinary grant of its name whose `bound` entry
//! records the session's lock_delay and behavior and the grant's value
//! (see `scripts/prelude.lua`).
//!
//! What stays in Redis after [`Session::destroy`]: only keys that expire on
//! their own — each name's fencing counter (ttl + 1 h after its last
//! grant, as for every lock), the value a [`Behavior::Release`] session
//! left behind (1 h, or until the name is granted again), and an
//! election's terms stream (1 h after its last term). A session lost
//! without `destroy()` leaves its grants until ttl + lock_delay, then the
//! same.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::keepalive::{KeepAlive, Member, Membership};
use super::route::{Link, Route};
use super::server::server;
use crate::ending::Ending;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::identity::random_hex;
use crate::lease::{Lease, DEFAULT_CONNECT_TIMEOUT};
use crate::limits;
use crate::runtime;

pub use crate::behavior::Behavior;

/// A lease that locks and elections live under; see the module docs.
///
/// ```no_run
/// use std::time::Duration;
/// use lockyard::redis::{Lock, Session};
///
/// let url = "redis://127.0.0.1:6379/0";
/// let session = Session::builder(url).ttl(Duration::from_secs(15)).build()?;
/// let lock = Lock::builder(url, "task-7").session(&session).value("worker-3").build()?;
/// if let Some(guard) = lock.try_acquire()? {
///     guard.check_health()?; // the session's health
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

    /// How long the session outlives its last renewal (default
    /// [`DEFAULT_TTL`](Self::DEFAULT_TTL); at least 10 ms, at most 30
    /// days). Renewed every ttl/2.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// What the session's end does to its locks' values (default
    /// [`Behavior::default`]).
    pub fn behavior(mut self, behavior: Behavior) -> Self {
        self.behavior = behavior;
        self
    }
    /// How long the locks of a session that was lost without
    /// [`Session::destroy`] stay barred, counted from the moment their lease
    /// ran out (default [`DEFAULT_LOCK_DELAY`](Self::DEFAULT_LOCK_DELAY);
    /// zero disables it; at most 30 days).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }
    /// How long connecting to Redis may take (default
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::lease::DEFAULT_CONNECT_TIMEOUT);
    /// at most 30 days).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Validates the options, creates the session in Redis and starts
    /// renewing it.
    ///
    /// # Errors
    /// [`Error::Config`] for a TTL under 10 ms, a TTL, lock_delay or
    /// connect_timeout over 30 days, or a bad URL,
    /// [`Error::Backend`] if Redis cannot be reached.
    pub fn build(self) -> Result<Session> {
        let keep_alive = Arc::new(self.keep_alive()?);
        keep_alive.create()?;
        Ok(self.start(keep_alive))
    }

    /// The async twin of [`SessionBuilder::build`], on the calling task's
    /// runtime. Dropped before it completes, or failed, it deletes the
    /// session's key (if its create reached Redis, or is on its way) in the
    /// background.
    ///
    /// # Errors
    /// Those of [`SessionBuilder::build`]; [`Error::Config`] when awaited
    /// outside a tokio runtime.
    pub async fn build_async(self) -> Result<Session> {
        let keep_alive = Arc::new(self.keep_alive()?);
        let mut unfinished = Unfinished {
            keep_alive: keep_alive.clone(),
            sent_on: Mutex::new(None),
            armed: true,
        };
        keep_alive.create_async(&unfinished.sent_on).await?;
        unfinished.armed = false;
        Ok(self.start(keep_alive))
    }

    /// Validates the options; the session's keep-alive, before its key
    /// exists.
    fn keep_alive(&self) -> Result<KeepAlive> {
        if self.ttl < Duration::from_millis(10) {
            return Err(Error::config(format!(
                "a session's ttl must be at least 10 ms, got {:?}",
                self.ttl
            )));
        }
        limits::positive_period("connect_timeout", self.connect_timeout)?;
        limits::period("lock_delay", self.lock_delay)?;
        let lease = Lease::new(self.ttl, Some(self.ttl / 2), 1)?;
        let route = Route::new(server(&self.url, self.connect_timeout)?);
        let id = random_hex(16);
        let value = format!("{} {:?}", crate::pid::current(), self.behavior);
        Ok(KeepAlive::new(&id, route, lease, value))
    }

    /// The session of `keep_alive`, whose key was created: renewed from now on.
    fn start(self, keep_alive: Arc<KeepAlive>) -> Session {
        let state = Arc::new(SessionState {
            id: keep_alive.id().to_owned(),
            keep_alive: keep_alive.clone(),
            behavior: self.behavior,
            lock_delay: self.lock_delay,
            ending: Ending::new(),
            pid: crate::pid::current(),
            renewer: Mutex::new(None),
        });
        let renewer = runtime::spawn(keep_alive.run());
        *state.renewer.lock().unwrap_or_else(|e| e.into_inner()) = Some(renewer);
        Session { state }
    }
}

/// A session whose create was sent but not answered when its future was
/// dropped, or answered with a failure: its key may be in Redis, or on its
/// way there, and nobody would renew or delete it.
struct Unfinished {
    keep_alive: Arc<KeepAlive>,
    sent_on: Mutex<Option<Link>>,
    armed: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Deleted twice: now, for a create that has landed, which an
        // exiting process waits for; and behind the create on its own
        // connection, for one its runtime has yet to write, which it does
        // not (a runtime that ends never writes it either).
        let keep_alive = self.keep_alive.clone();
        runtime::spawn_awaited(async move {
            if let Err(e) = keep_alive.delete_async().await {
                log::debug!("deleting an unfinished session failed: {e}");
            }
        });
        if let Some(link) = self
            .sent_on
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let keep_alive = self.keep_alive.clone();
            runtime::spawn(async move { keep_alive.delete_behind(link).await });
        }
    }
}

impl Session {
    /// Options for a session on the Redis server at `url`.
    pub fn builder(url: impl Into<String>) -> SessionBuilder {
        SessionBuilder {
            url: url.into(),
            ttl: SessionBuilder::DEFAULT_TTL,
            behavior: Behavior::default(),
            lock_delay: SessionBuilder::DEFAULT_LOCK_DELAY,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// A session on the Redis server at `url` with the default options,
    /// created on the calling task's runtime: `Session::builder(url)`'s
    /// [`SessionBuilder::build_async`].
    ///
    /// # Errors
    /// Those of [`SessionBuilder::build_async`].
    pub async fn new_async(url: impl Into<String>) -> Result<Session> {
        Session::builder(url).build_async().await
    }

    /// The session's random id, for logs and debugging.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// See [`SessionBuilder::ttl`].
    pub fn ttl(&self) -> Duration {
        self.state.lease().ttl
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
    /// not destroyed, not lost, renewed within its TTL. Reads a flag and
    /// the clock; never touches Redis.
    pub fn healthy(&self) -> bool {
        self.state.health().is_healthy()
    }

    /// # Errors
    /// [`Error::LockUnhealthy`] if the session was destroyed or may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.state.check_health()
    }

    /// Frees every lock held under the session at once (no lock_delay),
    /// deletes the session from Redis and stops renewing it. Locks under it
    /// report unhealthy afterwards. Calling it again does nothing, once the
    /// first call has ended (a call made meanwhile waits for it).
    ///
    /// In a process forked from the one that created the session, it ends
    /// the session only for this process: it frees the locks this process
    /// took under it, and leaves the session and its parent's locks alone.
    ///
    /// # Errors
    /// [`Error::Backend`] if Redis could not be asked; the session is
    /// destroyed locally all the same, and what Redis still holds runs out
    /// after ttl + lock_delay.
    pub fn destroy(&self) -> Result<()> {
        self.state.destroy()
    }

    /// The async twin of [`Session::destroy`]: the same steps on the
    /// runtime's blocking threads, awaited. Dropped before it completes,
    /// the destroy finishes in the background.
    ///
    /// # Errors
    /// Those of [`Session::destroy`].
    pub async fn destroy_async(&self) -> Result<()> {
        let (state, first) = (self.state.clone(), self.state.mark_destroyed());
        runtime::unblocked(move || state.end_destroy(first))
            .await
            .unwrap_or_else(|| {
                Err(Error::config(format!(
                    "destroying {} did not finish: lockyard's runtime shut down",
                    self.state.what()
                )))
            })
    }

    /// Destroys the session as a drop does, on the runtime's blocking
    /// threads, and returns at once: for a session about to be dropped where
    /// blocking is not allowed (a garbage collector's finalizer). The drop
    /// then finds it destroyed.
    pub fn destroy_in_background(&self) {
        let (state, first) = (self.state.clone(), self.state.mark_destroyed());
        runtime::spawn_blocking(move || {
            if let Err(e) = state.end_destroy(first) {
                log::warn!("destroying session {} failed: {e}", state.id);
            }
        });
    }

    pub(crate) fn state(&self) -> &Arc<SessionState> {
        &self.state
    }
}

impl Drop for Session {
    /// A dropped session is destroyed (in a forked child: only for it),
    /// unless a destroy is under way already: a drop never waits for one
    /// (after [`Session::destroy_in_background`], it must return at once).
    fn drop(&mut self) {
        if !self.state.mark_destroyed() {
            return;
        }
        if let Err(e) = self.state.end_destroy(true) {
            log::warn!("destroying session {} on drop failed: {e}", self.state.id);
        }
    }
}

pub(crate) struct SessionState {
    id: String,
    keep_alive: Arc<KeepAlive>,
    behavior: Behavior,
    lock_delay: Duration,
    /// Destroyed (or being destroyed) once, however many ask.
    ending: Ending,
    pid: u32,
    renewer: Mutex<Option<JoinHandle<()>>>,
}

impl SessionState {
    pub(crate) fn lease(&self) -> &Lease {
        self.keep_alive.lease()
    }

    fn health(&self) -> &Arc<Health> {
        self.keep_alive.health()
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    fn what(&self) -> String {
        format!("session {}", self.id)
    }

    /// Whether new grants may be taken under the session.
    pub(crate) fn usable(&self) -> Result<()> {
        if self.ending.begun() {
            return Err(self.destroyed_error());
        }
        self.check_health()
    }

    fn destroyed_error(&self) -> Error {
        Error::config(format!(
            "{} was destroyed; locks cannot be bound to it",
            self.what()
        ))
    }

    fn check_health(&self) -> Result<()> {
        match self.health().problem() {
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
        self.end_destroy(self.mark_destroyed())
    }

    /// Ends a destroy marked with [`SessionState::mark_destroyed`]: the
    /// `first` one does the work, a later one waits for it.
    fn end_destroy(&self, first: bool) -> Result<()> {
        self.ending.run(first, || self.end())
    }

    /// Marks the session destroyed, and so unhealthy, and this process as
    /// the one ending it; false if it was already.
    fn mark_destroyed(&self) -> bool {
        self.ending
            .begin(|| self.health().mark_lost("the session was destroyed"))
    }

    /// What destroying does once the session is marked destroyed.
    fn end(&self) -> Result<()> {
        // A forked child must not end the session its parent still uses,
        // nor touch the renewer task, which runs on the parent's runtime.
        let creator = self.pid == crate::pid::current();
        if creator {
            if let Some(renewer) = self
                .renewer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                renewer.abort();
            }
        }
        let released = self.keep_alive.release_all();
        if !creator {
            return released;
        }
        // The key goes even when a release failed; that failure is the one
        // reported, as the one that leaves a lock behind.
        let deleted = self.keep_alive.delete();
        released.and(deleted)
    }
}

/// How a lock or election binds its grants to a session.
#[derive(Clone)]
pub(crate) struct Binding {
    state: Arc<SessionState>,
    /// Grants record election terms (see `Election::observe`).
    election: bool,
}

impl Binding {
    pub(crate) fn new(state: Arc<SessionState>, election: bool) -> Binding {
        Binding { state, election }
    }

    /// The `bound` entry of a grant with `value`, once the session is
    /// known to be usable.
    pub(crate) fn meta(&self, value: &str) -> Result<String> {
        self.state.usable()?;
        Ok(format!(
            "{} {} {} {value}",
            self.state.lock_delay.as_millis(),
            u8::from(self.state.behavior == Behavior::Delete),
            u8::from(self.election)
        ))
    }

    pub(crate) fn health(&self) -> Arc<Health> {
        self.state.health().clone()
    }

    /// Ok while the session may still take grants: a wait re-checks this,
    /// so one whose session was destroyed or lost meanwhile ends instead
    /// of being granted a name nobody would renew.
    pub(crate) fn check_live(&self) -> Result<()> {
        self.state.check_health()
    }

    /// Confirms a new grant's session against Redis: its key must still be
    /// there. The renewal notices a vanished key only every ttl/2; a grant
    /// made in between (the key ran out, Redis restarted) would be renewed
    /// by nobody and close the name for its ttl and lock_delay. A missing
    /// key loses the session at once.
    pub(crate) fn confirm(&self) -> Result<()> {
        self.state.keep_alive.confirm()?;
        self.state.check_health()
    }

    /// Puts a new grant under the session's renewal. A grant that raced
    /// with [`Session::destroy`] (granted after destroy drained the
    /// session) is given back here instead of outliving the session.
    pub(crate) fn join(&self, member: Arc<dyn Member>) -> Result<Membership> {
        let membership = self.state.keep_alive.join(member.clone());
        if self.state.ending.begun() {
            drop(membership);
            member.release()?;
            return Err(Error::LockUnhealthy {
                what: self.state.what(),
                reason: "the session was destroyed while the grant was made".into(),
            });
        }
        Ok(membership)
    }
}
