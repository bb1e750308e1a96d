//! The end of something that is ended once, while other calls may ask to
//! end it too (a session's destroy, its drop, a destroy in the
//! background): the first call does the work, and a later one waits until
//! that work is done and reports how it went, so that whoever sees its
//! destroy return Ok finds the session gone from the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The longest a later call waits for the first one to end it.
const ENDING_WAIT: Duration = Duration::from_secs(30);

pub(crate) struct Ending {
    begun: AtomicBool,
    /// The pid of the process doing the work, until it is done; and how
    /// the work failed, for the calls that waited for it.
    by: Mutex<(Option<u32>, Option<Error>)>,
    done: Condvar,
}

impl Ending {
    pub(crate) fn new() -> Self {
        Ending {
            begun: AtomicBool::new(false),
            by: Mutex::new((None, None)),
            done: Condvar::new(),
        }
    }

    /// Marks the end begun, and `then` done under the same lock (so no
    /// caller sees it begun before `then` took effect). True for the first
    /// call, which must call [`Ending::finish`] once its work is done.
    pub(crate) fn begin(&self, then: impl FnOnce()) -> bool {
        let mut by = self.by.lock().unwrap_or_else(|e| e.into_inner());
        let first = !self.begun.swap(true, Ordering::AcqRel);
        if first {
            by.0 = Some(crate::pid::current());
        }
        then();
        first
    }

    /// Whether the end has begun (or is done).
    pub(crate) fn begun(&self) -> bool {
        self.begun.load(Ordering::Acquire)
    }

    /// The first caller's work is done, as `outcome` says: wakes those
    /// waiting for it.
    fn finish(&self, outcome: &Result<()>) {
        let mut by = self.by.lock().unwrap_or_else(|e| e.into_inner());
        by.0 = None;
        by.1 = outcome.as_ref().err().map(retold);
        self.done.notify_all();
    }

    /// Waits until the work under way in this process is done (a process
    /// forked meanwhile has nobody doing it, and does not wait), at most
    /// [`ENDING_WAIT`]; the work's failure, if it failed.
    fn wait(&self) -> Result<()> {
        let give_up_at = Instant::now() + ENDING_WAIT;
        let mut by = self.by.lock().unwrap_or_else(|e| e.into_inner());
        while by.0 == Some(crate::pid::current()) {
            let left = give_up_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            by = self
                .done
                .wait_timeout(by, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        by.1.as_ref().map_or(Ok(()), |failed| Err(retold(failed)))
    }

    /// Runs the end: the `first` call (see [`Ending::begin`]) does `work`
    /// and finishes; a later one waits for that, and fails as it failed.
    pub(crate) fn run(&self, first: bool, work: impl FnOnce() -> Result<()>) -> Result<()> {
        if !first {
            return self.wait();
        }
        let done = work();
        self.finish(&done);
        done
    }
}

/// `failed` told again, to another caller (an `Error` is not `Clone`).
fn retold(failed: &Error) -> Error {
    match failed {
        Error::Backend {
            server,
            operation,
            message,
            transient,
            ..
        } => Error::Backend {
            server: server.clone(),
            operation: operation.clone(),
            message: message.clone(),
            source: None,
            transient: *transient,
        },
        other => Error::Config(other.to_string()),
    }
}
