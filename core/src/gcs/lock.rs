//! `gcs::Lock`: the Ruby gem distributed-lock-google-cloud-storage's lock,
//! with its options, held per thread like the Redis lock. The algorithm is
//! in `engine.rs`; this file is the public face and the per-thread state.

use std::sync::Arc;
use std::time::Duration;

use super::engine::{Engine, Hold};
use super::options::LockBuilder;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::holds::{PerHolder, ProcessHolds};
use crate::identity::{
    as_holder_number, binding_holder, forked_since_start, holder_number, note_process_start,
    random_hex,
};
use crate::wait::{Deadline, InTime, Interrupt, NEVER};

/// A distributed mutual-exclusion lock on one object in a Google Cloud
/// Storage bucket: no infrastructure beyond a bucket you already have.
///
/// Taking it creates the object only if absent; a holder that crashed is
/// recovered once the object's `expires_at` (server time) has passed, or at
/// once by the same identity; a held lock is refreshed in the background,
/// and [`Lock::check_health`] tells whether it may have been lost. Each
/// thread is a separate holder (unless `thread_safe(false)`).
///
/// ```no_run
/// use std::time::Duration;
/// use lockyard::gcs::Lock;
///
/// let lock = Lock::builder("my-bucket", "locks/deploy")
///     .ttl(Duration::from_secs(300))
///     .build()?;
/// let guard = lock.acquire(Some(Duration::from_secs(600)))?;
/// guard.check_health()?; // before each step that must not run twice
/// println!("fencing token (object generation): {}", guard.fencing_token());
/// guard.release()?;
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct Lock {
    pub(super) engine: Arc<Engine>,
    /// `None`: random per lock object, with the pid appended at use.
    identity_prefix: Option<String>,
    random_prefix: String,
    thread_safe: bool,
    hold_per_instance: bool,
    default_timeout: Option<Duration>,
    holds: PerHolder<Hold>,
}

impl Lock {
    /// Options for the lock object `path` in the existing bucket `bucket_name`.
    pub fn builder(bucket_name: impl Into<String>, path: impl Into<String>) -> LockBuilder {
        LockBuilder::new(bucket_name.into(), path.into())
    }

    /// The lock over `engine`, as validated options describe it.
    pub(super) fn from_parts(
        engine: Engine,
        identity_prefix: Option<String>,
        thread_safe: bool,
        hold_per_instance: bool,
        default_timeout: Option<Duration>,
    ) -> Lock {
        note_process_start();
        let engine = Arc::new(engine);
        let giver = engine.clone();
        Lock {
            // With hold_per_instance the hold is the lock object's (the
            // gem's): the thread that took it may end and another unlock it.
            holds: PerHolder::with_owner(
                engine.what.clone(),
                move |hold| giver.release(hold, &|| false),
                hold_per_instance,
            ),
            engine,
            identity_prefix,
            random_prefix: random_hex(12),
            thread_safe,
            hold_per_instance,
            default_timeout,
        }
    }

    /// Waits up to `timeout` (None: forever) and returns a guard that
    /// releases the lock when dropped.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out, [`Error::AlreadyLocked`]
    /// if this thread holds it already, [`Error::Backend`] if the bucket
    /// cannot be used (missing, no permission), or if it still fails
    /// transiently (429, 5xx, unreachable) when the timeout (at least 2 s)
    /// runs out; an object its own create may have left is removed first.
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<LockGuard<'_>> {
        self.acquire_interruptibly(timeout, NEVER)?;
        Ok(LockGuard::new(self))
    }

    /// One attempt, never waits (beyond clearing a stale object, or riding
    /// out up to 2 s of transient failures).
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

    /// The TTL.
    pub fn ttl(&self) -> Duration {
        self.engine.lease.ttl
    }

    /// Acquires for the calling thread without a guard (for bindings),
    /// waiting until `deadline` (a [`Deadline`], or a timeout: None waits
    /// forever, zero tries once). `interrupted` is asked at least every
    /// 50 ms while waiting between requests; when it answers true the wait
    /// ends with [`Error::Interrupted`] and nothing is held.
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
        self.holds.acquire(self.key(), deadline, || {
            self.engine.acquire(&self.identity(), deadline, interrupted)
        })?;
        self.engine.log(log::Level::Debug, || "Locked".into());
        Ok(())
    }

    /// Releases the calling thread's hold: deletes exactly the object
    /// version it holds. Ok(false) when the server no longer had it (it went
    /// stale and was taken over, or was deleted), or when someone else
    /// changed its metadata: then the object is left as it is. Transient
    /// failures are retried until the lease deadline; a retried delete that
    /// finds the object gone counts as released (its first try landed,
    /// reply lost).
    ///
    /// # Errors
    /// [`Error::Backend`] if the delete still fails at the lease deadline
    /// (the object then goes stale by itself); [`Error::NotLocked`] if the
    /// calling thread does not hold it.
    pub fn release(&self) -> Result<bool> {
        self.release_interruptibly(&|| false)
    }

    /// [`Lock::release`] with an interrupt check, polled between retries:
    /// while the bucket keeps failing, a release may take until the lease
    /// deadline. Interrupted, it returns [`Error::Interrupted`] and the
    /// object, no longer refreshed, goes stale after its ttl.
    pub fn release_interruptibly(&self, interrupted: Interrupt<'_>) -> Result<bool> {
        self.holds
            .release(self.reached(), |hold| self.give_back(hold, interrupted))
    }

    fn give_back(&self, hold: Hold, interrupted: Interrupt<'_>) -> Result<bool> {
        self.note_released(self.engine.release(hold, interrupted))
    }

    /// Logs a release the bucket confirmed, as the gem does.
    fn note_released(&self, released: Result<bool>) -> Result<bool> {
        if let Ok(true) = released {
            self.engine.log(log::Level::Debug, || "Unlocked".into());
        }
        released
    }

    /// Ends a block that acquired the lock on the calling thread, like
    /// [`Lock::release`], except in a process forked inside the block, where
    /// the hold is the parent's and this does nothing (Ok(true)).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread holds nothing.
    pub fn leave(&self) -> Result<bool> {
        self.leave_interruptibly(&|| false)
    }

    /// [`Lock::leave`] with an interrupt check, like
    /// [`Lock::release_interruptibly`].
    pub fn leave_interruptibly(&self, interrupted: Interrupt<'_>) -> Result<bool> {
        self.holds
            .leave(self.key(), |hold| self.give_back(hold, interrupted))
    }

    /// Forgets the calling thread's hold without touching the server and
    /// stops refreshing it (the gem's `abandon`); the object stays until it
    /// goes stale or the same identity takes it again. True if there was one.
    pub fn abandon(&self) -> bool {
        let reached = self.reached();
        let hold = self.holds().remove(&reached);
        self.engine.log(log::Level::Debug, || {
            let what = if hold.is_some() { "locked" } else { "unlocked" };
            format!("Abandoning {what} lock")
        });
        hold.map(|hold| hold.stop()).is_some()
    }

    /// Gives back every hold of this process in the background and returns
    /// at once: for a lock about to be dropped where blocking is not allowed
    /// (a garbage collector's finalizer). The drop then finds nothing left.
    pub fn release_all_in_background(&self) {
        self.holds.release_all_in_background();
    }

    /// [`Lock::leave`] that returns at once: the hold is given back in the
    /// background (a guard of an async task dropped, which must not block
    /// its executor).
    pub fn leave_in_background(&self) {
        self.holds.leave_in_background(self.key());
    }

    /// Whether the calling thread holds the lock and its lease is surely
    /// still live. Reads a flag and the clock; no request. (With
    /// `hold_per_instance`, this and the other methods that say "the
    /// calling thread's hold" reach whichever thread's hold there is.)
    pub fn healthy(&self) -> bool {
        self.holds.healthy(self.reached())
    }

    /// The gem's `healthy?`: whether the calling thread's hold is healthy.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if there is no hold to ask about.
    pub fn held_and_healthy(&self) -> Result<bool> {
        match self.check_health() {
            Ok(()) => Ok(true),
            Err(crate::Error::LockUnhealthy { .. }) => Ok(false),
            Err(other) => Err(other),
        }
    }

    /// Ok if the calling thread holds the lock and it is healthy.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if not held, [`Error::LockUnhealthy`] if it may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.holds.check_health(self.reached())
    }

    /// The last refresh failure (of any hold of this lock object), kept
    /// after the lock heals or is released, as in the gem.
    pub fn last_refresh_error(&self) -> Option<String> {
        self.engine
            .last_refresh_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The object generation of the calling thread's hold: a new holder
    /// always gets a larger one, so it serves as a fencing token.
    pub fn fencing_token(&self) -> Option<u64> {
        self.holds.with(self.key(), |hold| hold.generation as u64)
    }

    /// Whether the calling thread holds it by this process's own state.
    pub fn owned_according_to_internal_state(&self) -> bool {
        self.holds().contains_key(&self.key())
    }

    /// Whether any thread of this process holds it by its own state.
    pub fn locked_according_to_internal_state(&self) -> bool {
        !self.holds().is_empty()
    }

    /// Asks the server whether the calling thread's identity holds it.
    pub fn owned(&self) -> Result<bool> {
        Ok(self.engine.inspect(&self.identity())?.1)
    }

    /// Asks the server whether the lock object exists (stale or not).
    pub fn locked(&self) -> Result<bool> {
        Ok(self.engine.inspect(&self.identity())?.0)
    }

    crate::guard::async_twins!();

    /// The async twin of [`Lock::leave`], for the holder `key`: Ok(true)
    /// in a process forked inside the block, whose hold is the parent's.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if `key` holds nothing.
    pub async fn leave_for_async(&self, key: u64) -> Result<bool> {
        let holder = as_holder_number(binding_holder(key), || self.key());
        match self.holds.leave_out(holder)? {
            Some(hold) => self.give_back_async(hold).await,
            None => Ok(true),
        }
    }

    /// The async twin of [`Lock::locked`].
    pub async fn locked_async(&self) -> Result<bool> {
        Ok(self.engine.inspect_async(self.identity()).await?.0)
    }

    async fn take_async(&self, holder: u64, deadline: Deadline) -> Result<()> {
        let (key, identity) = as_holder_number(holder, || (self.key(), self.identity()));
        let taking = Box::pin(self.engine.acquire_async(&identity, deadline));
        self.holds.acquire_async(key, deadline, taking).await?;
        self.engine.log(log::Level::Debug, || "Locked".into());
        Ok(())
    }

    async fn release_holder_async(&self, holder: u64) -> Result<bool> {
        let reached = as_holder_number(holder, || self.reached());
        let hold = self.holds.take_out(reached)?;
        self.give_back_async(hold).await
    }

    async fn give_back_async(&self, hold: Hold) -> Result<bool> {
        let released = self.engine.release_async(hold).await;
        self.note_released(self.holds.released(released))
    }

    /// The calling thread's holder identity, as stored in the object.
    ///
    /// A given prefix is used as is in a process started afresh (the gem's
    /// identities, so a restarted program that keeps its prefix recovers its
    /// abandoned lock at once). A process forked from one where lockyard
    /// ran appends its pid, whether it inherited the lock or built its own
    /// (pre-forking servers build one per worker from the same settings):
    /// otherwise it would pass for its parent or its siblings and take their
    /// live hold by the gem's instant recovery.
    pub fn identity(&self) -> String {
        let pid = crate::pid::current();
        let prefix = match &self.identity_prefix {
            Some(prefix) if !forked_since_start() => prefix.clone(),
            Some(prefix) => format!("{prefix}-{pid}"),
            None => format!("{}-{pid}", self.random_prefix),
        };
        if self.thread_safe {
            format!("{prefix}/{}", holder_number())
        } else {
            prefix
        }
    }

    /// The holder: the calling thread, or the whole process when the lock
    /// is not thread-safe (the gem's `thread_safe: false`).
    fn key(&self) -> u64 {
        if self.thread_safe {
            holder_number()
        } else {
            0
        }
    }

    /// The hold that release, abandon and the health checks act on: the
    /// holder's own, or with `hold_per_instance` the newest there is. A
    /// GCS object has one holder at a time, so a lock object has at most
    /// one hold that is not already lost, and it is the newest: a hold
    /// lost (its object deleted or taken over) stays in the map, with an
    /// older generation, until released, while another thread may take the
    /// object anew. Any other pick (the map's first) could report the lost
    /// hold unhealthy and release it, leaving the live one held.
    fn reached(&self) -> u64 {
        let own = self.key();
        if !self.hold_per_instance {
            return own;
        }
        let holds = self.holds();
        if holds.contains_key(&own) {
            return own;
        }
        holds
            .iter()
            .max_by_key(|(_, hold)| hold.generation)
            .map_or(own, |(holder, _)| *holder)
    }

    fn holds(&self) -> ProcessHolds<'_, u64, Hold> {
        self.holds.get()
    }
}

impl Drop for Lock {
    /// A dropped lock gives back what this process still holds.
    fn drop(&mut self) {
        self.holds.release_all();
    }
}

/// Proof that the calling thread (or, from [`Lock::acquire_async`], task)
/// holds a [`Lock`]; releases it on drop.
pub type LockGuard<'a> = crate::guard::Guard<'a, Lock>;

crate::guard::async_guard!(Lock);

crate::guard::thread_lock!(Lock);
