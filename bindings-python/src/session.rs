//! `lockyard.redis.Session` and `lockyard.etcd.Session`: a core session as
//! a context manager that destroys it on exit.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::{seconds, text};
use crate::unlocked::{self, Unlocked};

/// The Python face of a core session: the same class for every backend,
/// which the core's sessions share the names of every option and method.
macro_rules! session_class {
    ($(#[$doc:meta])* $class:ident, $core:ty, $builder:ty, $module:literal, $repr:literal) => {
        $(#[$doc])*
        #[pyclass(frozen, module = $module, name = "Session")]
        pub(crate) struct $class {
            /// Shared with the futures of ``lockyard.asyncio``'s calls.
            pub(crate) session: Unlocked<Arc<$core>>,
            id: String,
        }

        impl $class {
            /// The Python face of a session created already (by awaiting,
            /// in ``lockyard.asyncio``).
            pub(crate) fn of(py: Python<'_>, session: $core) -> PyResult<Self> {
                let id = session.id().to_owned();
                Ok($class {
                    session: Unlocked::build(py, || Ok(Arc::new(session)))?,
                    id,
                })
            }

            /// The options of a session, validated as far as they can be
            /// without the server (``lockyard.ConfigError``).
            pub(crate) fn builder(
                py: Python<'_>,
                url: &Bound<'_, PyAny>,
                ttl: Option<&Bound<'_, PyAny>>,
                behavior: Option<&Bound<'_, PyAny>>,
                lock_delay: Option<&Bound<'_, PyAny>>,
                connect_timeout: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<$builder> {
                let mut builder = <$core>::builder(text("url", url)?);
                if let Some(ttl) = ttl {
                    builder = builder.ttl(seconds("ttl", ttl)?);
                }
                if let Some(behavior) = behavior {
                    let behavior = text("behavior", behavior)?
                        .parse()
                        .map_err(|e| crate::error::to_py(py, e))?;
                    builder = builder.behavior(behavior);
                }
                if let Some(delay) = lock_delay {
                    builder = builder.lock_delay(seconds("lock_delay", delay)?);
                }
                if let Some(timeout) = connect_timeout {
                    builder = builder.connect_timeout(seconds("connect_timeout", timeout)?);
                }
                Ok(builder)
            }
        }

        #[pymethods]
        impl $class {
            /// Validates the options (``lockyard.ConfigError``), creates the
            /// session on the server and starts keeping it alive.
            #[new]
            #[pyo3(
                signature = (url, ttl=None, behavior=None, lock_delay=None, *, connect_timeout=None),
                text_signature = "(url, ttl=15.0, behavior='release', lock_delay=15.0, *, connect_timeout=5.0)"
            )]
            fn new(
                py: Python<'_>,
                url: &Bound<'_, PyAny>,
                ttl: Option<&Bound<'_, PyAny>>,
                behavior: Option<&Bound<'_, PyAny>>,
                lock_delay: Option<&Bound<'_, PyAny>>,
                connect_timeout: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Self> {
                let builder =
                    Self::builder(py, url, ttl, behavior, lock_delay, connect_timeout)?;
                let session = Unlocked::build(py, || builder.build().map(Arc::new))?;
                let id = session.call(py, |s| Ok(s.id().to_owned()))?;
                Ok($class { session, id })
            }

            fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
                slf
            }

            /// Destroys the session however the block ends (in a process
            /// forked inside the block: only for that process, see
            /// ``destroy``). A failure to destroy it does not replace the
            /// block's exception (see ``block.rs``).
            fn __exit__(
                &self,
                py: Python<'_>,
                _exc_type: Option<&Bound<'_, PyAny>>,
                exc: Option<&Bound<'_, PyAny>>,
                _traceback: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<()> {
                let destroyed = self.destroy(py);
                block::exit(py, exc, destroyed)
            }

            /// Frees every lock held under the session at once (no
            /// lock_delay), ends it on the server and stops keeping it
            /// alive. Idempotent. In a process forked from the one that
            /// created it, it leaves the session to its creator.
            fn destroy(&self, py: Python<'_>) -> PyResult<()> {
                self.session.call(py, |s| s.destroy())
            }

            /// ``destroy`` in the background, returning at once (a session
            /// created for an asyncio task cancelled meanwhile).
            fn destroy_in_background(&self, py: Python<'_>) -> PyResult<()> {
                self.session.call(py, |s| {
                    s.destroy_in_background();
                    Ok(())
                })
            }

            /// Whether the session is surely live: not destroyed, not lost,
            /// kept alive within its TTL. Reads a flag.
            #[getter]
            fn healthy(&self, py: Python<'_>) -> PyResult<bool> {
                self.session.call(py, |s| Ok(s.healthy()))
            }

            /// Raises ``lockyard.LockUnhealthyError`` if the session was
            /// destroyed or may be lost (and with it every lock under it).
            fn check_health(&self, py: Python<'_>) -> PyResult<()> {
                self.session.call(py, |s| s.check_health())
            }

            /// The session's random id, for logs and debugging.
            #[getter]
            fn id(&self) -> &str {
                &self.id
            }

            #[getter]
            fn ttl(&self, py: Python<'_>) -> PyResult<f64> {
                self.session.call(py, |s| Ok(s.ttl().as_secs_f64()))
            }

            #[getter]
            fn lock_delay(&self, py: Python<'_>) -> PyResult<f64> {
                self.session.call(py, |s| Ok(s.lock_delay().as_secs_f64()))
            }

            /// ``"release"`` or ``"delete"``.
            #[getter]
            fn behavior(&self, py: Python<'_>) -> PyResult<&'static str> {
                self.session.call(py, |s| Ok(s.behavior().as_str()))
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                let healthy = self.healthy(py)?;
                Ok(format!(
                    concat!("<", $repr, " id={:?} healthy={}>"),
                    self.id,
                    if healthy { "True" } else { "False" }
                ))
            }
        }
    };
}

session_class!(
    /// A lease that locks and elections live under, renewed in the background
    /// every ``ttl / 2``. Locks under it (``Lock(url, name, session=s)``) have
    /// no TTL of their own: they live exactly as long as the session, share
    /// its health, and are freed at once by ``destroy()``. A session lost
    /// without ``destroy()`` (the process crashed or paused past ``ttl``) bars
    /// its locks for ``lock_delay`` more seconds.
    ///
    /// ``behavior`` says what the session's end does to its locks' values:
    /// ``"release"`` keeps each value readable by ``lockyard.redis.holder()``
    /// until the name is taken again (at most an hour), ``"delete"`` deletes it.
    /// After ``destroy()`` only self-expiring keys stay in Redis: each name's
    /// fencing counter, a value kept by ``"release"``, an election's terms.
    ///
    /// >>> with Session("redis://127.0.0.1:6379/0", ttl=15.0) as session:
    /// ...     session.check_health()
    RedisSession,
    lockyard::redis::Session,
    lockyard::redis::SessionBuilder,
    "lockyard.redis",
    "lockyard.redis.Session"
);

session_class!(
    /// An etcd lease that locks and elections live under, kept alive every
    /// ``ttl / 3`` (whole seconds). Locks under it (``Lock(url, name,
    /// session=s)``), campaigns and ``exclusive``'s claims put their keys on
    /// its lease: they are lost with it, share its health, and are freed at
    /// once by ``destroy()``, which revokes it. A session lost
    /// without ``destroy()`` leaves its names barred for ``lock_delay`` more
    /// seconds, for every lock of those names.
    ///
    /// ``behavior``: with ``"release"`` a lock's value stays readable by
    /// ``lockyard.etcd.holder()`` while its name is barred; ``"delete"``
    /// keeps none.
    ///
    /// >>> with Session("etcd://127.0.0.1:2379", ttl=15.0) as session:
    /// ...     session.check_health()
    EtcdSession,
    lockyard::etcd::Session,
    lockyard::etcd::SessionBuilder,
    "lockyard.etcd",
    "lockyard.etcd.Session"
);

/// The value of the current holder of the lock ``name``, or None (see
/// ``lockyard.redis.holder``).
#[pyfunction]
pub(crate) fn redis_holder(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
) -> PyResult<Option<String>> {
    let (url, name) = (text("url", url)?, text("name", name)?);
    unlocked::detached(py, || lockyard::redis::holder(&url, &name))
}
