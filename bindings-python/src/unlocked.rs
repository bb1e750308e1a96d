//! The only way this binding reaches a core object: every call runs
//! detached from the interpreter, so a lock wait or a Redis round trip never
//! holds the GIL and other Python threads keep running meanwhile. The
//! wrapped value is private and these methods are its only door, so
//! forgetting to detach does not compile.

use std::cell::RefCell;
use std::mem::ManuallyDrop;

use pyo3::prelude::*;

use crate::{error, logging};

/// A core object that is only ever used without the GIL.
pub(crate) struct Unlocked<T: Send + Sync> {
    inner: ManuallyDrop<T>,
}

impl<T: Send + Sync> Unlocked<T> {
    /// Builds the core object detached as well: building may resolve
    /// settings or take process-wide registries' locks.
    pub(crate) fn build(
        py: Python<'_>,
        build: impl FnOnce() -> lockyard::Result<T> + Send,
    ) -> PyResult<Self> {
        let built = py.detach(build);
        finish(py, built).map(|inner| Unlocked {
            inner: ManuallyDrop::new(inner),
        })
    }

    /// Runs a call that returns promptly or after a bounded network wait
    /// (the connect and command timeouts bound it).
    pub(crate) fn call<R: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&T) -> lockyard::Result<R> + Send,
    ) -> PyResult<R> {
        let outcome = py.detach(|| call(&self.inner));
        finish(py, outcome)
    }

    /// Runs a wait that Ctrl-C can cut short. The core polls `interrupted`
    /// while it waits; each poll re-attaches for a moment to run Python's
    /// signal handlers. An exception they raise (KeyboardInterrupt, or
    /// whatever a user's handler raises) ends the wait, the core gives up
    /// its place so nothing stays held, and that exception is raised here.
    pub(crate) fn wait<R: Send>(
        &self,
        py: Python<'_>,
        wait: impl FnOnce(&T, &dyn Fn() -> bool) -> lockyard::Result<R> + Send,
    ) -> PyResult<R> {
        let (outcome, raised) = py.detach(|| {
            let raised: RefCell<Option<PyErr>> = RefCell::new(None);
            let interrupted = || match Python::attach(|py| py.check_signals()) {
                Ok(()) => false,
                Err(e) => {
                    raised.borrow_mut().get_or_insert(e);
                    true
                }
            };
            let outcome = wait(&self.inner, &interrupted);
            (outcome, raised.into_inner())
        });
        match (outcome, raised) {
            (Err(lockyard::Error::Interrupted(_)), Some(raised)) => {
                logging::forward(py);
                Err(raised)
            }
            (outcome, _) => finish(py, outcome),
        }
    }
}

/// Runs a core call that needs no object (a one-off read such as
/// `holder`) detached, like [`Unlocked::call`].
pub(crate) fn detached<R: Send>(
    py: Python<'_>,
    call: impl FnOnce() -> lockyard::Result<R> + Send,
) -> PyResult<R> {
    let outcome = py.detach(call);
    finish(py, outcome)
}

/// Back on the interpreter: hand over what the core logged meanwhile, then
/// turn a core error into its Python exception.
fn finish<R>(py: Python<'_>, outcome: lockyard::Result<R>) -> PyResult<R> {
    logging::forward(py);
    outcome.map_err(|e| error::to_py(py, e))
}

impl<T: Send + Sync> Drop for Unlocked<T> {
    /// Dropping a core lock gives back what this process still holds, a
    /// network round trip: detach for it too, unless the interpreter is
    /// already shutting down (then nothing else can run anyway).
    fn drop(&mut self) {
        // SAFETY: `inner` is taken exactly once, here, and never used again.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        let dropping = move || drop(inner);
        // If attaching is impossible, try_attach drops the closure unrun,
        // and with it `inner`, on this thread.
        Python::try_attach(|py| py.detach(dropping));
    }
}
