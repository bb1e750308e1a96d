//! The wait groups, `lockyard.redis.WaitGroup` and `lockyard.etcd.WaitGroup`:
//! a core counting semaphore with Go's WaitGroup shape (`add`, `done`,
//! `wait`), and `Slot`, the context manager `with wg.slot() as slot:` that
//! frees its slot however the block ends. [`wait_group_methods!`] writes
//! the methods both classes share; they differ only in their constructors.

use lockyard::group::SlotGroup;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lockyard::wait::InTime;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::{count, lease_options, optional_seconds, seconds, text};
use crate::error;
use crate::unlocked::Unlocked;

/// A core wait group of either backend, shared by its class and its slots.
pub(crate) struct Group {
    core: Unlocked<Box<dyn SlotGroup>>,
    name: String,
    limit: u32,
    /// "lockyard.redis.WaitGroup", for reprs.
    class: &'static str,
}

impl Group {
    fn build(
        py: Python<'_>,
        name: String,
        limit: u32,
        class: &'static str,
        build: impl FnOnce() -> lockyard::Result<Box<dyn SlotGroup>> + Send,
    ) -> PyResult<Arc<Group>> {
        Ok(Arc::new(Group {
            core: Unlocked::build(py, build)?,
            name,
            limit,
            class,
        }))
    }

    /// The core's `add` or `enter`, waiting up to `timeout`.
    fn take_within(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
        take: Take,
    ) -> PyResult<String> {
        self.core.wait(
            py,
            |group, interrupted| take(group.as_ref(), timeout.into(), interrupted),
            |group, token| {
                let _ = group.done(&token);
            },
        )
    }
}

/// The core's `add` or `enter`.
type Take =
    fn(&dyn SlotGroup, lockyard::Deadline, lockyard::Interrupt<'_>) -> lockyard::Result<String>;

/// `wait_group_methods!(Class, { constructor })`: the class's
/// `#[pymethods]`, its constructor and every method the wait groups share.
macro_rules! wait_group_methods {
    ($class:ty, { $($constructor:tt)* }) => {
        #[pymethods]
        impl $class {
            $($constructor)*

    /// Takes a slot, waiting up to ``timeout`` seconds (None: forever; 0:
    /// one attempt) while all ``limit`` are held, and returns its token.
    /// Raises ``lockyard.TimeoutError`` when the timeout runs out. Free the
    /// slot with ``done(token)``, or prefer ``with wg.slot():``.
    #[pyo3(signature = (timeout=None))]
    fn add(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        self.group.take_within(py, optional_seconds("timeout", timeout)?, |group, deadline, interrupted| group.add(deadline, interrupted))
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
        self.group.core.call(py, |group| group.adopt(&token))
    }

    /// Frees the slot of ``token``, from whichever process took it. False if
    /// that slot had already expired or been freed, or the token is not one
    /// of this group's.
    fn done(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<bool> {
        let token = text("token", token)?;
        self.group.core.call(py, |group| group.done(&token))
    }

    /// A context manager that takes a slot on entry (waiting up to
    /// ``timeout``, like ``add``) and frees it on exit, however the block
    /// ends.
    ///
    /// >>> with wg.slot(timeout=10.0) as slot:
    /// ...     print(slot.token, slot.fencing_token)
    #[pyo3(signature = (timeout=None))]
    fn slot(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Slot> {
        Ok(Slot {
            group: self.group.clone(),
            // Checked now, like the timeout of `add`, not on entering.
            timeout: lockyard::limits::wait(optional_seconds("timeout", timeout)?)
                .map_err(|e| error::to_py(py, e))?,
            token: OnceLock::new(),
        })
    }

    /// Waits up to ``timeout`` seconds (None: forever) until no slot is
    /// held, like Go's ``sync.WaitGroup.Wait``. False if the timeout ran out.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let timeout = optional_seconds("timeout", timeout)?;
        self.group.core.wait(
            py,
            |group, interrupted| group.wait_interruptibly(timeout.into(), interrupted).in_time(),
            |_, _| {},
        )
    }

    /// Live slots across every process, asked of Redis.
    fn count(&self, py: Python<'_>) -> PyResult<u32> {
        self.group.core.call(py, |group| group.count())
    }

    /// Whether this process holds the slot of ``token`` and its lease is
    /// surely live. Reads a flag: cheap enough for a hot loop.
    fn healthy(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<bool> {
        let token = text("token", token)?;
        self.group.core.call(py, |group| Ok(group.healthy(&token)))
    }

    /// Raises ``lockyard.LockUnhealthyError`` if the slot of ``token`` may
    /// be lost, ``lockyard.NotLockedError`` if this process does not hold it.
    fn check_health(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let token = text("token", token)?;
        self.group.core.call(py, |group| group.check_health(&token))
    }

    /// The fencing token of the slot of ``token``, strictly increasing
    /// across all grants of this name; None unless this process holds it.
    fn fencing_token(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let token = text("token", token)?;
        self.group.core.call(py, |group| Ok(group.fencing_token(&token)))
    }

    #[getter]
    fn name(&self) -> &str {
        &self.group.name
    }

    #[getter]
    fn limit(&self) -> u32 {
        self.group.limit
    }

    fn __repr__(&self) -> String {
        let group = &self.group;
        format!("<{} name={:?} limit={}>", group.class, group.name, group.limit)
    }
        }
    };
}

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
    group: Arc<Group>,
}

wait_group_methods!(RedisWaitGroup, {
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
            lockyard::redis::WaitGroup::builder(text("url", url)?, name.clone(), limit),
            ttl,
            refresh_interval,
            max_refresh_fails,
            connect_timeout,
        )?;
        let build = || Ok(Box::new(builder.build()?) as Box<dyn SlotGroup>);
        Ok(RedisWaitGroup {
            group: Group::build(py, name, limit, "lockyard.redis.WaitGroup", build)?,
        })
    }
});

/// At most ``limit`` holders at a time across every process, on etcd: a
/// holder that crashes gives its slot back when its lease runs out. Slots
/// are the ``limit`` oldest keys of the name, so waiters are served in
/// arrival order, and a slot's fencing token is its key's create revision.
///
/// Slots belong to the process, as with ``lockyard.redis.WaitGroup``: a
/// token from ``add()`` can be freed with ``done()`` from any process, and
/// the process that works on it calls ``adopt(token)``. Dropping the group,
/// or exiting, frees the slots of ``with`` blocks still open, never those
/// taken by ``add()``: they run out after ``ttl`` unless adopted.
///
/// >>> quota = WaitGroup("etcd://127.0.0.1:2379", "api-quota", limit=10)
/// >>> with quota.slot() as slot:
/// ...     slot.check_health()
#[pyclass(frozen, module = "lockyard.etcd", name = "WaitGroup")]
pub(crate) struct EtcdWaitGroup {
    group: Arc<Group>,
}

wait_group_methods!(EtcdWaitGroup, {
    /// Validates every option without sending a request: bad values raise
    /// ``lockyard.ConfigError``. ``ttl`` is the lease's, in whole seconds
    /// (rounded up); ``connect_timeout`` bounds each request to a member.
    #[new]
    #[pyo3(
        signature = (url, name, limit, ttl=None, *, connect_timeout=None),
        text_signature = "(url, name, limit, ttl=30.0, *, connect_timeout=5.0)"
    )]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let name = text("name", name)?;
        let limit = count("limit", limit)?;
        let builder = etcd_wait_group_builder(url, &name, limit, ttl, connect_timeout)?;
        let build = || Ok(Box::new(builder.build()?) as Box<dyn SlotGroup>);
        Ok(EtcdWaitGroup {
            group: Group::build(py, name, limit, "lockyard.etcd.WaitGroup", build)?,
        })
    }
});

/// The etcd wait group's options, as the sync and async classes take them.
pub(crate) fn etcd_wait_group_builder(
    url: &Bound<'_, PyAny>,
    name: &str,
    limit: u32,
    ttl: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<lockyard::etcd::WaitGroupBuilder> {
    let mut builder = lockyard::etcd::WaitGroup::builder(text("url", url)?, name, limit);
    if let Some(ttl) = ttl.filter(|t| !t.is_none()) {
        builder = builder.ttl(seconds("ttl", ttl)?);
    }
    if let Some(wait) = connect_timeout.filter(|t| !t.is_none()) {
        builder = builder.connect_timeout(seconds("connect_timeout", wait)?);
    }
    Ok(builder)
}

/// One slot of a ``WaitGroup``, taken by ``with wg.slot() as slot:`` and
/// freed when the block ends (normally, by exception, ``break`` or
/// ``return``). A ``Slot`` is entered once.
#[pyclass(frozen, module = "lockyard.redis", name = "Slot")]
pub(crate) struct Slot {
    group: Arc<Group>,
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
            .take_within(py, this.timeout, |group, deadline, interrupted| {
                group.enter(deadline, interrupted)
            })?;
        // Entering is serialised by the check above only per thread; a
        // second thread racing in here would hold a slot it cannot free.
        if let Err(token) = this.token.set(token) {
            this.group.core.call(py, |group| group.done(&token))?;
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
        let group = &self.group.name;
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
        call: impl FnOnce(&dyn SlotGroup, &str) -> lockyard::Result<R> + Send,
    ) -> PyResult<R> {
        let group = &self.group;
        let Some(token) = self.token.get() else {
            let what = format!(
                "a slot of wait group {:?} (before `with` took it)",
                group.name
            );
            return Err(error::to_py(py, lockyard::Error::NotLocked(what)));
        };
        group.core.call(py, |core| call(core.as_ref(), token))
    }
}
