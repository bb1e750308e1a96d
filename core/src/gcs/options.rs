//! The options of [`Lock`], with the gem's names, defaults and rules.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::auth::{Auth, Credentials, Endpoint};
use super::backoff::Backoff;
use super::client::{HttpOptions, HttpStore};
use super::clock::ServerClock;
use super::engine::{Engine, LogSink};
use super::lock::Lock;
use super::store::Store;
use crate::error::{Error, Result};
use crate::lease::LeaseOptions;
use crate::limits;

/// Options for a [`Lock`]; start with [`Lock::builder`]. Names and
/// defaults are the gem's.
#[derive(Clone)]
#[must_use]
pub struct LockBuilder {
    bucket_name: String,
    path: String,
    lease: LeaseOptions,
    timeout: Option<Duration>,
    backoff_min: Duration,
    backoff_max: Duration,
    backoff_multiplier: f64,
    instance_identity_prefix: Option<String>,
    thread_safe: bool,
    hold_per_instance: bool,
    object_acl: Option<String>,
    credentials: Credentials,
    emulator_host: Option<String>,
    endpoint: Option<String>,
    user_project: Option<String>,
    request_timeout: Duration,
    log: Option<LogSink>,
    store: Option<Arc<dyn Store>>,
}

crate::lease::lease_setters! {
    LockBuilder;
    /// How long the lock outlives its holder's last refresh (default
    /// [`DEFAULT_TTL`](Self::DEFAULT_TTL); at most 30 days).
    ttl;
    /// Refresh period, below ttl / max_refresh_fails (default a third of that).
    refresh_interval;
    /// Consecutive transient refresh failures that make it unhealthy until
    /// a refresh lands again (default
    /// [`DEFAULT_MAX_REFRESH_FAILS`](crate::lease::DEFAULT_MAX_REFRESH_FAILS)).
    max_refresh_fails;
}

impl LockBuilder {
    /// How long the lock outlives its holder's last refresh unless
    /// [`LockBuilder::ttl`] sets it: the gem's five minutes, not a Redis
    /// lock's [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL).
    pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
    /// The first and least wait of a waiter unless
    /// [`LockBuilder::backoff_min`] sets it.
    pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_secs(1);
    /// The longest wait of a waiter unless [`LockBuilder::backoff_max`] sets it.
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
    /// The growth of the waits unless [`LockBuilder::backoff_multiplier`]
    /// sets it.
    pub const DEFAULT_BACKOFF_MULTIPLIER: f64 = 2.0;
    /// Whether each thread is a holder of its own unless
    /// [`LockBuilder::thread_safe`] says otherwise.
    pub const DEFAULT_THREAD_SAFE: bool = true;
    /// Whether one hold serves every thread unless
    /// [`LockBuilder::hold_per_instance`] says otherwise.
    pub const DEFAULT_HOLD_PER_INSTANCE: bool = false;
    /// How long one HTTP request may take unless
    /// [`LockBuilder::request_timeout`] sets it.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

    pub(super) fn new(bucket_name: String, path: String) -> Self {
        LockBuilder {
            bucket_name,
            path,
            lease: LeaseOptions::default(),
            timeout: None,
            backoff_min: Self::DEFAULT_BACKOFF_MIN,
            backoff_max: Self::DEFAULT_BACKOFF_MAX,
            backoff_multiplier: Self::DEFAULT_BACKOFF_MULTIPLIER,
            instance_identity_prefix: None,
            thread_safe: Self::DEFAULT_THREAD_SAFE,
            hold_per_instance: Self::DEFAULT_HOLD_PER_INSTANCE,
            object_acl: None,
            credentials: Credentials::Default,
            emulator_host: None,
            endpoint: None,
            user_project: None,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            log: None,
            store: None,
        }
    }

    /// The wait of [`Lock::lock`] (default: forever; at most 100 years).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }
    /// First wait of a waiter, and the least one (default
    /// [`DEFAULT_BACKOFF_MIN`](Self::DEFAULT_BACKOFF_MIN); at most 30 days).
    pub fn backoff_min(mut self, wait: Duration) -> Self {
        self.backoff_min = wait;
        self
    }
    /// Longest wait between two looks at a held lock (default
    /// [`DEFAULT_BACKOFF_MAX`](Self::DEFAULT_BACKOFF_MAX); at most 30 days).
    pub fn backoff_max(mut self, wait: Duration) -> Self {
        self.backoff_max = wait;
        self
    }
    /// Growth of the waits (default
    /// [`DEFAULT_BACKOFF_MULTIPLIER`](Self::DEFAULT_BACKOFF_MULTIPLIER)).
    pub fn backoff_multiplier(mut self, factor: f64) -> Self {
        self.backoff_multiplier = factor;
        self
    }
    /// Holder identities are `<prefix>/<thread>` (or just `<prefix>` when
    /// not thread-safe). The default is random hex and the pid. The same
    /// prefix after a restart recovers its own abandoned lock at once; a
    /// process forked from one where lockyard ran appends its pid to it.
    pub fn instance_identity_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.instance_identity_prefix = Some(prefix.into());
        self
    }
    /// With `false`, all threads share one identity and one hold, as in the
    /// gem (default [`DEFAULT_THREAD_SAFE`](Self::DEFAULT_THREAD_SAFE)).
    pub fn thread_safe(mut self, thread_safe: bool) -> Self {
        self.thread_safe = thread_safe;
        self
    }
    /// With `true`, the gem's semantics: a lock object has one hold at a
    /// time, whichever thread took it, and `release`, `abandon`, `healthy`
    /// and `check_health` on any thread act on that hold (default
    /// [`DEFAULT_HOLD_PER_INSTANCE`](Self::DEFAULT_HOLD_PER_INSTANCE): each
    /// thread reaches only its own, as with the Redis lock).
    pub fn hold_per_instance(mut self, per_instance: bool) -> Self {
        self.hold_per_instance = per_instance;
        self
    }
    /// A predefined ACL for the lock object: `private`, `projectPrivate`,
    /// `publicRead`, `authenticatedRead`, `bucketOwnerRead`,
    /// `bucketOwnerFullControl` (or the Ruby client's snake_case aliases).
    pub fn object_acl(mut self, acl: impl Into<String>) -> Self {
        self.object_acl = Some(acl.into());
        self
    }
    /// A credentials file instead of Application Default Credentials: a
    /// service-account key, `authorized_user`, `impersonated_service_account`
    /// or `external_account` (Workload Identity Federation).
    pub fn credentials_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials = Credentials::File(path.into());
        self
    }
    /// The contents of a credentials file (see
    /// [`LockBuilder::credentials_file`]).
    pub fn credentials_json(mut self, json: impl Into<String>) -> Self {
        self.credentials = Credentials::Json(json.into());
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
    /// failure (default [`DEFAULT_REQUEST_TIMEOUT`](Self::DEFAULT_REQUEST_TIMEOUT);
    /// at most 30 days).
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
    /// a ttl, backoff or request_timeout over 30 days, a timeout over 100
    /// years,
    /// a refresh interval not below ttl / max_refresh_fails, backoff_min
    /// above backoff_max, a negative multiplier, an unknown ACL.
    pub fn build(self) -> Result<Lock> {
        if self.bucket_name.is_empty() {
            return Err(Error::config("bucket_name must not be empty"));
        }
        if self.path.is_empty() {
            return Err(Error::config("path must not be empty"));
        }
        let lease = self.lease.lease(Self::DEFAULT_TTL)?;
        let backoff = Backoff::new(self.backoff_min, self.backoff_max, self.backoff_multiplier)?;
        limits::positive_period("request_timeout", self.request_timeout)?;
        limits::wait(self.timeout)?;
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
                    auth: Auth::new(self.credentials, self.request_timeout),
                    predefined_acl,
                    user_project: self.user_project,
                    request_timeout: self.request_timeout,
                },
            )),
        };
        let log = self.log.unwrap_or_else(|| {
            Arc::new(|level, message: &str| log::log!(target: "lockyard", level, "{message}"))
        });
        let engine = Engine {
            what: format!("lock {}", store.describe()),
            store,
            lease,
            backoff,
            request_timeout: self.request_timeout,
            log,
            clock: ServerClock::default(),
            last_refresh_error: Mutex::new(None),
        };
        Ok(Lock::from_parts(
            engine,
            self.instance_identity_prefix,
            self.thread_safe,
            self.hold_per_instance,
            self.timeout,
        ))
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
