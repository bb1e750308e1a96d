//! `lockyard.redis.WaitGroup`: the core counting semaphore with Go's
//! WaitGroup shape (`add`, `done`, `wait`), and `Slot`, the context manager
//! `with wg.slot() as slot:` that frees its slot however the block ends.

use lockyard::Interrupt;
use std::sync::OnceLock;
use std::time::Duration;

use lockyard::redis::WaitGroup as Core;
use lockyard::wait::InTime;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::{count, lease_options, optional_seconds, text};
use crate::error;
use crate::unlocked::Unlocked;

/// At most ``limit`` holders at a time across every process, on a Redis
/// server (or Redis Cluster). A holder that crashes gives its slot back
/// after ``ttl``; held slots are refreshed in the background meanwhile.
///
/// Slots belong to the process, not the thread: a token from ``add()`` can
/// be given to ``done()`` from any thread, or any other process. A process
/// that works on a token it was handed calls ``adopt(token)`` so that the
/// slot lives as long as it does. Dropping the group, or exiting, frees the
/// slots of ``with`` blocks still open, never those taken by ``add()``:
/// nobody refreshes them any more, and they run out after ``ttl`` unless
/// another process adopted them.
///
/// >>> quota = WaitGroup("redis://127.0.0.1:6379/0", "api-quota", limit=10)
/// >>> with quota.slot() as slot:
/// ...     slot.check_health()  # before each step that must stay within the limit
#[pyclass(frozen, module = "lockyard.redis", name = "WaitGroup")]
pub(crate) struct RedisWaitGroup {
    group: Unlocked<Core>,
    name: String,
    limit: u32,
}

#[pymethods]
impl RedisWaitGroup {
    /// Validates every option without touching the server: bad values raise
    /// ``lockyard.ConfigError``.
    #[new]
    #[pyo3(
        signature = (url, name, limit, ttl=None, *, refresh_interval=None, max_refresh_fails=None, connect_timeout=None),
        text_signature = "(url, name, limit, ttl=30.0, *, refresh_interval=None, max_refresh_fails=3, connect_timeout=5.0)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        refresh_interval: Option<&Bound<'_, PyAny>>,
        max_refresh_fails: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let name = text("name", name)?;
        let limit = count("limit", limit)?;
        let builder = lease_options(
            Core::builder(text("url", url)?, name.clone(), limit),
            ttl,
            refresh_interval,
            max_refresh_fails,
            connect_timeout,
        )?;
        Ok(RedisWaitGroup {
            group: Unlocked::build(py, || builder.build())?,
            name,
            limit,
        })
    }

    /// Takes a slot, waiting up to ``timeout`` seconds (None: forever; 0:
    /// one attempt) while all ``limit`` are held, and returns its token.
    /// Raises ``lockyard.TimeoutError`` when the timeout runs out. Free the
    /// slot with ``done(token)``, or prefer ``with wg.slot():``.
    #[pyo3(signature = (timeout=None))]
    fn add(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        self.take_within(py, optional_seconds("timeout", timeout)?, Core::add)
    }

    /// Takes over keeping the slot of ``token`` alive, in the process that
    /// works on it: from now on this process refreshes it and the adder's
    /// stops, so the slot is freed by ``done(token)`` or ``ttl`` after this
    /// process dies. False if the slot is gone (done, or run out).
    ///
    /// >>> if wg.adopt(token):  # token handed over by the adder
    /// ...     work()
    /// ...     wg.done(token)
    fn adopt(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<bool> {
        let token = text("token", token)?;
        self.group.call(py, |group| group.adopt(&token))
    }

    /// Frees the slot of ``token``, from whichever process took it. False if
    /// that slot had already expired or been freed, or the token is not one
    /// of this group's.
    fn done(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<bool> {
        let token = text("token", token)?;
        self.group.call(py, |group| group.done(&token))
    }

    /// A context manager that takes a slot on entry (waiting up to
    /// ``timeout``, like ``add``) and frees it on exit, however the block
    /// ends.
    ///
    /// >>> with wg.slot(timeout=10.0) as slot:
    /// ...     print(slot.token, slot.fencing_token)
    #[pyo3(signature = (timeout=None))]
    fn slot(slf: &Bound<'_, Self>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Slot> {
        Ok(Slot {
            group: slf.clone().unbind(),
            // Checked now, like the timeout of `add`, not on entering.
            timeout: lockyard::limits::wait(optional_seconds("timeout", timeout)?)
                .map_err(|e| error::to_py(slf.py(), e))?,
            token: OnceLock::new(),
        })
    }

    /// Waits up to ``timeout`` seconds (None: forever) until no slot is
    /// held, like Go's ``sync.WaitGroup.Wait``. False if the timeout ran out.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let timeout = optional_seconds("timeout", timeout)?;
        self.group.wait(
            py,
            |group, interrupted| group.wait_interruptibly(timeout, interrupted).in_time(),
            |_, _| {},
        )
    }

    /// Live slots across every process, asked of Redis.
    fn count(&self, py: Python<'_>) -> PyResult<u32> {
        self.group.call(py, |group| group.count())
    }

    /// Whether this process holds the slot of ``token`` and its lease is
    /// surely live. Reads a flag: cheap enough for a hot loop.
    fn healthy(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<bool> {
        let token = text("token", token)?;
        self.group.call(py, |group| Ok(group.healthy(&token)))
    }

    /// Raises ``lockyard.LockUnhealthyError`` if the slot of ``token`` may
    /// be lost, ``lockyard.NotLockedError`` if this process does not hold it.
    fn check_health(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let token = text("token", token)?;
        self.group.call(py, |group| group.check_health(&token))
    }

    /// The fencing token of the slot of ``token``, strictly increasing
    /// across all grants of this name; None unless this process holds it.
    fn fencing_token(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let token = text("token", token)?;
        self.group.call(py, |group| Ok(group.fencing_token(&token)))
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    #[getter]
    fn limit(&self) -> u32 {
        self.limit
    }

    fn __repr__(&self) -> String {
        format!(
            "<lockyard.redis.WaitGroup name={:?} limit={}>",
            self.name, self.limit
        )
    }
}

/// The core's `add` or `enter`.
type Take = fn(&Core, Option<Duration>, Interrupt<'_>) -> lockyard::Result<String>;

impl RedisWaitGroup {
    fn take_within(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
        take: Take,
    ) -> PyResult<String> {
        self.group.wait(
            py,
            |group, interrupted| take(group, timeout, interrupted),
            |group, token| {
                let _ = group.done(&token);
            },
        )
    }
}

/// One slot of a ``WaitGroup``, taken by ``with wg.slot() as slot:`` and
/// freed when the block ends (normally, by exception, ``break`` or
/// ``return``). A ``Slot`` is entered once.
#[pyclass(frozen, module = "lockyard.redis", name = "Slot")]
pub(crate) struct Slot {
    group: Py<RedisWaitGroup>,
    timeout: Option<Duration>,
    token: OnceLock<String>,
}

#[pymethods]
impl Slot {
    /// Waits for a slot like ``WaitGroup.add``; raises
    /// ``lockyard.TimeoutError`` when the timeout runs out.
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let this = slf.get();
        let py = slf.py();
        if this.token.get().is_some() {
            return Err(entered_twice(py));
        }
        let token = this
            .group
            .get()
            .take_within(py, this.timeout, Core::enter)?;
        // Entering is serialised by the check above only per thread; a
        // second thread racing in here would hold a slot it cannot free.
        if let Err(token) = this.token.set(token) {
            this.group
                .get()
                .group
                .call(py, |group| group.done(&token))?;
            return Err(entered_twice(py));
        }
        Ok(slf.clone())
    }

    /// Frees the slot; never suppresses the block's exception. If the slot
    /// had been lost meanwhile, logs a warning on the ``lockyard`` logger:
    /// more than ``limit`` holders may have run at once. A failure to free
    /// it does not replace the block's exception (see ``block.rs``). In a
    /// process forked inside the block it leaves the parent's slot alone.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let left = self.with_token(py, |group, token| group.leave(token).map(drop));
        block::exit(py, exc, left)
    }

    /// The slot's token (a UUID), what ``WaitGroup.done`` takes.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<String> {
        self.with_token(py, |_, token| Ok(token.to_owned()))
    }

    /// See ``WaitGroup.fencing_token``; None once the slot is freed.
    #[getter]
    fn fencing_token(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.with_token(py, |group, token| Ok(group.fencing_token(token)))
    }

    /// See ``WaitGroup.healthy``; False once the slot is freed.
    #[getter]
    fn healthy(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_token(py, |group, token| Ok(group.healthy(token)))
    }

    /// See ``WaitGroup.check_health``.
    fn check_health(&self, py: Python<'_>) -> PyResult<()> {
        self.with_token(py, |group, token| group.check_health(token))
    }

    fn __repr__(&self) -> String {
        let group = &self.group.get().name;
        match self.token.get() {
            Some(token) => format!("<lockyard.redis.Slot of {group:?} token={token:?}>"),
            None => format!("<lockyard.redis.Slot of {group:?} not taken yet>"),
        }
    }
}

fn entered_twice(py: Python<'_>) -> PyErr {
    error::config(
        py,
        "this slot was taken already: call wg.slot() for each `with`".into(),
    )
}

impl Slot {
    /// Runs `call` on the core group with this slot's token, or raises
    /// ``lockyard.NotLockedError`` before ``with`` has taken the slot.
    fn with_token<R: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&Core, &str) -> lockyard::Result<R> + Send,
    ) -> PyResult<R> {
        let group = self.group.get();
        let Some(token) = self.token.get() else {
            let what = format!(
                "a slot of wait group {:?} (before `with` took it)",
                group.name
            );
            return Err(error::to_py(py, lockyard::Error::NotLocked(what)));
        };
        group.group.call(py, |core| call(core, token))
    }
}
