//! `lockyard.gcs.Lock`: the core GCS lock with the Redis lock's Python
//! idioms and the Ruby gem's constructor options.

use std::sync::Arc;
use std::time::Duration;

use lockyard::wait::InTime;
use pyo3::prelude::*;
use pyo3::types::{PyAny, PyBool, PyDict, PyString};

use crate::block;
use crate::convert::{acquire_timeout, count, optional_seconds, seconds, text};
use crate::unlocked::Unlocked;
use crate::{error, logging};

/// A distributed lock on one object in a Google Cloud Storage bucket.
///
/// Each thread is a separate holder (unless ``thread_safe=False``). While
/// held, the object is refreshed in the background; ``healthy`` and
/// ``check_health()`` tell whether the lock may have been lost since. The
/// bucket must exist. Credentials: Application Default Credentials, or
/// ``cloud_storage_options={"credentials": "/path/credentials.json"}`` (or
/// the file's dict): a service-account key, ``authorized_user``,
/// ``impersonated_service_account`` or ``external_account`` (Workload
/// Identity Federation); ``STORAGE_EMULATOR_HOST`` selects an emulator.
///
/// >>> lock = Lock(bucket_name="my-bucket", path="locks/deploy", ttl=300.0)
/// >>> with lock:
/// ...     lock.check_health()
#[pyclass(frozen, module = "lockyard.gcs", name = "Lock")]
pub(crate) struct GcsLock {
    lock: Unlocked<lockyard::gcs::Lock>,
}

#[pymethods]
impl GcsLock {
    /// Validates every option without sending a request: bad values raise
    /// ``lockyard.ConfigError``. ``timeout`` is the wait of ``with lock:``
    /// (None: forever). ``logger`` (a ``logging.Logger`` or adapter) gets
    /// this lock's records, at every level, instead of the ``lockyard``
    /// logger.
    #[new]
    #[pyo3(
        signature = (bucket_name, path, *, instance_identity_prefix=None, thread_safe=None, ttl=None, refresh_interval=None, max_refresh_fails=None, backoff_min=None, backoff_max=None, backoff_multiplier=None, object_acl=None, cloud_storage_options=None, cloud_storage_bucket_options=None, timeout=None, logger=None),
        text_signature = "(bucket_name, path, *, instance_identity_prefix=None, thread_safe=True, ttl=300.0, refresh_interval=None, max_refresh_fails=3, backoff_min=1.0, backoff_max=30.0, backoff_multiplier=2.0, object_acl=None, cloud_storage_options=None, cloud_storage_bucket_options=None, timeout=None, logger=None)"
    )]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per option of the gem"
    )]
    fn new(
        py: Python<'_>,
        bucket_name: &Bound<'_, PyAny>,
        path: &Bound<'_, PyAny>,
        instance_identity_prefix: Option<&Bound<'_, PyAny>>,
        thread_safe: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        refresh_interval: Option<&Bound<'_, PyAny>>,
        max_refresh_fails: Option<&Bound<'_, PyAny>>,
        backoff_min: Option<&Bound<'_, PyAny>>,
        backoff_max: Option<&Bound<'_, PyAny>>,
        backoff_multiplier: Option<&Bound<'_, PyAny>>,
        object_acl: Option<&Bound<'_, PyAny>>,
        cloud_storage_options: Option<&Bound<'_, PyAny>>,
        cloud_storage_bucket_options: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        logger: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let builder = gcs_lock_builder(
            py,
            bucket_name,
            path,
            [instance_identity_prefix, thread_safe, ttl, refresh_interval],
            [
                max_refresh_fails,
                backoff_min,
                backoff_max,
                backoff_multiplier,
            ],
            [
                object_acl,
                cloud_storage_options,
                cloud_storage_bucket_options,
            ],
            [timeout, logger],
        )?;
        Ok(GcsLock {
            lock: Unlocked::build(py, || builder.build())?,
        })
    }

    /// Waits with the constructor's ``timeout``; raises
    /// ``lockyard.TimeoutError`` when it runs out.
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let this = slf.get();
        let py = slf.py();
        let timeout = this.lock.call(py, |lock| Ok(lock.default_timeout()))?;
        this.lock.wait(
            py,
            |lock, interrupted| lock.acquire_interruptibly(timeout, interrupted),
            |lock, ()| {
                let _ = lock.release();
            },
        )?;
        Ok(slf.clone())
    }

    /// Releases however the block ends; never suppresses its exception,
    /// nor replaces it when releasing fails too (see ``block.rs``). In a
    /// process forked inside the block it leaves the parent's hold alone.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        // Interruptible: while the bucket keeps failing, giving back
        // retries until the lease deadline.
        let left = self.lock.wait(
            py,
            |lock, interrupted| lock.leave_interruptibly(interrupted).map(drop),
            |_, ()| {},
        );
        block::exit(py, exc, left)
    }

    /// Waits up to ``timeout`` seconds (None: forever; 0 or
    /// ``blocking=False``: one attempt). True if acquired, False if the
    /// timeout ran out, like ``threading.Lock.acquire``.
    #[pyo3(signature = (timeout=None, *, blocking=true))]
    fn acquire(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        blocking: bool,
    ) -> PyResult<bool> {
        let timeout = acquire_timeout(timeout, blocking)?;
        self.acquire_within(py, timeout)
    }

    /// One attempt that never waits: True if the lock was free (or stale).
    fn try_acquire(&self, py: Python<'_>) -> PyResult<bool> {
        self.acquire_within(py, Some(Duration::ZERO))
    }

    /// Releases this thread's hold (``lockyard.NotLockedError`` if none);
    /// logs a warning on the ``lockyard`` logger if the lock had been lost.
    /// Interruptible (Ctrl-C): while the bucket keeps failing it retries
    /// until the lease deadline; interrupted, the object goes stale.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.unlock(py).map(drop)
    }

    /// Releases like ``release()`` and returns whether the server still had
    /// the lock (the gem's ``unlock``).
    fn unlock(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.wait(
            py,
            |lock, interrupted| lock.release_interruptibly(interrupted),
            |_, _| {},
        )
    }

    /// Forgets this thread's hold without touching the server and stops
    /// refreshing it. True if there was one.
    fn abandon(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| Ok(lock.abandon()))
    }

    /// Whether this thread holds the lock and its lease is surely live.
    #[getter]
    fn healthy(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| Ok(lock.healthy()))
    }

    /// Raises ``lockyard.LockUnhealthyError`` if this thread's hold may be
    /// lost, ``lockyard.NotLockedError`` if it holds nothing.
    fn check_health(&self, py: Python<'_>) -> PyResult<()> {
        self.lock.call(py, |lock| lock.check_health())
    }

    /// The last refresh failure, kept after the lock heals or is released.
    #[getter]
    fn last_refresh_error(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.lock.call(py, |lock| Ok(lock.last_refresh_error()))
    }

    /// The object generation of this thread's hold; None when not held.
    #[getter]
    fn fencing_token(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.lock.call(py, |lock| Ok(lock.fencing_token()))
    }

    /// Asks the server whether this thread's identity holds the lock.
    fn owned(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| lock.owned())
    }

    /// Asks the server whether the lock object exists.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock.call(py, |lock| lock.locked())
    }

    /// ``owned()``, by the gem's name.
    fn owned_according_to_server(&self, py: Python<'_>) -> PyResult<bool> {
        self.owned(py)
    }

    /// ``locked()``, by the gem's name.
    fn locked_according_to_server(&self, py: Python<'_>) -> PyResult<bool> {
        self.locked(py)
    }

    /// Whether this thread holds the lock, by this process's own state (no
    /// request; a hold lost since still counts until it is released).
    fn owned_according_to_internal_state(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock
            .call(py, |lock| Ok(lock.owned_according_to_internal_state()))
    }

    /// Whether any thread of this process holds the lock, by its own state.
    fn locked_according_to_internal_state(&self, py: Python<'_>) -> PyResult<bool> {
        self.lock
            .call(py, |lock| Ok(lock.locked_according_to_internal_state()))
    }

    /// Seconds a hold lives without a refresh.
    #[getter]
    fn ttl(&self, py: Python<'_>) -> PyResult<f64> {
        self.lock.call(py, |lock| Ok(lock.ttl().as_secs_f64()))
    }

    /// This thread's holder identity, as stored in the object.
    #[getter]
    fn identity(&self, py: Python<'_>) -> PyResult<String> {
        self.lock.call(py, |lock| Ok(lock.identity()))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (identity, token) = self
            .lock
            .call(py, |lock| Ok((lock.identity(), lock.fencing_token())))?;
        let held = match token {
            Some(token) => format!("held, fencing_token={token}"),
            None => "not held".into(),
        };
        Ok(format!(
            "<lockyard.gcs.Lock identity={identity:?} {held} by this thread>"
        ))
    }
}

impl GcsLock {
    fn acquire_within(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<bool> {
        self.lock.wait(
            py,
            |lock, interrupted| lock.acquire_interruptibly(timeout, interrupted).in_time(),
            |lock, acquired| {
                if acquired {
                    let _ = lock.release();
                }
            },
        )
    }
}

/// The items of an options dict (None: none).
/// The options of ``lockyard.gcs.Lock`` (and its asyncio twin), validated
/// without sending a request, in the order of the constructor's signature.
pub(crate) fn gcs_lock_builder(
    py: Python<'_>,
    bucket_name: &Bound<'_, PyAny>,
    path: &Bound<'_, PyAny>,
    [instance_identity_prefix, thread_safe, ttl, refresh_interval]: [Option<&Bound<'_, PyAny>>; 4],
    [max_refresh_fails, backoff_min, backoff_max, backoff_multiplier]: [Option<&Bound<'_, PyAny>>;
        4],
    [object_acl, cloud_storage_options, cloud_storage_bucket_options]: [Option<&Bound<'_, PyAny>>;
        3],
    [timeout, logger]: [Option<&Bound<'_, PyAny>>; 2],
) -> PyResult<lockyard::gcs::LockBuilder> {
    let thread_safe = match thread_safe {
        None => true,
        Some(value) => value
            .cast::<PyBool>()
            .map(|b| b.is_true())
            .map_err(|_| error::config(py, "thread_safe must be a bool".into()))?,
    };
    let mut builder =
        lockyard::gcs::Lock::builder(text("bucket_name", bucket_name)?, text("path", path)?)
            .thread_safe(thread_safe)
            .timeout(optional_seconds("timeout", timeout)?);

    if let Some(prefix) = given(instance_identity_prefix) {
        builder = builder.instance_identity_prefix(text("instance_identity_prefix", &prefix)?);
    }
    if let Some(ttl) = given(ttl) {
        builder = builder.ttl(seconds("ttl", &ttl)?);
    }
    if let Some(every) = optional_seconds("refresh_interval", refresh_interval)? {
        builder = builder.refresh_interval(every);
    }
    if let Some(fails) = given(max_refresh_fails) {
        builder = builder.max_refresh_fails(count("max_refresh_fails", &fails)?);
    }
    if let Some(wait) = given(backoff_min) {
        builder = builder.backoff_min(seconds("backoff_min", &wait)?);
    }
    if let Some(wait) = given(backoff_max) {
        builder = builder.backoff_max(seconds("backoff_max", &wait)?);
    }
    if let Some(factor) = given(backoff_multiplier) {
        let factor = (!factor.is_instance_of::<PyBool>())
            .then(|| factor.extract::<f64>().ok())
            .flatten()
            .ok_or_else(|| error::config(py, "backoff_multiplier must be a number".into()))?;
        builder = builder.backoff_multiplier(factor);
    }
    if let Some(acl) = given(object_acl) {
        builder = builder.object_acl(text("object_acl", &acl)?);
    }
    for (key, value) in options("cloud_storage_options", cloud_storage_options)? {
        builder = match key.as_str() {
            "credentials" | "keyfile" if value.is_instance_of::<PyDict>() => {
                let json = py.import("json")?.call_method1("dumps", (value,))?;
                builder.credentials_json(json.extract::<String>()?)
            }
            "credentials" | "keyfile" => builder.credentials_file(text(&key, &value)?),
            "emulator_host" => builder.emulator_host(text(&key, &value)?),
            "endpoint" => builder.endpoint(text(&key, &value)?),
            "timeout" => builder.request_timeout(seconds(&key, &value)?),
            // Objects need no project; the bucket names it.
            "project_id" | "project" => builder,
            other => return Err(unsupported(py, "cloud_storage_options", other)),
        };
    }
    for (key, value) in options("cloud_storage_bucket_options", cloud_storage_bucket_options)? {
        builder = match key.as_str() {
            "user_project" => builder.user_project(text(&key, &value)?),
            "skip_lookup" => builder,
            other => return Err(unsupported(py, "cloud_storage_bucket_options", other)),
        };
    }
    if let Some(logger) = given(logger) {
        builder = builder.log_sink(log_sink(&logger)?);
    }
    Ok(builder)
}

fn options<'py>(
    what: &str,
    value: Option<&Bound<'py, PyAny>>,
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let dict = value
        .cast::<PyDict>()
        .map_err(|_| error::config(value.py(), format!("{what} must be a dict")))?;
    dict.iter()
        .map(|(key, value)| {
            let key = key
                .cast::<PyString>()
                .map_err(|_| error::config(value.py(), format!("{what} keys must be str")))?
                .to_string();
            Ok((key, value))
        })
        .collect()
}

/// Sends a lock's records to `logger`, which must have a ``log`` method.
fn log_sink(logger: &Bound<'_, PyAny>) -> PyResult<lockyard::gcs::LogSink> {
    let loggable = logger
        .getattr("log")
        .map(|log| log.is_callable())
        .unwrap_or(false);
    if !loggable {
        return Err(error::config(
            logger.py(),
            "logger must be a logging.Logger (or have its log method)".into(),
        ));
    }
    let target = logging::OwnLogger::new(logger)?;
    Ok(Arc::new(move |level, message: &str| {
        if target.enabled(level) {
            logging::push(level, message.to_owned(), Some(Arc::clone(&target)));
        }
    }))
}

fn unsupported(py: Python<'_>, what: &str, key: &str) -> PyErr {
    error::config(py, format!("{what}: unsupported option {key:?}"))
}

/// An optional argument that was given and is not None.
fn given<'py>(value: Option<&Bound<'py, PyAny>>) -> Option<Bound<'py, PyAny>> {
    value.filter(|v| !v.is_none()).cloned()
}
