//! `_lockyard._defaults()`: the core builders' option defaults, by
//! constructor. The text signatures and `_lockyard.pyi` show them written
//! out; `tests/test_defaults.py` holds those copies to these.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use lockyard::etcd::SessionBuilder as EtcdSessionBuilder;
use lockyard::gcs::LockBuilder as GcsLockBuilder;
use lockyard::lease::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_REFRESH_FAILS, DEFAULT_TTL};
use lockyard::redis::{Behavior, SessionBuilder};

/// ``{class name: {parameter: default}}`` for every constructor parameter
/// whose default is the core's (and not None).
#[pyfunction(name = "_defaults")]
pub(crate) fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let by_class = PyDict::new(py);
    for class in ["RedisLock", "RedisWaitGroup", "QuorumRwLock"] {
        let lease = PyDict::new(py);
        lease.set_item("ttl", DEFAULT_TTL.as_secs_f64())?;
        lease.set_item("max_refresh_fails", DEFAULT_MAX_REFRESH_FAILS)?;
        lease.set_item("connect_timeout", DEFAULT_CONNECT_TIMEOUT.as_secs_f64())?;
        by_class.set_item(class, lease)?;
    }
    let session = PyDict::new(py);
    session.set_item("ttl", SessionBuilder::DEFAULT_TTL.as_secs_f64())?;
    session.set_item("behavior", Behavior::default().as_str())?;
    session.set_item(
        "lock_delay",
        SessionBuilder::DEFAULT_LOCK_DELAY.as_secs_f64(),
    )?;
    session.set_item("connect_timeout", DEFAULT_CONNECT_TIMEOUT.as_secs_f64())?;
    by_class.set_item("RedisSession", session)?;
    let etcd_session = PyDict::new(py);
    etcd_session.set_item("ttl", EtcdSessionBuilder::DEFAULT_TTL.as_secs_f64())?;
    etcd_session.set_item("behavior", Behavior::default().as_str())?;
    etcd_session.set_item(
        "lock_delay",
        EtcdSessionBuilder::DEFAULT_LOCK_DELAY.as_secs_f64(),
    )?;
    etcd_session.set_item("connect_timeout", DEFAULT_CONNECT_TIMEOUT.as_secs_f64())?;
    by_class.set_item("EtcdSession", etcd_session)?;
    let gcs = PyDict::new(py);
    gcs.set_item("thread_safe", GcsLockBuilder::DEFAULT_THREAD_SAFE)?;
    gcs.set_item("ttl", GcsLockBuilder::DEFAULT_TTL.as_secs_f64())?;
    gcs.set_item("max_refresh_fails", DEFAULT_MAX_REFRESH_FAILS)?;
    gcs.set_item(
        "backoff_min",
        GcsLockBuilder::DEFAULT_BACKOFF_MIN.as_secs_f64(),
    )?;
    gcs.set_item(
        "backoff_max",
        GcsLockBuilder::DEFAULT_BACKOFF_MAX.as_secs_f64(),
    )?;
    gcs.set_item(
        "backoff_multiplier",
        GcsLockBuilder::DEFAULT_BACKOFF_MULTIPLIER,
    )?;
    by_class.set_item("GcsLock", gcs)?;
    let etcd = PyDict::new(py);
    etcd.set_item("ttl", DEFAULT_TTL.as_secs_f64())?;
    etcd.set_item("connect_timeout", DEFAULT_CONNECT_TIMEOUT.as_secs_f64())?;
    by_class.set_item("EtcdLock", etcd.copy()?)?;
    by_class.set_item("EtcdWaitGroup", etcd)?;
    Ok(by_class)
}
