//! `lockyard.redis.Lock`: the core Redis lock with Python's idioms (a
//! context manager, `acquire`/`release` like `threading.Lock`, properties).

use std::time::Duration;

use lockyard::wait::InTime;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::{acquire_timeout, lease_options, optional_seconds, text};
use crate::session::RedisSession;
use crate::unlocked::Unlocked;

/// A distributed lock on a Redis server (or Redis Cluster).
///
/// Each thread is a separate holder, so threads that share one ``Lock``
/// exclude each other exactly as processes on other machines do. While
/// held, the lock is refreshed in the background; ``healthy`` and
/// ``check_health()`` tell whether it may have been lost since.
///
/// >>> lock = Lock("redis://127.0.0.1:6379/0", "deploy", ttl=30.0)
/// >>> with lock:
/// ...     lock.check_health()
#[pyclass(frozen, module = "lockyard.redis", name = "Lock")]
pub(crate) struct RedisLock {
    lock: Unlocked<lockyard::redis::Lock>,
    name: String,
}

#[pymethods]
impl RedisLock {
    /// Validates every option without touching the server: bad values raise
    /// ``lockyard.ConfigError``. ``timeout`` is the wait of ``with lock:``
    /// (None: forever). Under a ``session`` the lock has no ``ttl`` of its
    /// own and stores ``value`` with each grant (see ``holder()``).
    #[new]
    #[pyo3(
        signature = (url, name, ttl=None, timeout=None, *, refresh_interval=None, max_refresh_fails=None, identity_prefix=None, connect_timeout=None, session=None, value=None),
        text_signature = "(url, name, ttl=30.0, timeout=None, *, refresh_interval=None, max_refresh_fails=3, identity_prefix=None, connect_timeout=5.0, session=None, value=None)"
    )]
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
        session: Option<&Bound<'_, RedisSession>>,
        value: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let name = text("name", name)?;
        let mut builder = lease_options(
            lockyard::redis::Lock::builder(text("url", url)?, name.clone())
                .timeout(optional_seconds("timeout", timeout)?),
            ttl,
            refresh_interval,
            max_refresh_fails,
            connect_timeout,
        )?;
        if let Some(prefix) = identity_prefix.filter(|p| !p.is_none()) {
            builder = builder.identity_prefix(text("identity_prefix", prefix)?);
        }
        if let Some(value) = value.filter(|v| !v.is_none()) {
            builder = builder.value(text("value", value)?);
        }
        if let Some(session) = session {
            builder = session.get().session.call(py, |s| Ok(builder.session(s)))?;
        }
        Ok(RedisLock {
            lock: Unlocked::build(py, || builder.build())?,
            name,
        })
    }

    /// Waits with the constructor's ``timeout``; raises
    /// ``lockyard.TimeoutError`` when it runs out.
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let this = slf.get();
        let py = slf.py();
        let timeout = this.lock.call(py, |lock| Ok(lock.default_timeout()))?;
        this.lock.wait(
            py,
            |lock, interrupted| lock.acquire_interruptibly(timeout, interrupted),
            |lock, ()| {
                let _ = lock.release();
            },
        )?;
        Ok(slf.clone())
    }

    /// Releases however the block ends: normally, by exception, ``break``
    /// or ``return``. Never suppresses the block's exception, nor replaces
    /// it when releasing fails too (see ``block.rs``). In a process forked
    /// inside the block it leaves the parent's hold alone.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let left = self.lock.call(py, |lock| lock.leave().map(drop));
        block::exit(py, exc, left)
    }

    /// Waits up to ``timeout`` seconds (None: forever; 0 or
    /// ``blocking=False``: one attempt). True if acquired, False if the
    /// timeout ran out, like ``threading.Lock.acquire``.
    #[pyo3(signature = (timeout=None, *, blocking=true))]
    fn acquire(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        blocking: bool,
    ) -> PyResult<bool> {
        let timeout = acquire_timeout(timeout, blocking)?;
        self.acquire_within(py, timeout)
    }

    /// One attempt that never waits: True if the lock was free.
    fn try_acquire(&self, py: Python<'_>) -> PyResult<bool> {
        self.acquire_within(py, Some(Duration::ZERO))
    }

    /// Releases this thread's hold (``lockyard.NotLockedError`` if it has
    /// none). If the lock had been lost meanwhile, logs a warning on the
    /// ``lockyard`` logger: what it protected may have been touched by
    /// another holder.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.lock.call(py, |lock| lock.release().map(drop))
    }

    /// Whether this thread holds the lock and its lease is surely live.
    /// Reads a flag: cheap enough for a hot loop.
    #[getter]
    fn healthy(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| Ok(lock.healthy()))
    }

    /// Raises ``lockyard.LockUnhealthyError`` if this thread's hold may be
    /// lost, ``lockyard.NotLockedError`` if it holds nothing.
    fn check_health(&self, py: Python<'_>) -> PyResult<()> {
        self.lock.call(py, |lock| lock.check_health())
    }

    /// This thread's grant's fencing token, strictly increasing across all
    /// holders of this name; None when not held.
    #[getter]
    fn fencing_token(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.lock.call(py, |lock| Ok(lock.fencing_token()))
    }

    /// Asks Redis whether this thread holds the lock.
    fn owned(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| lock.owned())
    }

    /// Asks Redis whether anyone holds the lock.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| lock.locked())
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// This thread's holder identity, as stored in Redis.
    #[getter]
    fn identity(&self, py: Python<'_>) -> PyResult<String> {
        self.lock.call(py, |lock| Ok(lock.identity()))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (identity, fencing_token) = self
            .lock
            .call(py, |lock| Ok((lock.identity(), lock.fencing_token())))?;
        let held = match fencing_token {
            Some(token) => format!("held, fencing_token={token}"),
            None => "not held".into(),
        };
        Ok(format!(
            "<lockyard.redis.Lock name={:?} identity={identity:?} {held} by this thread>",
            self.name
        ))
    }
}

impl RedisLock {
    fn acquire_within(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<bool> {
        self.lock.wait(
            py,
            |lock, interrupted| lock.acquire_interruptibly(timeout, interrupted).in_time(),
            |lock, acquired| {
                if acquired {
                    let _ = lock.release();
                }
            },
        )
    }
}
