//! Core log records reach Python's `logging.getLogger("lockyard")`. The
//! core logs partly from its background runtime thread, which must never
//! call into Python (it would need the GIL, and a refresh must not wait for
//! a busy interpreter), so records wait in a bounded queue and every
//! Python-facing call, back on the interpreter anyway, forwards them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// Enough for every refresh warning of many locks between two calls; past
/// it, records are counted and dropped rather than growing without bound.
const CAPACITY: usize = 1024;

struct Record {
    level: log::Level,
    message: String,
}

static QUEUE: Mutex<VecDeque<Record>> = Mutex::new(VecDeque::new());
static DROPPED: AtomicUsize = AtomicUsize::new(0);

fn queue() -> MutexGuard<'static, VecDeque<Record>> {
    QUEUE.lock().unwrap_or_else(|e| e.into_inner())
}

struct Queued;

impl log::Log for Queued {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut queue = queue();
        if queue.len() < CAPACITY {
            queue.push_back(Record {
                level: record.level(),
                message: record.args().to_string(),
            });
        } else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush(&self) {}
}

/// Routes the `log` crate into the queue; once per process.
pub(crate) fn install() {
    static QUEUED: Queued = Queued;
    // Fails only if a logger is installed already (the module imported
    // twice): that one keeps working.
    if log::set_logger(&QUEUED).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// Hands queued records to the `lockyard` logger. Call with the GIL, at
/// the end of every call that reached the core.
pub(crate) fn forward(py: Python<'_>) {
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    // Never wait for the logging thread here: whatever it is pushing now is
    // forwarded by the next call.
    let records: Vec<Record> = match QUEUE.try_lock() {
        Ok(mut queue) => queue.drain(..).collect(),
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner().drain(..).collect(),
        Err(TryLockError::WouldBlock) => Vec::new(),
    };
    if records.is_empty() && dropped == 0 {
        return;
    }
    if let Err(e) = emit(py, records, dropped) {
        // Logging trouble must not replace the outcome of the lock call.
        e.write_unraisable(py, None);
    }
}

fn emit(py: Python<'_>, records: Vec<Record>, dropped: usize) -> PyResult<()> {
    static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let logger = LOGGER.get_or_try_init(py, || {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("lockyard",))?;
        Ok::<_, PyErr>(logger.unbind())
    })?;
    let logger = logger.bind(py);
    for record in records {
        logger.call_method1("log", (python_level(record.level), "%s", record.message))?;
    }
    if dropped > 0 {
        let message =
            format!("{dropped} lockyard log records were dropped: too many between two calls");
        logger.call_method1("warning", ("%s", message))?;
    }
    Ok(())
}

/// The `logging` module's number for a level.
fn python_level(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 40,
        log::Level::Warn => 30,
        log::Level::Info => 20,
        log::Level::Debug => 10,
        log::Level::Trace => 5,
    }
}
