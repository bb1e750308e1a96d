//! Core log records reach Python's `logging`: the `lockyard` logger, or the
//! logger a lock was given (`GcsLock(logger=...)`).
//!
//! The core logs partly from its background runtime threads, which must
//! never call into Python (they would need the GIL, and a refresh must not
//! wait for a busy interpreter), so records wait in a bounded queue. Two
//! hands empty it: every Python-facing call on its way back (so what a call
//! logged is out before it returns), and a daemon thread that wakes when a
//! record arrives (so what the background logs is out at once, not at the
//! next call).
//!
//! Filtering is at the source and cheap: the `log` crate's maximum level
//! follows the `lockyard` logger's effective level, read at the start of
//! every call, so a disabled record costs one atomic load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::unlocked;

/// Enough for every refresh warning of many locks between two calls; past
/// it, records are counted and dropped rather than growing without bound.
const CAPACITY: usize = 1024;

/// A Python logger records can be sent to instead of `lockyard`'s.
pub(crate) type Target = Arc<OwnLogger>;

/// A logger given to one lock (`GcsLock(logger=...)`), filtered at the
/// source like the `lockyard` logger: by its effective level, read when it
/// is given and at the start of every call.
pub(crate) struct OwnLogger {
    logger: Py<PyAny>,
    /// Its effective level as last read (0, which lets every record
    /// through, for an object without `getEffectiveLevel`).
    level: AtomicI64,
}

/// Every lock's own logger, refreshed by [`prepare`].
static OWN_LOGGERS: Mutex<Vec<Weak<OwnLogger>>> = Mutex::new(Vec::new());

impl OwnLogger {
    /// `logger`, filtered by its level from now on.
    pub(crate) fn new(logger: &Bound<'_, PyAny>) -> PyResult<Target> {
        let own = Arc::new(OwnLogger {
            logger: logger.clone().unbind(),
            level: AtomicI64::new(0),
        });
        own.refresh(logger.py())?;
        let mut all = OWN_LOGGERS.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|own| own.strong_count() > 0);
        all.push(Arc::downgrade(&own));
        Ok(own)
    }

    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        let logger = self.logger.bind(py);
        if !logger.hasattr("getEffectiveLevel")? {
            return Ok(());
        }
        let level = logger.call_method0("getEffectiveLevel")?.extract::<i64>()?;
        self.level.store(level, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the logger, as last read, would handle a record at `level`.
    pub(crate) fn enabled(&self, level: log::Level) -> bool {
        i64::from(python_level(level)) >= self.level.load(Ordering::Relaxed)
    }
}

fn refresh_own_loggers(py: Python<'_>) -> PyResult<()> {
    let live: Vec<Target> = OWN_LOGGERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for own in live {
        own.refresh(py)?;
    }
    Ok(())
}

struct Record {
    level: log::Level,
    message: String,
    to: Option<Target>,
}

static QUEUE: Mutex<VecDeque<Record>> = Mutex::new(VecDeque::new());
/// Signalled when a record is queued, for the forwarding thread.
static ARRIVED: Condvar = Condvar::new();
static DROPPED: AtomicUsize = AtomicUsize::new(0);
/// The process whose thread is handing records to Python (0: none), see
/// [`Emitting`].
static EMITTING: AtomicU32 = AtomicU32::new(0);
/// The process whose forwarding thread runs (0: none yet): a forked child
/// has no such thread and starts its own.
static FORWARDER_IN: AtomicU32 = AtomicU32::new(0);
/// Set by the command line, whose warnings go nowhere.
static SILENCED: AtomicBool = AtomicBool::new(false);

fn queue() -> MutexGuard<'static, VecDeque<Record>> {
    QUEUE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Queues a record for `to` (None: the `lockyard` logger).
pub(crate) fn push(level: log::Level, message: String, to: Option<Target>) {
    let mut queue = queue();
    if queue.len() < CAPACITY {
        queue.push_back(Record { level, message, to });
        ARRIVED.notify_one();
    } else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

struct Queued;

impl log::Log for Queued {
    /// Lockyard's own records: its dependencies' (TLS, HTTP) are theirs
    /// to report, and at DEBUG they would drown ours.
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        let target = metadata.target();
        metadata.level() <= log::max_level()
            && (target.starts_with("lockyard") || target.starts_with(env!("CARGO_CRATE_NAME")))
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            push(record.level(), record.args().to_string(), None);
        }
    }

    fn flush(&self) {}
}

/// Routes the `log` crate into the queue; once per process.
pub(crate) fn install(py: Python<'_>) {
    static QUEUED: Queued = Queued;
    // Fails only if a logger is installed already (the module imported
    // twice): that one keeps working.
    if log::set_logger(&QUEUED).is_ok() {
        // A logging module patched beyond use: the next call says so.
        let _ = follow_level(py);
        // SAFETY: the handlers only lock and unlock a static mutex, on the
        // forking thread. Without them a child forked while a runtime
        // thread pushed a record would find the queue locked for good.
        // Failing (ENOMEM) leaves that narrow window open, nothing worse.
        unsafe {
            libc::pthread_atfork(
                Some(lock_before_fork),
                Some(unlock_in_parent),
                Some(unlock_in_child),
            );
        }
    }
}

thread_local! {
    /// The queue's guard, held by the forking thread across `fork`.
    static LOCKED_FOR_FORK: std::cell::RefCell<Option<MutexGuard<'static, VecDeque<Record>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Holds the queue across `fork`, so that no thread holds it when the child
/// is made: the child has no other thread, and a lock held by one would
/// stay locked. Nobody holds the queue while waiting for the GIL (which the
/// forking thread has), so this waits at most for one push or drain.
extern "C" fn lock_before_fork() {
    let records = queue();
    LOCKED_FOR_FORK.with(|held| *held.borrow_mut() = Some(records));
}

extern "C" fn unlock_in_parent() {
    LOCKED_FOR_FORK.with(|held| drop(held.borrow_mut().take()));
}

/// The child forgets the records its parent forwards itself.
extern "C" fn unlock_in_child() {
    LOCKED_FOR_FORK.with(|held| {
        if let Some(mut records) = held.borrow_mut().take() {
            records.clear();
        }
    });
}

/// The command line's warnings go nowhere: it says what happened in its
/// own one-line messages.
pub(crate) fn silence() {
    SILENCED.store(true, Ordering::Relaxed);
    log::set_max_level(log::LevelFilter::Off);
}

/// At the start of every call that reaches the core (not of a drop, which
/// may run while an exception is being raised, when calling Python is not
/// allowed): the source filters follow the loggers' levels as they are
/// now, and this process has a forwarding thread.
///
/// An exception raised while reading the level (by a signal handler that
/// ran inside `getEffectiveLevel`: KeyboardInterrupt for Ctrl-C) is the
/// call's to raise: dropping it would lose the interrupt.
pub(crate) fn prepare(py: Python<'_>) -> PyResult<()> {
    follow_level(py)?;
    refresh_own_loggers(py)?;
    let pid = std::process::id();
    // Once exiting has begun a forwarder would park at its first record
    // (and at teardown cannot even be started): the exiting thread hands
    // over its calls' records itself.
    if FORWARDER_IN.load(Ordering::Relaxed) != pid
        && !unlocked::exiting()
        && FORWARDER_IN.swap(pid, Ordering::AcqRel) != pid
    {
        if let Err(e) = start_forwarder(py) {
            FORWARDER_IN.store(0, Ordering::Release);
            e.write_unraisable(py, None);
        }
    }
    Ok(())
}

/// [`prepare`] for a call that cannot raise (an asyncio call's start):
/// an exception is reported as unraisable rather than dropped.
pub(crate) fn prepare_or_report(py: Python<'_>) {
    if let Err(e) = prepare(py) {
        e.write_unraisable(py, None);
    }
}

fn follow_level(py: Python<'_>) -> PyResult<()> {
    if SILENCED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let level = lockyard_logger(py)?
        .bind(py)
        .call_method0("getEffectiveLevel")?
        .extract::<i64>()?;
    log::set_max_level(level_filter(level));
    Ok(())
}

fn lockyard_logger(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    LOGGER.get_or_try_init(py, || {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("lockyard",))?;
        Ok(logger.unbind())
    })
}

/// The `log` crate's filter that lets through what a Python logger with
/// effective level `level` would handle.
fn level_filter(level: i64) -> log::LevelFilter {
    match level {
        ..=5 => log::LevelFilter::Trace,
        6..=10 => log::LevelFilter::Debug,
        11..=20 => log::LevelFilter::Info,
        21..=30 => log::LevelFilter::Warn,
        31..=40 => log::LevelFilter::Error,
        _ => log::LevelFilter::Off,
    }
}

fn start_forwarder(py: Python<'_>) -> PyResult<()> {
    let target = wrap_pyfunction!(forward_forever, py)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("target", target)?;
    kwargs.set_item("name", "lockyard-log-forwarder")?;
    kwargs.set_item("daemon", true)?;
    py.import("threading")?
        .call_method("Thread", (), Some(&kwargs))?
        .call_method0("start")?;
    Ok(())
}

/// The forwarding thread's body: waits without the GIL for records and
/// hands them over, until the interpreter exits (then the thread parks).
#[pyfunction]
fn forward_forever(py: Python<'_>) {
    let pid = std::process::id();
    while FORWARDER_IN.load(Ordering::Acquire) == pid {
        let forwarded = unlocked::after_detached_wait(
            py,
            || {
                let mut queue = queue();
                while queue.is_empty() && DROPPED.load(Ordering::Relaxed) == 0 {
                    queue = ARRIVED.wait(queue).unwrap_or_else(|e| e.into_inner());
                }
            },
            forward,
        );
        if !forwarded {
            // The other hand is at it and empties the queue before it
            // lets go; look again in a moment.
            unlocked::after_detached_wait(
                py,
                || std::thread::sleep(Duration::from_millis(1)),
                |_| {},
            );
        }
    }
}

/// Hands queued records to their loggers. Call with the GIL, at the end of
/// every call that reached the core. False if another thread is doing it.
pub(crate) fn forward(py: Python<'_>) -> bool {
    // Never wait for the other hand here: it may be inside a handler that
    // waits for the GIL this thread holds.
    let Some(_emitting) = Emitting::take() else {
        return false;
    };
    loop {
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        let records: Vec<Record> = queue().drain(..).collect();
        if records.is_empty() && dropped == 0 {
            return true;
        }
        emit(py, records, dropped);
    }
}

/// The right to hand records to Python, held by one thread at a time so
/// that two hands never interleave their batches. A pid rather than a
/// mutex: a child forked while its parent's forwarder was emitting must not
/// find it taken forever.
struct Emitting;

impl Emitting {
    fn take() -> Option<Emitting> {
        let pid = std::process::id();
        let holder = EMITTING.load(Ordering::Acquire);
        // `then`, not `then_some`: an Emitting built for a failed take
        // would free the other hand's right when dropped.
        (holder != pid
            && EMITTING
                .compare_exchange(holder, pid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok())
        .then(|| Emitting)
    }
}

impl Drop for Emitting {
    fn drop(&mut self) {
        EMITTING.store(0, Ordering::Release);
    }
}

/// Hands each record to its logger. Logging trouble must not replace the
/// outcome of the lock call, nor take the batch's other records with it:
/// each failure is reported (unraisable) and the next record goes on.
fn emit(py: Python<'_>, records: Vec<Record>, dropped: usize) {
    let lockyard = match lockyard_logger(py) {
        Ok(logger) => logger.bind(py),
        Err(e) => return e.write_unraisable(py, None),
    };
    for record in records {
        let logger = record.to.as_ref().map_or(lockyard, |to| to.logger.bind(py));
        let logged = logger.call_method1("log", (python_level(record.level), "%s", record.message));
        if let Err(e) = logged {
            e.write_unraisable(py, Some(logger));
        }
    }
    if dropped > 0 {
        let message =
            format!("{dropped} lockyard log records were dropped: too many between two calls");
        if let Err(e) = lockyard.call_method1("warning", ("%s", message)) {
            e.write_unraisable(py, Some(lockyard));
        }
    }
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
