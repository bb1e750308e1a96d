//! `Lockyard::Logs`, the native half of `Lockyard.logger` and of the GCS
//! lock's `logger:` option. The core logs from its runtime threads, which
//! must never call into Ruby, so every record waits in one bounded queue
//! per process, which one Ruby thread (`lib/lockyard/logs.rb`) drains
//! without the GVL. A record carries the number of the Logger it is for:
//! 0 for `Lockyard.logger` (the `log` crate's records, from every
//! primitive), another for a GCS lock's own `logger:`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use lockyard::gcs::LogSink;
use lockyard::Interrupt;
use magnus::{function, prelude::*, Error, RModule, Ruby};

use crate::nogvl;

/// Past this many records not yet forwarded, new ones are dropped (and
/// counted): a slow Logger never blocks a lock call nor grows memory.
const CAPACITY: usize = 1024;

/// A record for Ruby: (Logger number, `Logger::Severity`, message).
type Record = (u64, u8, String);

struct Queue {
    records: Mutex<VecDeque<Record>>,
    arrived: Condvar,
    dropped: AtomicU64,
    /// Set by `wake`: the next (or current) `take` returns at once.
    woken: AtomicBool,
}

static QUEUE: Queue = Queue {
    records: Mutex::new(VecDeque::new()),
    arrived: Condvar::new(),
    dropped: AtomicU64::new(0),
    woken: AtomicBool::new(false),
};

impl Queue {
    fn push(&self, logger: u64, level: log::Level, message: String) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() < CAPACITY {
            records.push_back((logger, severity(level), message));
            self.arrived.notify_one();
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits up to `timeout` for records; Interrupted when Ruby asks.
    fn take(&self, timeout: Duration, interrupted: Interrupt<'_>) -> lockyard::Result<Vec<Record>> {
        let until = Instant::now() + timeout;
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        while records.is_empty() {
            if self.woken.swap(false, Ordering::Relaxed) {
                break;
            }
            if interrupted() {
                return Err(lockyard::Error::Interrupted("log records".into()));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            records = self
                .arrived
                .wait_timeout(records, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(records.drain(..).collect())
    }
}

/// Ruby's `Logger::Severity` number for a level.
fn severity(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 2,
        log::Level::Info => 1,
        log::Level::Debug | log::Level::Trace => 0,
    }
}

/// The `log` crate's records of lockyard itself (not of its HTTP or
/// Redis clients), for `Lockyard.logger`.
struct ToLockyardLogger;

impl log::Log for ToLockyardLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level() && metadata.target().starts_with("lockyard")
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            QUEUE.push(0, record.level(), record.args().to_string());
        }
    }

    fn flush(&self) {}
}

/// A GCS lock's sink for its own `logger:`, number `logger`.
pub(crate) fn sink(logger: u64) -> LogSink {
    Arc::new(move |level, message: &str| QUEUE.push(logger, level, message.to_owned()))
}

thread_local! {
    /// The queue, locked by the forking thread from just before a fork()
    /// to just after it, in parent and child.
    static LOCKED_FOR_FORK: RefCell<Option<MutexGuard<'static, VecDeque<Record>>>> =
        const { RefCell::new(None) };
}

/// Before fork(): takes the queue's lock, so that no other thread (a
/// runtime thread pushing a record, the forwarder taking some) holds it
/// when the child is made. The child has no other thread: a lock one held
/// there would stay locked, and its forwarder's first `take` (in the fork
/// hook, before `fork` returns) would wait forever.
extern "C" fn lock_before_fork() {
    let records = QUEUE.records.lock().unwrap_or_else(|e| e.into_inner());
    LOCKED_FOR_FORK.with(|held| *held.borrow_mut() = Some(records));
}

extern "C" fn unlock_in_parent() {
    LOCKED_FOR_FORK.with(|held| drop(held.borrow_mut().take()));
}

/// The child forgets the records the parent forwards itself.
extern "C" fn unlock_in_child() {
    LOCKED_FOR_FORK.with(|held| {
        if let Some(mut records) = held.borrow_mut().take() {
            records.clear();
        }
    });
}

pub(crate) fn define(lockyard: RModule) -> Result<(), Error> {
    // SAFETY: the handlers only lock and unlock a static Mutex, on the
    // forking thread; registered once, at load.
    let registered = unsafe {
        libc::pthread_atfork(
            Some(lock_before_fork),
            Some(unlock_in_parent),
            Some(unlock_in_child),
        )
    };
    if registered != 0 {
        return Err(Error::new(
            Ruby::get_with(lockyard).exception_no_mem_error(),
            "lockyard: pthread_atfork failed",
        ));
    }
    let logs = lockyard.define_module("Logs")?;
    logs.define_singleton_method("take", function!(take, 1))?;
    logs.define_singleton_method("dropped", function!(dropped, 0))?;
    logs.define_singleton_method("wake", function!(wake, 0))?;
    logs.define_singleton_method("max_severity=", function!(set_max_severity, 1))?;
    Ok(())
}

/// `[[logger, severity, message], ...]`, waiting up to `timeout` seconds
/// for some, without the GVL.
fn take(ruby: &Ruby, timeout: f64) -> Result<Vec<Record>, Error> {
    let timeout = Duration::try_from_secs_f64(timeout.clamp(0.0, 3600.0)).unwrap_or_default();
    nogvl::blocking(ruby, |interrupted| QUEUE.take(timeout, interrupted))
}

/// Ends the forwarder's wait now (at exit), records or not.
fn wake() {
    let _records = QUEUE.records.lock().unwrap_or_else(|e| e.into_inner());
    QUEUE.woken.store(true, Ordering::Relaxed);
    QUEUE.arrived.notify_all();
}

/// How many records were dropped since the last call.
fn dropped() -> u64 {
    QUEUE.dropped.swap(0, Ordering::Relaxed)
}

/// The least `Logger::Severity` that `Lockyard.logger` takes (nil: none):
/// the core's `log` calls below it cost one comparison.
fn set_max_severity(least: Option<u8>) {
    static INSTALL: Once = Once::new();
    // Only fails when something else installed a `log` logger in this
    // process; its records then go there, as its author wanted.
    INSTALL.call_once(|| drop(log::set_logger(&ToLockyardLogger)));
    log::set_max_level(match least {
        None => log::LevelFilter::Off,
        Some(0) => log::LevelFilter::Debug,
        Some(1) => log::LevelFilter::Info,
        Some(2) => log::LevelFilter::Warn,
        Some(3) => log::LevelFilter::Error,
        // FATAL and UNKNOWN: lockyard logs nothing that severe.
        Some(_) => log::LevelFilter::Off,
    });
}
