//! The methods every per-thread lock class shares (`lockyard.redis.Lock`,
//! `lockyard.etcd.Lock`): [`per_thread_lock_methods!`] writes them into the
//! class's `#[pymethods]`, each one call to a function here, so the classes
//! differ only in their constructors.

use std::time::Duration;

use lockyard::guard::ThreadLock;
use lockyard::wait::InTime;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::acquire_timeout;
use crate::unlocked::Unlocked;

/// `__enter__`: waits with the constructor's `timeout`.
pub(crate) fn enter<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<()> {
    let timeout = lock.call(py, |lock| Ok(lock.default_timeout()))?;
    lock.wait(
        py,
        |lock, interrupted| lock.acquire_interruptibly(timeout.into(), interrupted),
        |lock, ()| {
            let _ = lock.release();
        },
    )
}

/// `__exit__`: releases however the block ended (see `block.rs`).
pub(crate) fn exit<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
    exc: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let left = lock.call(py, |lock| lock.leave().map(drop));
    block::exit(py, exc, left)
}

/// `acquire(timeout=None, *, blocking=True)`, like `threading.Lock.acquire`.
pub(crate) fn acquire<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
    timeout: Option<&Bound<'_, PyAny>>,
    blocking: bool,
) -> PyResult<bool> {
    acquire_within(py, lock, acquire_timeout(timeout, blocking)?)
}

/// `try_acquire()`: one attempt.
pub(crate) fn try_acquire<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<bool> {
    acquire_within(py, lock, Some(Duration::ZERO))
}

fn acquire_within<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
    timeout: Option<Duration>,
) -> PyResult<bool> {
    lock.wait(
        py,
        |lock, interrupted| {
            lock.acquire_interruptibly(timeout.into(), interrupted)
                .in_time()
        },
        |lock, acquired| {
            if acquired {
                let _ = lock.release();
            }
        },
    )
}

pub(crate) fn release<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<()> {
    lock.call(py, |lock| lock.release().map(drop))
}

pub(crate) fn healthy<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<bool> {
    lock.call(py, |lock| Ok(lock.healthy()))
}

pub(crate) fn check_health<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<()> {
    lock.call(py, |lock| lock.check_health())
}

pub(crate) fn fencing_token<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<Option<u64>> {
    lock.call(py, |lock| Ok(lock.fencing_token()))
}

pub(crate) fn owned<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<bool> {
    lock.call(py, |lock| lock.owned())
}

pub(crate) fn locked<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<bool> {
    lock.call(py, |lock| lock.locked())
}

pub(crate) fn identity<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
) -> PyResult<String> {
    lock.call(py, |lock| Ok(lock.identity()))
}

/// `<{class} name=... identity=... held, fencing_token=N by this thread>`
pub(crate) fn repr<L: ThreadLock + Send + Sync>(
    py: Python<'_>,
    lock: &Unlocked<L>,
    class: &str,
    name: &str,
) -> PyResult<String> {
    let (identity, fencing_token) =
        lock.call(py, |lock| Ok((lock.identity(), lock.fencing_token())))?;
    let held = match fencing_token {
        Some(token) => format!("held, fencing_token={token}"),
        None => "not held".into(),
    };
    Ok(format!(
        "<{class} name={name:?} identity={identity:?} {held} by this thread>"
    ))
}

/// The `#[pymethods]` block of a per-thread lock class `$class` (fields
/// `lock: Unlocked<core lock>` and `name: String`), shown as `$shown`: the
/// given items (its constructor) and the methods every such class has.
macro_rules! per_thread_lock_methods {
    ($class:ty, $shown:literal, { $($items:tt)* }) => {
        #[pyo3::pymethods]
        impl $class {
            $($items)*

            /// Waits with the constructor's ``timeout``; raises
            /// ``lockyard.TimeoutError`` when it runs out.
            fn __enter__<'py>(slf: &pyo3::Bound<'py, Self>) -> pyo3::PyResult<pyo3::Bound<'py, Self>> {
                $crate::per_thread::enter(slf.py(), &slf.get().lock)?;
                Ok(slf.clone())
            }

            /// Releases however the block ends: normally, by exception,
            /// ``break`` or ``return``. Never suppresses the block's
            /// exception, nor replaces it when releasing fails too (see
            /// ``block.rs``). In a process forked inside the block it leaves
            /// the parent's hold alone.
            fn __exit__(
                &self,
                py: pyo3::Python<'_>,
                _exc_type: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                exc: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                _traceback: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
            ) -> pyo3::PyResult<()> {
                $crate::per_thread::exit(py, &self.lock, exc)
            }

            /// Waits up to ``timeout`` seconds (None: forever; 0 or
            /// ``blocking=False``: one attempt). True if acquired, False if
            /// the timeout ran out, like ``threading.Lock.acquire``.
            #[pyo3(signature = (timeout=None, *, blocking=true))]
            fn acquire(
                &self,
                py: pyo3::Python<'_>,
                timeout: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                blocking: bool,
            ) -> pyo3::PyResult<bool> {
                $crate::per_thread::acquire(py, &self.lock, timeout, blocking)
            }

            /// One attempt that never waits (and leaves nothing queued):
            /// True if the lock was free.
            fn try_acquire(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<bool> {
                $crate::per_thread::try_acquire(py, &self.lock)
            }

            /// Releases this thread's hold (``lockyard.NotLockedError`` if it
            /// has none). If the lock had been lost meanwhile, logs a warning
            /// on the ``lockyard`` logger: what it protected may have been
            /// touched by another holder.
            fn release(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
                $crate::per_thread::release(py, &self.lock)
            }

            /// Whether this thread holds the lock and its lease is surely
            /// live. Reads a flag: cheap enough for a hot loop.
            #[getter]
            fn healthy(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<bool> {
                $crate::per_thread::healthy(py, &self.lock)
            }

            /// Raises ``lockyard.LockUnhealthyError`` if this thread's hold
            /// may be lost, ``lockyard.NotLockedError`` if it holds nothing.
            fn check_health(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<()> {
                $crate::per_thread::check_health(py, &self.lock)
            }

            /// This thread's grant's fencing token, strictly increasing
            /// across all holders of this name; None when not held.
            #[getter]
            fn fencing_token(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<Option<u64>> {
                $crate::per_thread::fencing_token(py, &self.lock)
            }

            /// Asks the server whether this thread holds the lock.
            fn owned(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<bool> {
                $crate::per_thread::owned(py, &self.lock)
            }

            /// Asks the server whether anyone holds the lock.
            fn locked(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<bool> {
                $crate::per_thread::locked(py, &self.lock)
            }

            #[getter]
            fn name(&self) -> &str {
                &self.name
            }

            /// This thread's holder identity, as stored with its grant.
            #[getter]
            fn identity(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<String> {
                $crate::per_thread::identity(py, &self.lock)
            }

            fn __repr__(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<String> {
                $crate::per_thread::repr(py, &self.lock, $shown, &self.name)
            }
        }
    };
}

pub(crate) use per_thread_lock_methods;
