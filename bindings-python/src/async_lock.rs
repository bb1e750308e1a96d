//! The native side of `lockyard.asyncio`'s locks (`redis.Lock`, `gcs.Lock`,
//! `etcd.Lock`): a core lock, shared with the futures in flight, whose
//! waits run as `_async` futures (see `asyncio.rs`). The Python class picks the holder
//! (its asyncio Task's number) and passes it as `key`; reads that need no
//! server answer here at once. One class for every backend: the core locks
//! share these methods' names and meanings ([`CoreLock`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lockyard::wait::InTime;
use lockyard::Deadline;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::asyncio::{boolean, none, settle, Completions, Pending};
use crate::convert::{optional_seconds, text};
use crate::error;
use crate::etcd_lock::etcd_lock_builder;
use crate::gcs_lock::gcs_lock_builder;
use crate::lock::redis_lock_builder;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = lockyard::Result<T>> + Send + 'a>>;

/// What `AsyncLock` asks of a core lock: its `_async` calls for a
/// binding's holder `key`, and the reads made as that holder.
trait CoreLock: Send + Sync + 'static {
    fn acquire_for_async(&self, key: u64, deadline: Deadline) -> Boxed<'_, ()>;
    fn release_for_async(&self, key: u64) -> Boxed<'_, bool>;
    fn leave_for_async(&self, key: u64) -> Boxed<'_, bool>;
    fn locked_async(&self) -> Boxed<'_, bool>;
    fn default_timeout(&self) -> Option<Duration>;
    fn leave_in_background(&self, key: u64);
    fn release_all_in_background(&self);
    fn healthy(&self, key: u64) -> bool;
    fn check_health(&self, key: u64) -> lockyard::Result<()>;
    fn fencing_token(&self, key: u64) -> Option<u64>;
    fn identity(&self, key: u64) -> String;
}

macro_rules! core_lock {
    ($lock:ty) => {
        impl CoreLock for $lock {
            fn acquire_for_async(&self, key: u64, deadline: Deadline) -> Boxed<'_, ()> {
                Box::pin(<$lock>::acquire_for_async(self, key, deadline))
            }
            fn release_for_async(&self, key: u64) -> Boxed<'_, bool> {
                Box::pin(<$lock>::release_for_async(self, key))
            }
            fn leave_for_async(&self, key: u64) -> Boxed<'_, bool> {
                Box::pin(<$lock>::leave_for_async(self, key))
            }
            fn locked_async(&self) -> Boxed<'_, bool> {
                Box::pin(<$lock>::locked_async(self))
            }
            fn default_timeout(&self) -> Option<Duration> {
                <$lock>::default_timeout(self)
            }
            fn leave_in_background(&self, key: u64) {
                lockyard::as_holder(key, || <$lock>::leave_in_background(self));
            }
            fn release_all_in_background(&self) {
                <$lock>::release_all_in_background(self);
            }
            fn healthy(&self, key: u64) -> bool {
                lockyard::as_holder(key, || <$lock>::healthy(self))
            }
            fn check_health(&self, key: u64) -> lockyard::Result<()> {
                lockyard::as_holder(key, || <$lock>::check_health(self))
            }
            fn fencing_token(&self, key: u64) -> Option<u64> {
                lockyard::as_holder(key, || <$lock>::fencing_token(self))
            }
            fn identity(&self, key: u64) -> String {
                lockyard::as_holder(key, || <$lock>::identity(self))
            }
        }
    };
}

core_lock!(lockyard::redis::Lock);
core_lock!(lockyard::gcs::Lock);
core_lock!(lockyard::etcd::Lock);

/// A core lock shared with the futures that use it. The last one dropped
/// gives back what is still held in the background, never on the loop's
/// thread or the runtime's.
struct Shared(Box<dyn CoreLock>);

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.release_all_in_background();
    }
}

#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncLock")]
pub(crate) struct AsyncLock {
    lock: Arc<Shared>,
    #[pyo3(get)]
    name: String,
}

impl AsyncLock {
    fn new(lock: impl CoreLock, name: String) -> Self {
        AsyncLock {
            lock: Arc::new(Shared(Box::new(lock))),
            name,
        }
    }
}

/// The asyncio twin of ``lockyard.redis.Lock``'s native half, with its
/// options. Building touches no server.
#[pyfunction]
#[pyo3(signature = (url, name, ttl=None, timeout=None, *, refresh_interval=None, max_refresh_fails=None, identity_prefix=None, connect_timeout=None, session=None, value=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn async_redis_lock(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    ttl: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
    refresh_interval: Option<&Bound<'_, PyAny>>,
    max_refresh_fails: Option<&Bound<'_, PyAny>>,
    identity_prefix: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    session: Option<&Bound<'_, PyAny>>,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<AsyncLock> {
    let name = text("name", name)?;
    let builder = redis_lock_builder(
        py,
        url,
        &name,
        [ttl, timeout, refresh_interval, max_refresh_fails],
        [identity_prefix, connect_timeout, session, value],
    )?;
    let lock = builder.build().map_err(|e| error::to_py(py, e))?;
    Ok(AsyncLock::new(lock, name))
}

/// The asyncio twin of ``lockyard.gcs.Lock``'s native half, with its
/// options (``name`` is the object's path). Building sends no request.
#[pyfunction]
#[pyo3(signature = (bucket_name, path, *, instance_identity_prefix=None, thread_safe=None, ttl=None, refresh_interval=None, max_refresh_fails=None, backoff_min=None, backoff_max=None, backoff_multiplier=None, object_acl=None, cloud_storage_options=None, cloud_storage_bucket_options=None, timeout=None, logger=None))]
#[allow(
    clippy::too_many_arguments,
    reason = "one argument per option of the gem"
)]
pub(crate) fn async_gcs_lock(
    py: Python<'_>,
    bucket_name: &Bound<'_, PyAny>,
    path: &Bound<'_, PyAny>,
    instance_identity_prefix: Option<&Bound<'_, PyAny>>,
    thread_safe: Option<&Bound<'_, PyAny>>,
    ttl: Option<&Bound<'_, PyAny>>,
    refresh_interval: Option<&Bound<'_, PyAny>>,
    max_refresh_fails: Option<&Bound<'_, PyAny>>,
    backoff_min: Option<&Bound<'_, PyAny>>,
    backoff_max: Option<&Bound<'_, PyAny>>,
    backoff_multiplier: Option<&Bound<'_, PyAny>>,
    object_acl: Option<&Bound<'_, PyAny>>,
    cloud_storage_options: Option<&Bound<'_, PyAny>>,
    cloud_storage_bucket_options: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
    logger: Option<&Bound<'_, PyAny>>,
) -> PyResult<AsyncLock> {
    let builder = gcs_lock_builder(
        py,
        bucket_name,
        path,
        [instance_identity_prefix, thread_safe, ttl, refresh_interval],
        [
            max_refresh_fails,
            backoff_min,
            backoff_max,
            backoff_multiplier,
        ],
        [
            object_acl,
            cloud_storage_options,
            cloud_storage_bucket_options,
        ],
        [timeout, logger],
    )?;
    let lock = builder.build().map_err(|e| error::to_py(py, e))?;
    Ok(AsyncLock::new(lock, text("path", path)?))
}

/// The asyncio twin of ``lockyard.etcd.Lock``'s native half, with its
/// options. Building sends no request.
#[pyfunction]
#[pyo3(signature = (url, name, ttl=None, timeout=None, *, identity_prefix=None, connect_timeout=None, session=None, value=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn async_etcd_lock(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    ttl: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
    identity_prefix: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    session: Option<&Bound<'_, PyAny>>,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<AsyncLock> {
    let name = text("name", name)?;
    let builder = etcd_lock_builder(
        py,
        url,
        &name,
        [ttl, timeout],
        [identity_prefix, connect_timeout, session, value],
    )?;
    let lock = builder.build().map_err(|e| error::to_py(py, e))?;
    Ok(AsyncLock::new(lock, name))
}

#[pymethods]
impl AsyncLock {
    /// Waits for `key` until the constructor's `timeout` runs out (raises
    /// ``lockyard.TimeoutError``): ``async with``'s entry.
    fn enter(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        key: u64,
    ) -> Pending {
        let (lock, kept) = (self.lock.clone(), self.lock.clone());
        let deadline = Deadline::after(self.lock.0.default_timeout());
        settle(
            completions,
            future,
            async move { lock.0.acquire_for_async(key, deadline).await },
            none,
            move |()| kept.0.leave_in_background(key),
        )
    }

    /// Waits for `key` up to `timeout` seconds (None: forever, 0: one
    /// attempt); True if acquired, False if the timeout ran out.
    fn acquire(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        key: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pending> {
        let timeout = optional_seconds("timeout", timeout)?;
        let (lock, kept) = (self.lock.clone(), self.lock.clone());
        let deadline = Deadline::after(timeout);
        Ok(settle(
            completions,
            future,
            async move { lock.0.acquire_for_async(key, deadline).await.in_time() },
            boolean,
            move |acquired| {
                if acquired {
                    kept.0.leave_in_background(key);
                }
            },
        ))
    }

    /// Releases `key`'s hold (``lockyard.NotLockedError`` if none). True if
    /// the server still had it.
    fn release(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        key: u64,
    ) -> Pending {
        let lock = self.lock.clone();
        settle(
            completions,
            future,
            async move { lock.0.release_for_async(key).await },
            boolean,
            drop,
        )
    }

    /// Ends the block `key` entered: releases, except in a process forked
    /// inside it.
    fn leave(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        key: u64,
    ) -> Pending {
        let lock = self.lock.clone();
        settle(
            completions,
            future,
            async move { lock.0.leave_for_async(key).await },
            boolean,
            drop,
        )
    }

    /// Gives `key`'s hold back in the background, at once.
    fn leave_in_background(&self, key: u64) {
        self.lock.0.leave_in_background(key);
    }

    /// Whether anyone holds the lock, asked of the server.
    fn locked(&self, completions: &Bound<'_, Completions>, future: &Bound<'_, PyAny>) -> Pending {
        let lock = self.lock.clone();
        settle(
            completions,
            future,
            async move { lock.0.locked_async().await },
            boolean,
            drop,
        )
    }

    fn healthy(&self, key: u64) -> bool {
        self.lock.0.healthy(key)
    }

    fn check_health(&self, py: Python<'_>, key: u64) -> PyResult<()> {
        self.lock
            .0
            .check_health(key)
            .map_err(|e| error::to_py(py, e))
    }

    fn fencing_token(&self, key: u64) -> Option<u64> {
        self.lock.0.fencing_token(key)
    }

    fn identity(&self, key: u64) -> String {
        self.lock.0.identity(key)
    }
}
