//! Every core error becomes a Python exception here and nowhere else. The
//! exception classes are written in Python (`lockyard/_errors.py`, where
//! two bases such as `Error` + builtin `TimeoutError` are one line) and
//! looked up once.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

struct Classes {
    error: Py<PyType>,
    timeout: Py<PyType>,
    already_locked: Py<PyType>,
    not_locked: Py<PyType>,
    lock_unhealthy: Py<PyType>,
    config: Py<PyType>,
    backend: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    CLASSES.get_or_try_init(py, || {
        let module = py.import("lockyard._errors")?;
        let class = |name: &str| -> PyResult<Py<PyType>> {
            Ok(module.getattr(name)?.cast_into::<PyType>()?.unbind())
        };
        Ok(Classes {
            error: class("Error")?,
            timeout: class("TimeoutError")?,
            already_locked: class("AlreadyLockedError")?,
            not_locked: class("NotLockedError")?,
            lock_unhealthy: class("LockUnhealthyError")?,
            config: class("ConfigError")?,
            backend: class("BackendError")?,
        })
    })
}

/// The Python exception for a core error; its message is the core's.
pub(crate) fn to_py(py: Python<'_>, error: lockyard::Error) -> PyErr {
    let classes = match classes(py) {
        Ok(classes) => classes,
        Err(import_failed) => return import_failed,
    };
    use lockyard::Error as E;
    let class = match &error {
        E::Timeout { .. } => &classes.timeout,
        E::AlreadyLocked(_) => &classes.already_locked,
        E::NotLocked(_) => &classes.not_locked,
        E::LockUnhealthy { .. } => &classes.lock_unhealthy,
        E::Config(_) => &classes.config,
        E::Backend { .. } => &classes.backend,
        // An interrupted wait raises the exception that interrupted it (see
        // `unlocked.rs`); reaching this arm means the core stopped on its own.
        E::Interrupted(_) => &classes.error,
        _ => &classes.error,
    };
    PyErr::from_type(class.bind(py).clone(), error.to_string())
}

/// A bad argument, caught by the binding before it reaches the core.
pub(crate) fn config(py: Python<'_>, message: String) -> PyErr {
    to_py(py, lockyard::Error::Config(message))
}
