//! The algorithm of the GCS lock, against any [`Store`]: create the lock
//! object only if absent; on conflict look at it (our own identity →
//! recover at once; stale by the server's clock → delete that exact
//! version and retry; else wait, looking again with reads only); refresh a
//! held object in the background with preconditions; delete exactly our
//! version on release.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::clock::ServerClock;
use super::refresh::{refresh_loop, with_timeout};
use super::store::{Metadata, Reply, Store, StoreError, StoreFuture, Version};
use crate::error::{Error, Result};
use crate::health::Health;
use crate::lease::Lease;
use crate::runtime;

/// Receives the lock's log records with the gem's levels (debug: each
/// step; info: waits and refreshes; warn: recoveries; error: failed
/// refreshes). Called from the runtime thread too: it must not block.
pub type LogSink = Arc<dyn Fn(log::Level, &str) + Send + Sync>;

/// Transient failures of one caller-side step are retried this often...
const RETRY_ATTEMPTS: u32 = 5;
/// ...after waits doubling from this.
const RETRY_FIRST_WAIT: Duration = Duration::from_millis(100);
/// Longest sleep between two interrupt checks.
const INTERRUPT_SLICE: Duration = Duration::from_millis(50);
/// Immediate retries (object vanished, stale object removed) before a wait.
const IMMEDIATE_RETRIES: u32 = 3;

pub(crate) struct Holder {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) lease: Lease,
    pub(crate) backoff: Backoff,
    pub(crate) request_timeout: Duration,
    /// "lock gs://bucket/path", for messages.
    pub(crate) what: String,
    pub(crate) log: LogSink,
    pub(crate) clock: ServerClock,
    /// The last refresh failure of any hold, kept after it heals.
    pub(crate) last_refresh_error: Mutex<Option<String>>,
}

/// One thread's hold: its object version, shared with its refresher.
pub(crate) struct Hold {
    pub(crate) identity: String,
    pub(crate) generation: i64,
    pub(crate) health: Arc<Health>,
    /// Locked by the refresher for the length of a PATCH, so stopping it
    /// never leaves a write in flight whose new metageneration we miss.
    version: Arc<tokio::sync::Mutex<Version>>,
    refresher: JoinHandle<()>,
}

impl Hold {
    /// Stops refreshing (waiting out a refresh in flight) and returns the
    /// version last written.
    pub(crate) fn stop(self) -> Version {
        let version = self.version.clone();
        runtime::block_on(async move {
            let version = version.lock().await;
            self.refresher.abort();
            *version
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

enum Look {
    /// No object: try to create it.
    Free,
    /// Someone else holds it; it turns stale in about this long.
    Held(Duration),
}

impl Holder {
    pub(crate) fn log(&self, level: log::Level, message: impl FnOnce() -> String) {
        (self.log)(level, &message());
    }

    pub(crate) fn metadata(&self, identity: &str) -> Metadata {
        Metadata {
            identity: identity.to_owned(),
            expires_at: self.clock.now() + self.lease.ttl.as_secs_f64(),
        }
    }

    /// Runs a store operation from the caller's thread (the runtime
    /// thread drives its I/O), with the request timeout; transient failures
    /// are retried with backoff. Ok(Err(..)) is the server saying no (412, 404).
    fn call<'a, T>(
        &'a self,
        operation: &str,
        request: impl Fn(&'a dyn Store) -> StoreFuture<'a, T>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Result<Reply<T>, StoreError>> {
        let mut wait = RETRY_FIRST_WAIT;
        let mut attempt = 1;
        loop {
            let outcome =
                runtime::block_on(with_timeout(self.request_timeout, request(&*self.store)));
            match outcome {
                Ok(reply) => {
                    self.clock.observe(reply.server_time);
                    return Ok(Ok(reply));
                }
                Err(e @ (StoreError::PreconditionFailed | StoreError::NotFound)) => {
                    return Ok(Err(e))
                }
                Err(StoreError::Permanent(message)) => return Err(self.backend(operation, message)),
                Err(StoreError::Transient(message)) if attempt >= RETRY_ATTEMPTS => {
                    return Err(self.backend(
                        operation,
                        format!("{message} (tried {RETRY_ATTEMPTS} times)"),
                    ));
                }
                Err(StoreError::Transient(message)) => {
                    self.log(log::Level::Warn, || {
                        format!(
                            "{operation} {} failed, retrying in {wait:?}: {message}",
                            self.what
                        )
                    });
                    sleep_interruptibly(wait, interrupted, &self.what)?;
                    wait *= 2;
                    attempt += 1;
                }
            }
        }
    }

    fn backend(&self, operation: &str, message: String) -> Error {
        Error::backend(&self.store.describe(), operation, message)
    }

    /// Waits up to `timeout` (None: forever; zero: one attempt, which may
    /// still clear a stale object) for the lock as `identity`. A waiter
    /// only reads: GCS allows about one write per second per object, and
    /// create attempts would spend it.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        identity: &str,
        timeout: Option<Duration>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Hold>> {
        let give_up_at = timeout.map(|t| Instant::now() + t);
        let mut steps = self.backoff.steps();
        let mut immediate = 0;
        let mut may_create = true;
        loop {
            if interrupted() {
                return Err(Error::Interrupted(self.what.clone()));
            }
            if may_create {
                self.log(log::Level::Debug, || "Acquiring lock".into());
                if let Some(hold) = self.try_create(identity, interrupted)? {
                    self.log(log::Level::Debug, || "Successfully acquired lock".into());
                    return Ok(Some(hold));
                }
                self.log(log::Level::Debug, || {
                    "Error acquiring lock. Investigating why...".into()
                });
            }
            let look = self.look(identity, may_create, interrupted)?;
            may_create = matches!(look, Look::Free);
            if may_create && immediate < IMMEDIATE_RETRIES {
                immediate += 1;
                continue;
            }
            let now = Instant::now();
            if give_up_at.is_some_and(|at| now >= at) {
                return Ok(None);
            }
            let mut wait = steps.next_wait();
            if let Look::Held(stale_in) = look {
                // Look again just after it would turn stale, not a backoff later.
                wait = wait.min(stale_in + Duration::from_millis(20));
            }
            if let Some(at) = give_up_at {
                wait = wait.min(at - now);
            }
            self.log(log::Level::Info, || {
                format!(
                    "Unable to acquire lock. Will try again in {:.1} seconds",
                    wait.as_secs_f64()
                )
            });
            sleep_interruptibly(wait, interrupted, &self.what)?;
            immediate = 0;
        }
    }

    /// One create; None if the object exists.
    fn try_create(
        self: &Arc<Self>,
        identity: &str,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Hold>> {
        let sent = Instant::now();
        let clock_was_known = self.clock.is_known();
        let metadata = self.metadata(identity);
        let written = metadata.expires_at;
        let created = self.call(
            "create",
            |store| store.create(metadata.clone()),
            interrupted,
        )?;
        let reply = match created {
            Ok(reply) => reply,
            Err(StoreError::PreconditionFailed) => return Ok(None),
            Err(other) => return Err(self.backend("create", other.to_string())),
        };
        let mut version = reply.value.version;
        let mut sent = sent;
        // The first request of this lock wrote `expires_at` by the local
        // clock. If the server's differs, others may find the object stale
        // already: correct it before counting it as ours. Whichever of this
        // write and a waiter's delete lands first makes the other fail.
        let off = (self.clock.now() + self.lease.ttl.as_secs_f64() - written).abs();
        if !clock_was_known && off > 1.0 {
            sent = Instant::now();
            let metadata = self.metadata(identity);
            match self.call(
                "refresh",
                |store| store.update(version, metadata.clone()),
                interrupted,
            )? {
                Ok(reply) => version = reply.value.version,
                Err(_) => return Ok(None),
            }
        }
        Ok(Some(self.hold(identity, version, sent)))
    }

    /// Reads the object after a failed create and clears it if it is ours
    /// from before or stale.
    fn look(
        &self,
        identity: &str,
        after_create: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Look> {
        let reply = match self.call("read", |store| store.get(), interrupted)? {
            Ok(reply) => reply,
            Err(other) => return Err(self.backend("read", other.to_string())),
        };
        let Some(object) = reply.value else {
            if after_create {
                self.log(log::Level::Warn, || {
                    "Lock was deleted right after having created it. Retrying.".into()
                });
            } else {
                self.log(log::Level::Debug, || "Lock was released. Acquiring".into());
            }
            return Ok(Look::Free);
        };
        if object.identity.as_deref() == Some(identity) {
            self.log(log::Level::Warn, || {
                "Lock was already owned by this instance, but was abandoned. Resetting lock".into()
            });
            self.delete_version(object.version, interrupted)?;
            return Ok(Look::Free);
        }
        let server_now = reply.server_time.unwrap_or_else(|| self.clock.now());
        let expires_at = object.expires_at.unwrap_or(f64::NEG_INFINITY);
        if server_now > expires_at {
            self.log(log::Level::Warn, || "Lock is stale. Resetting lock".into());
            self.delete_version(object.version, interrupted)?;
            return Ok(Look::Free);
        }
        self.log(log::Level::Debug, || {
            "Lock was already acquired, and is not stale".into()
        });
        Ok(Look::Held(Duration::from_secs_f64(
            (expires_at - server_now).min(1e9),
        )))
    }

    /// Deletes exactly `version`: Ok(false) if it had changed or gone.
    fn delete_version(&self, version: Version, interrupted: &dyn Fn() -> bool) -> Result<bool> {
        match self.call("delete", |store| store.delete(version), interrupted)? {
            Ok(_) => Ok(true),
            Err(_) => Ok(false),
        }
    }

    /// Releases a hold: deletes our version. Ok(false) if the object was no
    /// longer ours (taken over after going stale, or deleted).
    pub(crate) fn release(&self, hold: Hold) -> Result<bool> {
        let identity = hold.identity.clone();
        let version = hold.stop();
        let never = &|| false;
        if self.delete_version(version, never)? {
            return Ok(true);
        }
        // A refresh whose reply was lost may have moved the metageneration.
        match self.still_ours(&identity, version, never)? {
            Some(current) => self.delete_version(current, never),
            None => Ok(false),
        }
    }

    /// The current version if the object is still the generation we
    /// created under our identity.
    fn still_ours(
        &self,
        identity: &str,
        version: Version,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Version>> {
        Ok(match self.call("read", |store| store.get(), interrupted)? {
            Ok(Reply {
                value: Some(object),
                ..
            }) if object.version.generation == version.generation
                && object.identity.as_deref() == Some(identity) =>
            {
                Some(object.version)
            }
            _ => None,
        })
    }

    /// Whether the object exists, and whether `identity` holds it.
    pub(crate) fn inspect(&self, identity: &str) -> Result<(bool, bool)> {
        match self.call("read", |store| store.get(), &|| false)? {
            Ok(Reply {
                value: Some(object),
                ..
            }) => Ok((true, object.identity.as_deref() == Some(identity))),
            Ok(_) => Ok((false, false)),
            Err(other) => Err(self.backend("read", other.to_string())),
        }
    }

    fn hold(self: &Arc<Self>, identity: &str, version: Version, sent: Instant) -> Hold {
        let health = Arc::new(Health::new(sent + self.lease_margin()));
        let generation = version.generation;
        let version = Arc::new(tokio::sync::Mutex::new(version));
        let refresher = runtime::spawn(refresh_loop(
            self.clone(),
            identity.to_owned(),
            version.clone(),
            health.clone(),
        ));
        Hold {
            identity: identity.to_owned(),
            generation,
            health,
            version,
            refresher,
        }
    }

    /// How long after sending a write the hold surely lasts: the TTL less
    /// the error of our estimate of the server's clock (half a second of
    /// `Date` rounding), so others never find it stale while we think it live.
    pub(crate) fn lease_margin(&self) -> Duration {
        let ttl = self.lease.ttl;
        ttl - (ttl / 10).min(Duration::from_millis(500))
    }

    pub(crate) fn record_refresh_error(&self, message: &str) {
        *self
            .last_refresh_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(message.to_owned());
        self.log(log::Level::Error, || {
            format!("Error refreshing lock: {message}")
        });
    }
}

/// Sleeps `wait` in slices, returning early with Interrupted.
fn sleep_interruptibly(wait: Duration, interrupted: &dyn Fn() -> bool, what: &str) -> Result<()> {
    let until = Instant::now() + wait;
    loop {
        if interrupted() {
            return Err(Error::Interrupted(what.to_owned()));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(INTERRUPT_SLICE));
    }
}
