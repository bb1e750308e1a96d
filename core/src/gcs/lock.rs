//! `gcs::Lock`: the Ruby gem distributed-lock-google-cloud-storage's lock,
//! with its options, held per thread like the Redis lock. The algorithm is
//! in `holder.rs`; this file is the public face and the per-thread state.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::auth::{Auth, Credentials, Endpoint};
use super::backoff::Backoff;
use super::client::{HttpOptions, HttpStore};
use super::holder::{Hold, Holder, LogSink, ServerClock};
use super::store::Store;
use crate::error::{Error, Result};
use crate::identity::{random_hex, thread_number};
use crate::redis::settings::Lease;

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
    holder: Arc<Holder>,
    /// `None`: random per lock object, with the pid appended at use.
    identity_prefix: Option<String>,
    random_prefix: String,
    thread_safe: bool,
    default_timeout: Option<Duration>,
    holds: Mutex<HashMap<(u32, u64), Hold>>,
}

/// Options for a [`Lock`]; start with [`Lock::builder`]. Names and
/// defaults are the gem's.
#[derive(Clone)]
#[must_use]
pub struct LockBuilder {
    bucket_name: String,
    path: String,
    ttl: Duration,
    timeout: Option<Duration>,
    refresh_interval: Option<Duration>,
    max_refresh_fails: u32,
    backoff_min: Duration,
    backoff_max: Duration,
    backoff_multiplier: f64,
    instance_identity_prefix: Option<String>,
    thread_safe: bool,
    object_acl: Option<String>,
    credentials: Credentials,
    emulator_host: Option<String>,
    endpoint: Option<String>,
    user_project: Option<String>,
    request_timeout: Duration,
    log: Option<LogSink>,
    store: Option<Arc<dyn Store>>,
}

impl LockBuilder {
    /// How long the lock outlives its holder's last refresh (default 300 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// The wait of [`Lock::lock`] (default: forever).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }
    /// Refresh period, below ttl / max_refresh_fails (default a third of that).
    pub fn refresh_interval(mut self, every: Duration) -> Self {
        self.refresh_interval = Some(every);
        self
    }
    /// Consecutive transient refresh failures that make it unhealthy (default 3).
    pub fn max_refresh_fails(mut self, count: u32) -> Self {
        self.max_refresh_fails = count;
        self
    }
    /// First wait of a waiter, and the least one (default 1 s).
    pub fn backoff_min(mut self, wait: Duration) -> Self {
        self.backoff_min = wait;
        self
    }
    /// Longest wait between two looks at a held lock (default 30 s).
    pub fn backoff_max(mut self, wait: Duration) -> Self {
        self.backoff_max = wait;
        self
    }
    /// Growth of the waits (default 2).
    pub fn backoff_multiplier(mut self, factor: f64) -> Self {
        self.backoff_multiplier = factor;
        self
    }
    /// Holder identities are `<prefix>/<thread>` (or just `<prefix>` when
    /// not thread-safe). The default is random hex and the pid. The same
    /// prefix after a restart recovers its own abandoned lock at once.
    pub fn instance_identity_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.instance_identity_prefix = Some(prefix.into());
        self
    }
    /// With `false`, all threads share one identity and one hold, as in the gem.
    pub fn thread_safe(mut self, thread_safe: bool) -> Self {
        self.thread_safe = thread_safe;
        self
    }
    /// A predefined ACL for the lock object: `private`, `projectPrivate`,
    /// `publicRead`, `authenticatedRead`, `bucketOwnerRead`,
    /// `bucketOwnerFullControl` (or the Ruby client's snake_case aliases).
    pub fn object_acl(mut self, acl: impl Into<String>) -> Self {
        self.object_acl = Some(acl.into());
        self
    }
    /// A service-account key file instead of Application Default Credentials.
    pub fn credentials_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials = Credentials::KeyFile(path.into());
        self
    }
    /// The contents of a service-account key file.
    pub fn credentials_json(mut self, json: impl Into<String>) -> Self {
        self.credentials = Credentials::KeyJson(json.into());
        self
    }
    /// An emulator (`host:port` or a URL), reached without credentials;
    /// `STORAGE_EMULATOR_HOST` does the same.
    pub fn emulator_host(mut self, host: impl Into<String>) -> Self {
        self.emulator_host = Some(host.into());
        self
    }
    /// Another JSON API endpoint, reached with credentials.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }
    /// The project billed for a requester-pays bucket.
    pub fn user_project(mut self, project: impl Into<String>) -> Self {
        self.user_project = Some(project.into());
        self
    }
    /// How long one HTTP request may take before it counts as a transient
    /// failure (default 20 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
    /// Where log records go (default: the `log` crate, target `lockyard`).
    pub fn log_sink(mut self, sink: LogSink) -> Self {
        self.log = Some(sink);
        self
    }
    /// Another [`Store`] than the JSON API (a fault-injecting one in tests).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Validates the options; sends no request.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty bucket name or path, a TTL under 1 ms,
    /// a refresh interval not below ttl / max_refresh_fails, backoff_min
    /// above backoff_max, a negative multiplier, an unknown ACL.
    pub fn build(self) -> Result<Lock> {
        if self.bucket_name.is_empty() {
            return Err(Error::config("bucket_name must not be empty"));
        }
        if self.path.is_empty() {
            return Err(Error::config("path must not be empty"));
        }
        let lease = Lease::new(self.ttl, self.refresh_interval, self.max_refresh_fails)?;
        let backoff = Backoff::new(self.backoff_min, self.backoff_max, self.backoff_multiplier)?;
        if self.request_timeout.is_zero() {
            return Err(Error::config("request_timeout must be positive"));
        }
        if self.instance_identity_prefix.as_deref() == Some("") {
            return Err(Error::config("instance_identity_prefix must not be empty"));
        }
        let predefined_acl = self.object_acl.as_deref().map(predefined_acl).transpose()?;
        let store = match self.store {
            Some(store) => store,
            None => Arc::new(HttpStore::new(
                &self.bucket_name,
                &self.path,
                HttpOptions {
                    endpoint: Endpoint::resolve(
                        self.emulator_host.as_deref(),
                        self.endpoint.as_deref(),
                    ),
                    auth: Auth::new(self.credentials),
                    predefined_acl,
                    user_project: self.user_project,
                    request_timeout: self.request_timeout,
                },
            )),
        };
        let log = self.log.unwrap_or_else(|| {
            Arc::new(|level, message: &str| log::log!(target: "lockyard", level, "{message}"))
        });
        Ok(Lock {
            holder: Arc::new(Holder {
                what: format!("lock {}", store.describe()),
                store,
                lease,
                backoff,
                request_timeout: self.request_timeout,
                log,
                clock: ServerClock::default(),
                last_refresh_error: Mutex::new(None),
            }),
            identity_prefix: self.instance_identity_prefix,
            random_prefix: random_hex(12),
            thread_safe: self.thread_safe,
            default_timeout: self.timeout,
            holds: Mutex::new(HashMap::new()),
        })
    }
}

/// The JSON API's `predefinedAcl` for the gem's (Ruby client's) names.
fn predefined_acl(name: &str) -> Result<String> {
    let canonical = match name {
        "private" => "private",
        "projectPrivate" | "project_private" => "projectPrivate",
        "publicRead" | "public_read" | "public" => "publicRead",
        "authenticatedRead" | "authenticated_read" | "authenticated" | "auth_read" | "auth" => {
            "authenticatedRead"
        }
        "bucketOwnerRead" | "owner_read" => "bucketOwnerRead",
        "bucketOwnerFullControl" | "owner_full" => "bucketOwnerFullControl",
        other => return Err(Error::config(format!("unknown object_acl {other:?}"))),
    };
    Ok(canonical.to_owned())
}

impl Lock {
    /// Options for the lock object `path` in the existing bucket `bucket_name`.
    pub fn builder(bucket_name: impl Into<String>, path: impl Into<String>) -> LockBuilder {
        LockBuilder {
            bucket_name: bucket_name.into(),
            path: path.into(),
            ttl: Duration::from_secs(300),
            timeout: None,
            refresh_interval: None,
            max_refresh_fails: 3,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            backoff_multiplier: 2.0,
            instance_identity_prefix: None,
            thread_safe: true,
            object_acl: None,
            credentials: Credentials::Default,
            emulator_host: None,
            endpoint: None,
            user_project: None,
            request_timeout: Duration::from_secs(20),
            log: None,
            store: None,
        }
    }

    /// Waits up to `timeout` (None: forever) and returns a guard that
    /// releases the lock when dropped.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out, [`Error::AlreadyLocked`]
    /// if this thread holds it already, [`Error::Backend`] if the bucket
    /// cannot be used (missing, no permission, unreachable).
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<LockGuard<'_>> {
        if self.acquire_interruptibly(timeout, &|| false)? {
            Ok(LockGuard::new(self))
        } else {
            Err(Error::Timeout {
                what: self.holder.what.clone(),
                waited: timeout.unwrap_or_default(),
            })
        }
    }

    /// One attempt, never waits (beyond clearing a stale object).
    pub fn try_acquire(&self) -> Result<Option<LockGuard<'_>>> {
        let acquired = self.acquire_interruptibly(Some(Duration::ZERO), &|| false)?;
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
        self.holder.lease.ttl
    }

    /// Acquires for the calling thread without a guard (for bindings).
    /// `interrupted` is polled at least every 50 ms while waiting between
    /// requests; when it returns true the wait ends with
    /// [`Error::Interrupted`] and nothing is held. Ok(false): timed out.
    pub fn acquire_interruptibly(
        &self,
        timeout: Option<Duration>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let key = self.key();
        if self.holds().contains_key(&key) {
            return Err(Error::AlreadyLocked(self.holder.what.clone()));
        }
        match self
            .holder
            .acquire(&self.identity(), timeout, interrupted)?
        {
            Some(hold) => {
                self.holds().insert(key, hold);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Releases the calling thread's hold: deletes exactly the object
    /// version it holds. Ok(false) when the server no longer had it (it went
    /// stale and was taken over, or was deleted).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if the calling thread does not hold it.
    pub fn release(&self) -> Result<bool> {
        let hold = self
            .holds()
            .remove(&self.key())
            .ok_or_else(|| Error::NotLocked(self.holder.what.clone()))?;
        let released = self.holder.release(hold);
        if let Ok(true) = released {
            self.holder.log(log::Level::Debug, || "Unlocked".into());
        }
        released
    }

    /// Forgets the calling thread's hold without touching the server and
    /// stops refreshing it (the gem's `abandon`); the object stays until it
    /// goes stale or the same identity takes it again. True if there was one.
    pub fn abandon(&self) -> bool {
        let hold = self.holds().remove(&self.key());
        hold.map(|hold| hold.stop()).is_some()
    }

    /// Whether the calling thread holds the lock and its lease is surely
    /// still live. Reads a flag and the clock; no request.
    pub fn healthy(&self) -> bool {
        self.holds()
            .get(&self.key())
            .is_some_and(|h| h.health.is_healthy())
    }

    /// Ok if the calling thread holds the lock and it is healthy.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if not held, [`Error::LockUnhealthy`] if it may be lost.
    pub fn check_health(&self) -> Result<()> {
        let what = &self.holder.what;
        let holds = self.holds();
        let hold = holds
            .get(&self.key())
            .ok_or_else(|| Error::NotLocked(what.clone()))?;
        match hold.health.problem() {
            None => Ok(()),
            Some(reason) => Err(Error::LockUnhealthy {
                what: what.clone(),
                reason,
            }),
        }
    }

    /// The last refresh failure (of any hold of this lock object), kept
    /// after the lock heals or is released, as in the gem.
    pub fn last_refresh_error(&self) -> Option<String> {
        self.holder
            .last_refresh_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The object generation of the calling thread's hold: a new holder
    /// always gets a larger one, so it serves as a fencing token.
    pub fn fencing_token(&self) -> Option<u64> {
        self.holds().get(&self.key()).map(|h| h.generation as u64)
    }

    /// Whether the calling thread holds it by this process's own state.
    pub fn owned_according_to_internal_state(&self) -> bool {
        self.holds().contains_key(&self.key())
    }

    /// Whether any thread of this process holds it by its own state.
    pub fn locked_according_to_internal_state(&self) -> bool {
        let pid = std::process::id();
        self.holds().keys().any(|(owner, _)| *owner == pid)
    }

    /// Asks the server whether the calling thread's identity holds it.
    pub fn owned(&self) -> Result<bool> {
        Ok(self.holder.inspect(&self.identity())?.1)
    }

    /// Asks the server whether the lock object exists (stale or not).
    pub fn locked(&self) -> Result<bool> {
        Ok(self.holder.inspect(&self.identity())?.0)
    }

    /// The calling thread's holder identity, as stored in the object.
    pub fn identity(&self) -> String {
        let prefix = match &self.identity_prefix {
            Some(prefix) => prefix.clone(),
            None => format!("{}-{}", self.random_prefix, std::process::id()),
        };
        if self.thread_safe {
            format!("{prefix}/{}", thread_number())
        } else {
            prefix
        }
    }

    fn key(&self) -> (u32, u64) {
        let thread = if self.thread_safe { thread_number() } else { 0 };
        (std::process::id(), thread)
    }

    fn holds(&self) -> MutexGuard<'_, HashMap<(u32, u64), Hold>> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Lock {
    /// A dropped lock gives back what this process still holds.
    fn drop(&mut self) {
        let pid = std::process::id();
        let holds: Vec<Hold> = self
            .holds()
            .drain()
            .filter_map(|((owner, _), hold)| (owner == pid).then_some(hold))
            .collect();
        for hold in holds {
            if let Err(e) = self.holder.release(hold) {
                log::warn!("releasing {} on drop failed: {e}", self.holder.what);
            }
        }
    }
}

/// Proof that the calling thread holds a [`Lock`]; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard<'a> {
    lock: &'a Lock,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl<'a> LockGuard<'a> {
    fn new(lock: &'a Lock) -> Self {
        LockGuard {
            lock,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// See [`Lock::fencing_token`].
    pub fn fencing_token(&self) -> u64 {
        self.lock
            .fencing_token()
            .expect("a guard's thread holds the lock")
    }

    /// See [`Lock::healthy`].
    pub fn healthy(&self) -> bool {
        self.lock.healthy()
    }

    /// See [`Lock::check_health`].
    pub fn check_health(&self) -> Result<()> {
        self.lock.check_health()
    }

    /// Releases now and reports whether the server still had it.
    pub fn release(mut self) -> Result<bool> {
        self.released = true;
        self.lock.release()
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.lock.release() {
                log::warn!("releasing a lock guard failed: {e}");
            }
        }
    }
}
