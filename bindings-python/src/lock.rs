//! `lockyard.redis.Lock`: the core Redis lock with Python's idioms (a
//! context manager, `acquire`/`release` like `threading.Lock`, properties).

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::convert::{self, lease_options, optional_seconds, text};
use crate::per_thread::per_thread_lock_methods;
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

per_thread_lock_methods!(RedisLock, "lockyard.redis.Lock", {
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
        Ok(RedisLock {
            lock: Unlocked::build(py, || builder.build())?,
            name,
        })
    }
});

/// The core builder for the constructor arguments of a Redis lock, sync or
/// async: `[ttl, timeout, refresh_interval, max_refresh_fails]` and
/// `[identity_prefix, connect_timeout, session, value]`, each None when not
/// given.
pub(crate) fn redis_lock_builder(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &str,
    [ttl, timeout, refresh_interval, max_refresh_fails]: [Option<&Bound<'_, PyAny>>; 4],
    [identity_prefix, connect_timeout, session, value]: [Option<&Bound<'_, PyAny>>; 4],
) -> PyResult<lockyard::redis::LockBuilder> {
    let mut builder = lease_options(
        lockyard::redis::Lock::builder(text("url", url)?, name)
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
    if let Some(session) = session.filter(|s| !s.is_none()) {
        let session = convert::session::<RedisSession>(session)?;
        builder = session.get().session.call(py, |s| Ok(builder.session(s)))?;
    }
    Ok(builder)
}
