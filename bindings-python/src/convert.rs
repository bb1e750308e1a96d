//! Arguments as Python users write them: durations in seconds (float or
//! int), names and URLs as str. A value of the wrong type is a bad
//! argument like a negative TTL, so both raise `lockyard.ConfigError` (a
//! `ValueError`) naming the parameter, before anything touches a server.
//! Only a session of the wrong class is a TypeError (see [`session`]).

use lockyard::redis::LeaseBuilder;
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString, PyType};
use pyo3::PyTypeInfo;

use crate::error;

/// A duration in seconds; `True`/`False` are ints to Python but surely a
/// mistake here.
pub(crate) fn seconds(what: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let py = value.py();
    let number = (!value.is_instance_of::<PyBool>())
        .then(|| value.extract::<f64>().ok())
        .flatten()
        .ok_or_else(|| wrong_type(what, "a number of seconds", value))?;
    lockyard::redis::seconds(what, number).map_err(|e| error::to_py(py, e))
}

/// Like [`seconds`], with Python's `None` meaning "no limit".
pub(crate) fn optional_seconds(
    what: &str,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Duration>> {
    value
        .filter(|value| !value.is_none())
        .map(|value| seconds(what, value))
        .transpose()
}

pub(crate) fn text(what: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    value
        .cast::<PyString>()
        .ok()
        .and_then(|s| s.to_cow().ok().map(|s| s.into_owned()))
        .ok_or_else(|| wrong_type(what, "a str", value))
}

/// The ``session`` of a class of one backend. A session of another backend
/// is a wrong class, not a bad value: a TypeError as pyo3's own, which
/// would read "'Session' object cannot be cast as 'Session'"; this one
/// names both classes.
pub(crate) fn session<'a, 'py, S: PyTypeInfo>(
    value: &'a Bound<'py, PyAny>,
) -> PyResult<&'a Bound<'py, S>> {
    value.cast::<S>().map_err(|_| {
        let name = |class: Bound<'_, PyType>| {
            class
                .fully_qualified_name()
                .map(|name| name.to_string())
                .unwrap_or_else(|_| "?".into())
        };
        let expected = name(value.py().get_type::<S>());
        PyTypeError::new_err(format!(
            "session must be a {expected}, not {}",
            name(value.get_type())
        ))
    })
}

/// A count such as `max_refresh_fails` (a non-negative int).
pub(crate) fn count(what: &str, value: &Bound<'_, PyAny>) -> PyResult<u32> {
    (!value.is_instance_of::<PyBool>())
        .then(|| value.extract::<u32>().ok())
        .flatten()
        .ok_or_else(|| wrong_type(what, "an int >= 0", value))
}

/// The lease options of every Redis primitive, each left at the core's
/// default when not given. One place for both builders, so `Lock` and
/// `WaitGroup` check them alike.
pub(crate) fn lease_options<B: LeaseBuilder>(
    mut builder: B,
    ttl: Option<&Bound<'_, PyAny>>,
    refresh_interval: Option<&Bound<'_, PyAny>>,
    max_refresh_fails: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<B> {
    if let Some(ttl) = ttl {
        builder = builder.ttl(seconds("ttl", ttl)?);
    }
    if let Some(every) = optional_seconds("refresh_interval", refresh_interval)? {
        builder = builder.refresh_interval(every);
    }
    if let Some(fails) = max_refresh_fails {
        builder = builder.max_refresh_fails(count("max_refresh_fails", fails)?);
    }
    if let Some(connect_timeout) = connect_timeout {
        builder = builder.connect_timeout(seconds("connect_timeout", connect_timeout)?);
    }
    Ok(builder)
}

fn wrong_type(what: &str, expected: &str, value: &Bound<'_, PyAny>) -> PyErr {
    let got = value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into());
    error::config(value.py(), format!("{what} must be {expected}, got {got}"))
}

/// The wait of `acquire(timeout, blocking=...)`, as `threading.Lock` reads
/// them: `blocking=False` means one attempt and takes no timeout.
pub(crate) fn acquire_timeout(
    timeout: Option<&Bound<'_, PyAny>>,
    blocking: bool,
) -> PyResult<Option<Duration>> {
    match (blocking, optional_seconds("timeout", timeout)?) {
        (true, timeout) => Ok(timeout),
        (false, None) => Ok(Some(Duration::ZERO)),
        (false, Some(_)) => Err(error::config(
            timeout.expect("given").py(),
            "a timeout makes no sense with blocking=False".into(),
        )),
    }
}
