//! `lockyard.quorum.RwLock`: the core quorum read/write lock with Python's
//! idioms (`with lock.write():`, `with lock.read():`, `acquire_*` → bool).

use std::time::Duration;

use lockyard::quorum::RwLock;
use lockyard::wait::InTime;
use lockyard::Interrupt;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::{lease_options, optional_seconds, text};
use crate::error;
use crate::unlocked::Unlocked;

/// A read/write lock over N independent Redis servers: many readers or one
/// writer, granted by a quorum of the servers, so it keeps working while up
/// to ⌊(n−1)/2⌋ of them are down. Each thread is a separate holder.
///
/// >>> lock = RwLock(["redis://a:6379", "redis://b:6379", "redis://c:6379"], "index")
/// >>> with lock.write():
/// ...     lock.check_health()
#[pyclass(frozen, module = "lockyard.quorum", name = "RwLock")]
pub(crate) struct QuorumRwLock {
    lock: Unlocked<lockyard::quorum::RwLock>,
    name: String,
}

#[pymethods]
impl QuorumRwLock {
    /// Validates every option without touching a server: bad values (no
    /// URLs, more than 32, one server twice) raise ``lockyard.ConfigError``.
    /// ``timeout`` is the wait of ``with lock.write():`` and
    /// ``with lock.read():`` (None: forever).
    #[new]
    #[pyo3(
        signature = (urls, name, ttl=None, timeout=None, *, refresh_interval=None, max_refresh_fails=None, connect_timeout=None),
        text_signature = "(urls, name, ttl=30.0, timeout=None, *, refresh_interval=None, max_refresh_fails=3, connect_timeout=5.0)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        urls: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        refresh_interval: Option<&Bound<'_, PyAny>>,
        max_refresh_fails: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let name = text("name", name)?;
        let builder = rw_lock_builder(
            py,
            urls,
            &name,
            [
                ttl,
                timeout,
                refresh_interval,
                max_refresh_fails,
                connect_timeout,
            ],
        )?;
        Ok(QuorumRwLock {
            lock: Unlocked::build(py, || builder.build())?,
            name,
        })
    }

    /// A context manager that holds the write lock for its block, waiting
    /// with the constructor's ``timeout`` (``lockyard.TimeoutError`` when
    /// it runs out).
    fn write(slf: Bound<'_, Self>) -> Held {
        Held {
            lock: slf.unbind(),
            write: true,
        }
    }

    /// A context manager that holds a read lock for its block, like ``write()``.
    fn read(slf: Bound<'_, Self>) -> Held {
        Held {
            lock: slf.unbind(),
            write: false,
        }
    }

    /// Waits up to ``timeout`` seconds (None: forever, 0: one attempt) for
    /// the write lock. True if acquired, False if the timeout ran out.
    #[pyo3(signature = (timeout=None))]
    fn acquire_write(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        self.acquire(py, true, optional_seconds("timeout", timeout)?)
    }

    /// Waits up to ``timeout`` seconds for a read lock, like ``acquire_write``.
    #[pyo3(signature = (timeout=None))]
    fn acquire_read(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        self.acquire(py, false, optional_seconds("timeout", timeout)?)
    }

    /// Releases this thread's read or write lock
    /// (``lockyard.NotLockedError`` if it holds none). If the lock had been
    /// lost meanwhile, logs a warning on the ``lockyard`` logger.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.lock.call(py, |lock| lock.release().map(drop))
    }

    /// Whether this thread holds the lock and its lease is surely live on
    /// a quorum. Reads a flag: cheap enough for a hot loop.
    #[getter]
    fn healthy(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| Ok(lock.healthy()))
    }

    /// Raises ``lockyard.LockUnhealthyError`` if this thread's hold may be
    /// lost, ``lockyard.NotLockedError`` if it holds nothing.
    fn check_health(&self, py: Python<'_>) -> PyResult<()> {
        self.lock.call(py, |lock| lock.check_health())
    }

    /// This thread's write lock's fencing token, strictly increasing
    /// across all write holders; None for a read lock or when not held.
    /// The first read per grant records it on a quorum (one round trip).
    #[getter]
    fn fencing_token(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.lock.call(py, |lock| lock.fencing_token())
    }

    /// The servers' URLs, as given.
    #[getter]
    fn nodes(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.lock.call(py, |lock| Ok(lock.nodes().to_vec()))
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (nodes, held) = self
            .lock
            .call(py, |lock| Ok((lock.nodes().len(), lock.held())))?;
        let held = if held { "held" } else { "not held" };
        Ok(format!(
            "<lockyard.quorum.RwLock name={:?} nodes={nodes} {held} by this thread>",
            self.name
        ))
    }
}

/// The core builder for the constructor's arguments: `urls`, `name`, and
/// `[ttl, timeout, refresh_interval, max_refresh_fails, connect_timeout]`
/// (shared with ``lockyard.asyncio.quorum.RwLock``).
pub(crate) fn rw_lock_builder(
    py: Python<'_>,
    urls: &Bound<'_, PyAny>,
    name: &str,
    [ttl, timeout, refresh_interval, max_refresh_fails, connect_timeout]: [Option<&Bound<'_, PyAny>>;
        5],
) -> PyResult<lockyard::quorum::RwLockBuilder> {
    if urls.is_instance_of::<pyo3::types::PyString>() {
        return Err(error::config(
            py,
            "urls must be a list of URLs, not one str".into(),
        ));
    }
    let urls = urls
        .try_iter()
        .map_err(|_| error::config(py, "urls must be a list of str".into()))?
        .map(|url| text("urls", &url?))
        .collect::<PyResult<Vec<String>>>()?;
    lease_options(
        lockyard::quorum::RwLock::builder(urls, name)
            .timeout(optional_seconds("timeout", timeout)?),
        ttl,
        refresh_interval,
        max_refresh_fails,
        connect_timeout,
    )
}

impl QuorumRwLock {
    fn acquire(&self, py: Python<'_>, write: bool, timeout: Option<Duration>) -> PyResult<bool> {
        self.lock.wait(
            py,
            |lock, interrupted| take(lock, write, timeout, interrupted).in_time(),
            |lock, acquired| {
                if acquired {
                    let _ = lock.release();
                }
            },
        )
    }
}

/// What ``RwLock.write()`` and ``RwLock.read()`` return: holds the lock
/// for a ``with`` block and releases it however the block ends.
#[pyclass(frozen, module = "lockyard.quorum", name = "_Held")]
pub(crate) struct Held {
    lock: Py<QuorumRwLock>,
    write: bool,
}

#[pymethods]
impl Held {
    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<QuorumRwLock>> {
        let lock = self.lock.get();
        let timeout = lock.lock.call(py, |lock| Ok(lock.default_timeout()))?;
        lock.lock.wait(
            py,
            |lock, interrupted| take(lock, self.write, timeout, interrupted),
            |lock, ()| {
                let _ = lock.release();
            },
        )?;
        Ok(self.lock.clone_ref(py))
    }

    /// Never suppresses the block's exception, nor replaces it when
    /// releasing fails too (see ``block.rs``). In a process forked inside
    /// the block it leaves the parent's hold alone.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let left = self.lock.get().lock.call(py, |lock| lock.leave().map(drop));
        block::exit(py, exc, left)
    }
}

/// Takes the write lock, or a read lock, for this thread until `timeout`.
fn take(
    lock: &RwLock,
    write: bool,
    timeout: Option<Duration>,
    interrupted: Interrupt<'_>,
) -> lockyard::Result<()> {
    if write {
        lock.acquire_write_interruptibly(timeout, interrupted)
    } else {
        lock.acquire_read_interruptibly(timeout, interrupted)
    }
}
