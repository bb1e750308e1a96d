//! The native side of `lockyard.asyncio.redis.Lock`: the core Redis lock,
//! shared with the futures in flight, whose waits run as `_async` futures
//! (see `asyncio.rs`). The Python class picks the holder (its asyncio
//! Task's number) and passes it as `key`; reads that need no server answer
//! here at once.

use std::sync::Arc;

use lockyard::wait::InTime;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::asyncio::{boolean, none, settle, Completions, Pending};
use crate::convert::{optional_seconds, text};
use crate::error;
use crate::lock::redis_lock_builder;

/// A core lock shared with the futures that use it. The last one dropped
/// gives back what is still held in the background, never on the loop's
/// thread or the runtime's.
struct Shared(lockyard::redis::Lock);

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.release_all_in_background();
    }
}

#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncRedisLock")]
pub(crate) struct AsyncRedisLock {
    lock: Arc<Shared>,
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl AsyncRedisLock {
    #[new]
    #[pyo3(signature = (url, name, ttl=None, timeout=None, *, refresh_interval=None, max_refresh_fails=None, identity_prefix=None, connect_timeout=None, session=None, value=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
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
    ) -> PyResult<Self> {
        let name = text("name", name)?;
        let builder = redis_lock_builder(
            py,
            url,
            &name,
            [ttl, timeout, refresh_interval, max_refresh_fails],
            [identity_prefix, connect_timeout, session, value],
        )?;
        // Building touches no server: nothing to detach from.
        let lock = builder.build().map_err(|e| error::to_py(py, e))?;
        Ok(AsyncRedisLock {
            lock: Arc::new(Shared(lock)),
            name,
        })
    }

    /// Waits for `key` until the constructor's `timeout` runs out (raises
    /// ``lockyard.TimeoutError``): ``async with``'s entry.
    fn enter(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        key: u64,
    ) -> Pending {
        let (lock, kept) = (self.lock.clone(), self.lock.clone());
        let deadline = lockyard::Deadline::after(self.lock.0.default_timeout());
        settle(
            completions,
            future,
            async move { lock.0.acquire_for_async(key, deadline).await },
            none,
            move |()| leave_in_background(&kept, key),
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
        let deadline = lockyard::Deadline::after(timeout);
        Ok(settle(
            completions,
            future,
            async move { lock.0.acquire_for_async(key, deadline).await.in_time() },
            boolean,
            move |acquired| {
                if acquired {
                    leave_in_background(&kept, key);
                }
            },
        ))
    }

    /// Releases `key`'s hold (``lockyard.NotLockedError`` if none). True if
    /// Redis still had it.
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
        leave_in_background(&self.lock, key);
    }

    /// Whether anyone holds the lock, asked of Redis.
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
        lockyard::as_holder(key, || self.lock.0.healthy())
    }

    fn check_health(&self, py: Python<'_>, key: u64) -> PyResult<()> {
        lockyard::as_holder(key, || self.lock.0.check_health()).map_err(|e| error::to_py(py, e))
    }

    fn fencing_token(&self, key: u64) -> Option<u64> {
        lockyard::as_holder(key, || self.lock.0.fencing_token())
    }

    fn identity(&self, key: u64) -> String {
        lockyard::as_holder(key, || self.lock.0.identity())
    }
}

fn leave_in_background(lock: &Shared, key: u64) {
    lockyard::as_holder(key, || lock.0.leave_in_background());
}
