//! `lockyard.etcd.Lock`: the core etcd lock with the Redis lock's Python
//! idioms (the shared methods are `per_thread.rs`).

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::convert::{self, optional_seconds, seconds, text};
use crate::per_thread::per_thread_lock_methods;
use crate::session::EtcdSession;
use crate::unlocked::{detached, Unlocked};

/// A distributed lock on etcd, for locks that must hold through a
/// failover: etcd commits every grant through Raft before it answers.
///
/// Each thread is a separate holder, as with ``lockyard.redis.Lock``.
/// Waiters are served in arrival order; the fencing token is the create
/// revision of the holder's key. ``url`` is ``etcd://host:2379`` (members
/// comma-separated, ``etcds://`` for TLS, ``user:password@`` for auth).
///
/// >>> lock = Lock("etcd://127.0.0.1:2379", "deploy", ttl=30.0)
/// >>> with lock:
/// ...     lock.check_health()
#[pyclass(frozen, module = "lockyard.etcd", name = "Lock")]
pub(crate) struct EtcdLock {
    lock: Unlocked<lockyard::etcd::Lock>,
    name: String,
}

per_thread_lock_methods!(EtcdLock, "lockyard.etcd.Lock", {
    /// Validates every option without sending a request: bad values raise
    /// ``lockyard.ConfigError``. ``ttl`` is the lease's, in whole seconds
    /// (rounded up); ``timeout`` is the wait of ``with lock:`` (None:
    /// forever); ``connect_timeout`` bounds each request to a member.
    /// Under a ``session`` the lock's key rides on the session's lease (no
    /// ``ttl`` of its own) and stores ``value`` (see ``holder()``).
    #[new]
    #[pyo3(
        signature = (url, name, ttl=None, timeout=None, *, identity_prefix=None, connect_timeout=None, session=None, value=None),
        text_signature = "(url, name, ttl=30.0, timeout=None, *, identity_prefix=None, connect_timeout=5.0, session=None, value=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        identity_prefix: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        session: Option<&Bound<'_, PyAny>>,
        value: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let name = text("name", name)?;
        let builder = etcd_lock_builder(
            py,
            url,
            &name,
            [ttl, timeout],
            [identity_prefix, connect_timeout, session, value],
        )?;
        Ok(EtcdLock {
            lock: Unlocked::build(py, || builder.build())?,
            name,
        })
    }
});

/// The etcd lock's options, as the sync and async classes take them.
pub(crate) fn etcd_lock_builder(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &str,
    [ttl, timeout]: [Option<&Bound<'_, PyAny>>; 2],
    [identity_prefix, connect_timeout, session, value]: [Option<&Bound<'_, PyAny>>; 4],
) -> PyResult<lockyard::etcd::LockBuilder> {
    let mut builder = lockyard::etcd::Lock::builder(text("url", url)?, name)
        .timeout(optional_seconds("timeout", timeout)?);
    if let Some(ttl) = ttl.filter(|t| !t.is_none()) {
        builder = builder.ttl(seconds("ttl", ttl)?);
    }
    if let Some(wait) = connect_timeout.filter(|t| !t.is_none()) {
        builder = builder.connect_timeout(seconds("connect_timeout", wait)?);
    }
    if let Some(prefix) = identity_prefix.filter(|p| !p.is_none()) {
        builder = builder.identity_prefix(text("identity_prefix", prefix)?);
    }
    if let Some(value) = value.filter(|v| !v.is_none()) {
        builder = builder.value(text("value", value)?);
    }
    if let Some(session) = session.filter(|s| !s.is_none()) {
        let session = convert::session::<EtcdSession>(session)?;
        builder = session.get().session.call(py, |s| Ok(builder.session(s)))?;
    }
    Ok(builder)
}

/// `lockyard.etcd.holder(url, name)`: what the lock's current holder
/// stored (its value under a session, else its identity), or None.
#[pyfunction]
pub(crate) fn etcd_holder(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
) -> PyResult<Option<String>> {
    let (url, name) = (text("url", url)?, text("name", name)?);
    detached(py, || lockyard::etcd::holder(&url, &name))
}
