//! The end of something that is ended once, while other calls may ask to
//! end it too (a session's destroy, its drop, a destroy in the
//! background): the first call does the work, and a later one waits until
//! that work is done, so that whoever sees its destroy return finds the
//! session gone from the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::Result;

/// The longest a later call waits for the first one to end it.
const ENDING_WAIT: Duration = Duration::from_secs(30);

pub(crate) struct Ending {
    begun: AtomicBool,
    /// The pid of the process doing the work, until it is done.
    by: Mutex<Option<u32>>,
    done: Condvar,
}

impl Ending {
    pub(crate) fn new() -> Self {
        Ending {
            begun: AtomicBool::new(false),
            by: Mutex::new(None),
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
            *by = Some(std::process::id());
        }
        then();
        first
    }

    /// Whether the end has begun (or is done).
    pub(crate) fn begun(&self) -> bool {
        self.begun.load(Ordering::Acquire)
    }

    /// The first caller's work is done: wakes those waiting for it.
    pub(crate) fn finish(&self) {
        *self.by.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.done.notify_all();
    }

    /// Waits until the work under way in this process is done (a process
    /// forked meanwhile has nobody doing it, and does not wait), at most
    /// [`ENDING_WAIT`].
    pub(crate) fn wait(&self) {
        let give_up_at = Instant::now() + ENDING_WAIT;
        let mut by = self.by.lock().unwrap_or_else(|e| e.into_inner());
        while *by == Some(std::process::id()) {
            let left = give_up_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            by = self
                .done
                .wait_timeout(by, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Runs the end: the `first` call (see [`Ending::begin`]) does `work`
    /// and finishes; a later one waits for that.
    pub(crate) fn run(&self, first: bool, work: impl FnOnce() -> Result<()>) -> Result<()> {
        if !first {
            self.wait();
            return Ok(());
        }
        let done = work();
        self.finish();
        done
    }
}
