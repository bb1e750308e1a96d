//! The native side of `lockyard.asyncio.quorum.RwLock`: the core quorum
//! lock, shared with the futures in flight, whose waits run as its
//! `_async` futures (see `asyncio.rs`). The Python class picks the holder
//! (its asyncio Task's number) and passes it as `key`; reads that need no
//! server answer here at once.

use std::sync::Arc;

use lockyard::quorum::RwLock;
use lockyard::wait::InTime;
use lockyard::Deadline;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::asyncio::{boolean, none, settle, Completions, Pending};
use crate::convert::{optional_seconds, text};
use crate::error;
use crate::quorum::rw_lock_builder;

/// A core lock shared with the futures that use it. The last one dropped
/// gives back what is still held in the background, never on the loop's
/// thread or the runtime's.
struct Shared(RwLock);

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.release_all_in_background();
    }
}

#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncRwLock")]
pub(crate) struct AsyncRwLock {
    lock: Arc<Shared>,
    #[pyo3(get)]
    name: String,
}

/// The asyncio twin of ``lockyard.quorum.RwLock``'s native half, with its
/// options. Building touches no server.
#[pyfunction]
#[pyo3(signature = (urls, name, ttl=None, timeout=None, *, refresh_interval=None, max_refresh_fails=None, connect_timeout=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn async_quorum_rw_lock(
    py: Python<'_>,
    urls: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    ttl: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
    refresh_interval: Option<&Bound<'_, PyAny>>,
    max_refresh_fails: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<AsyncRwLock> {
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
    let lock = builder.build().map_err(|e| error::to_py(py, e))?;
    Ok(AsyncRwLock {
        lock: Arc::new(Shared(lock)),
        name,
    })
}

#[pymethods]
impl AsyncRwLock {
    /// Waits for the write lock (`write`) or a read lock for `key` until
    /// the constructor's `timeout` runs out (raises
    /// ``lockyard.TimeoutError``): ``async with``'s entry.
    fn enter(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        key: u64,
        write: bool,
    ) -> Pending {
        let (lock, kept) = (self.lock.clone(), self.lock.clone());
        let deadline = Deadline::after(self.lock.0.default_timeout());
        settle(
            completions,
            future,
            async move { lock.0.acquire_for_async(key, write, deadline).await },
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
        write: bool,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pending> {
        let deadline = Deadline::after(optional_seconds("timeout", timeout)?);
        let (lock, kept) = (self.lock.clone(), self.lock.clone());
        Ok(settle(
            completions,
            future,
            async move {
                lock.0
                    .acquire_for_async(key, write, deadline)
                    .await
                    .in_time()
            },
            boolean,
            move |acquired| {
                if acquired {
                    leave_in_background(&kept, key);
                }
            },
        ))
    }

    /// Releases `key`'s hold (``lockyard.NotLockedError`` if none). True if
    /// a quorum still had it.
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

    /// `key`'s write lock's fencing token (None for a read lock or none
    /// held); the first read per grant records it on a quorum.
    fn fencing_token(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        key: u64,
    ) -> Pending {
        let lock = self.lock.clone();
        settle(
            completions,
            future,
            async move { lock.0.fencing_token_for_async(key).await },
            optional_number,
            drop,
        )
    }

    fn healthy(&self, key: u64) -> bool {
        lockyard::as_holder(key, || self.lock.0.healthy())
    }

    fn check_health(&self, py: Python<'_>, key: u64) -> PyResult<()> {
        lockyard::as_holder(key, || self.lock.0.check_health()).map_err(|e| error::to_py(py, e))
    }

    fn held(&self, key: u64) -> bool {
        lockyard::as_holder(key, || self.lock.0.held())
    }

    #[getter]
    fn nodes(&self) -> Vec<String> {
        self.lock.0.nodes().to_vec()
    }
}

fn leave_in_background(lock: &Shared, key: u64) {
    lockyard::as_holder(key, || lock.0.leave_in_background());
}

/// An int or None result (a fencing token).
fn optional_number(py: Python<'_>, value: Option<u64>) -> PyResult<Py<PyAny>> {
    Ok(value.into_pyobject(py)?.into_any().unbind())
}
