//! The bridge under `lockyard.asyncio`: a core `_async` future runs on
//! lockyard's runtime, and its outcome reaches the asyncio loop that awaits
//! it through an eventfd the loop watches (`loop.add_reader`). Neither a
//! waiting coroutine nor the runtime holds a thread or the GIL for it: the
//! runtime's thread only queues the finished outcome and writes the
//! eventfd; the loop's thread, attached already, turns it into Python
//! objects when it reads the eventfd. Cancelling the awaiting task drops
//! the core future, which leaves nothing held or queued; an outcome that
//! arrives for a future nobody awaits any more is abandoned (a hold given
//! back), never dropped on the floor.

use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::error;

/// What a finished core future hands the loop: called with the loop's
/// interpreter to make the awaited result, or with None to abandon it.
type Finish = Box<dyn for<'py> FnOnce(Option<Python<'py>>) -> PyResult<Py<PyAny>> + Send>;

/// One asyncio loop's inbox of finished core futures. Weakly referenced
/// (``lockyard.asyncio._bridge`` keeps it per loop without keeping it
/// alive): the loop's reader holds it, and once the loop is closed and its
/// inbox freed, the outcomes it still held are given back.
#[pyclass(frozen, weakref, module = "lockyard._lockyard")]
pub(crate) struct Completions {
    eventfd: OwnedFd,
    finished: Mutex<Vec<(Py<PyAny>, Finish)>>,
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        // SAFETY: eventfd takes no pointers; a valid descriptor is owned here.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Completions {
            // SAFETY: `fd` was just created and is owned by nothing else.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
            finished: Mutex::new(Vec::new()),
        })
    }

    /// The descriptor to pass to ``loop.add_reader``.
    fn fileno(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// The reader callback: settles every future whose core work finished.
    /// A future that is done already (its task was cancelled) gets nothing,
    /// and what its work took is given back. An error settling one future
    /// (a KeyboardInterrupt raised by a signal handler inside
    /// ``set_result``) does not strand the others: they are settled first,
    /// and the first error is raised after.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `count`; EAGAIN is harmless.
        unsafe { libc::read(self.eventfd.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        let finished =
            std::mem::take(&mut *self.finished.lock().unwrap_or_else(|e| e.into_inner()));
        let mut first_error = None;
        for (future, finish) in finished {
            if let Err(e) = settle_one(py, future.bind(py), finish) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Settles `future` with `finish`'s outcome, or abandons it if `future` is
/// done already (or cannot even say whether it is).
fn settle_one(py: Python<'_>, future: &Bound<'_, PyAny>, finish: Finish) -> PyResult<()> {
    let done = future
        .call_method0("done")
        .and_then(|done| done.is_truthy());
    if done.as_ref().map_or(true, |done| *done) {
        let _ = finish(None);
        return done.map(drop);
    }
    match finish(Some(py)) {
        Ok(value) => future.call_method1("set_result", (value,))?,
        Err(e) => future.call_method1("set_exception", (e.into_value(py),))?,
    };
    Ok(())
}

impl Completions {
    fn push(&self, future: Py<PyAny>, finish: Finish) {
        self.finished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((future, finish));
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from `one`; a full counter (EAGAIN) still
        // leaves the eventfd readable, which is all the loop needs.
        unsafe { libc::write(self.eventfd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// A core future in flight for an asyncio future; ``cancel()`` drops it.
#[pyclass(frozen, module = "lockyard._lockyard")]
pub(crate) struct Pending(Arc<lockyard::Detached>);

#[pymethods]
impl Pending {
    /// Drops the core future at its next await (its task was cancelled).
    fn cancel(&self) {
        self.0.abort();
    }
}

/// The core futures some coroutine still awaits, in this process.
static AWAITED: Mutex<Vec<Weak<lockyard::Detached>>> = Mutex::new(Vec::new());

impl Pending {
    fn new(detached: lockyard::Detached) -> Pending {
        let detached = Arc::new(detached);
        let mut awaited = AWAITED.lock().unwrap_or_else(|e| e.into_inner());
        awaited.retain(|pending| pending.strong_count() > 0);
        awaited.push(Arc::downgrade(&detached));
        Pending(detached)
    }
}

/// The interpreter is exiting: every core future still awaited (by a loop
/// in a daemon thread, which will never run again) is dropped, as a
/// cancelled task's is, so that its waiter leaves the line instead of
/// being handed the lock after the process is gone. Exit then waits for
/// those give-ups (`lockyard::finish_background_work`).
pub(crate) fn abort_all() {
    let awaited = std::mem::take(&mut *AWAITED.lock().unwrap_or_else(|e| e.into_inner()));
    for pending in awaited.iter().filter_map(Weak::upgrade) {
        pending.abort();
    }
}

/// Runs `work` on lockyard's runtime and settles the asyncio `future` on
/// `completions`' loop with its outcome: `deliver` makes the result, and
/// `abandon` gives back what a successful outcome took when nobody awaits
/// it any more.
pub(crate) fn settle<T, W>(
    completions: &Bound<'_, Completions>,
    future: &Bound<'_, PyAny>,
    work: W,
    deliver: for<'py> fn(Python<'py>, T) -> PyResult<Py<PyAny>>,
    abandon: impl FnOnce(T) + Send + 'static,
) -> Pending
where
    T: Send + 'static,
    W: Future<Output = lockyard::Result<T>> + Send + 'static,
{
    crate::logging::prepare_or_report(future.py());
    let completions = completions.clone().unbind();
    let future = future.clone().unbind();
    Pending::new(lockyard::detach(async move {
        let mut unclaimed = Unclaimed {
            outcome: Some(work.await),
            abandon: Some(abandon),
        };
        let finish: Finish = Box::new(move |py| {
            let outcome = unclaimed.outcome.take();
            match (py, outcome) {
                (Some(py), Some(Ok(value))) => deliver(py, value),
                (Some(py), Some(Err(e))) => Err(error::to_py(py, e)),
                (None, Some(Ok(value))) => {
                    if let Some(abandon) = unclaimed.abandon.take() {
                        abandon(value);
                    }
                    Err(pyo3::exceptions::PyRuntimeError::new_err("abandoned"))
                }
                _ => Err(pyo3::exceptions::PyRuntimeError::new_err("abandoned")),
            }
        });
        completions.get().push(future, finish);
    }))
}

/// A finished core future's outcome until the loop claims it. Dropped
/// unclaimed (its loop closed before it read its inbox, and the inbox was
/// dropped with it), a successful outcome is given back with `abandon`
/// rather than kept, and refreshed, for as long as the lock lives.
struct Unclaimed<T, A: FnOnce(T)> {
    outcome: Option<lockyard::Result<T>>,
    abandon: Option<A>,
}

impl<T, A: FnOnce(T)> Drop for Unclaimed<T, A> {
    fn drop(&mut self) {
        if let (Some(Ok(value)), Some(abandon)) = (self.outcome.take(), self.abandon.take()) {
            abandon(value);
        }
    }
}

/// A result of no value.
pub(crate) fn none(py: Python<'_>, (): ()) -> PyResult<Py<PyAny>> {
    Ok(py.None())
}

/// A bool result.
pub(crate) fn boolean(py: Python<'_>, value: bool) -> PyResult<Py<PyAny>> {
    Ok(pyo3::types::PyBool::new(py, value)
        .to_owned()
        .into_any()
        .unbind())
}

/// A str result (a slot's token).
pub(crate) fn string(py: Python<'_>, value: String) -> PyResult<Py<PyAny>> {
    Ok(pyo3::types::PyString::new(py, &value).into_any().unbind())
}

/// An int result (a count).
pub(crate) fn number(py: Python<'_>, value: u32) -> PyResult<Py<PyAny>> {
    Ok(value.into_pyobject(py)?.into_any().unbind())
}
