//! The only way this binding reaches a core object: every call runs
//! detached from the interpreter, so a lock wait or a Redis round trip never
//! holds the GIL and other Python threads keep running meanwhile. The
//! wrapped value is private and these methods are its only door, so
//! forgetting to detach does not compile.

use lockyard::Interrupt;
use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::{error, logging};

/// A core object that is only ever used without the GIL.
pub(crate) struct Unlocked<T: Send + Sync> {
    inner: ManuallyDrop<T>,
}

impl<T: Send + Sync> Unlocked<T> {
    /// Builds the core object detached as well: building may resolve
    /// settings or take process-wide registries' locks. Like every
    /// detached call it parks instead of attaching to an exiting
    /// interpreter (dropping what it built).
    pub(crate) fn build(
        py: Python<'_>,
        build: impl FnOnce() -> lockyard::Result<T> + Send,
    ) -> PyResult<Self> {
        logging::prepare(py)?;
        let built = detach_unless_exiting(py, build, drop);
        finish(py, built).map(|inner| Unlocked {
            inner: ManuallyDrop::new(inner),
        })
    }

    /// Runs a call that returns promptly or after a bounded network wait
    /// (the connect and command timeouts bound it). A call that returns
    /// while the interpreter exits parks its thread (see [`Unlocked::wait`]).
    pub(crate) fn call<R: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&T) -> lockyard::Result<R> + Send,
    ) -> PyResult<R> {
        logging::prepare(py)?;
        let outcome = detach_unless_exiting(py, || call(&self.inner), drop);
        finish(py, outcome)
    }

    /// Runs a wait that Ctrl-C can cut short. The core polls `interrupted`
    /// while it waits; each poll re-attaches for a moment to run Python's
    /// signal handlers. An exception they raise (KeyboardInterrupt, or
    /// whatever a user's handler raises) ends the wait, the core gives up
    /// its place so nothing stays held, and that exception is raised here.
    ///
    /// Once the interpreter is exiting (see [`before_exit`]) a wait ends the
    /// same way without attaching, `give_back` returns what a wait that
    /// succeeded meanwhile took, and the thread parks until the process
    /// ends: attaching to a finalizing interpreter panics or ends the
    /// thread inside these frames, which aborts the process, and a grant
    /// kept by a parked thread would stay taken for its whole ttl.
    pub(crate) fn wait<R: Send>(
        &self,
        py: Python<'_>,
        wait: impl FnOnce(&T, Interrupt<'_>) -> lockyard::Result<R> + Send,
        give_back: impl FnOnce(&T, R) + Send,
    ) -> PyResult<R> {
        logging::prepare(py)?;
        let (outcome, raised) = detach_unless_exiting(
            py,
            || {
                let raised: RefCell<Option<PyErr>> = RefCell::new(None);
                let interrupted = || {
                    if must_not_attach() {
                        return true;
                    }
                    // Attaching after the exit check above is this door's
                    // to do (clippy.toml bans attaching anywhere else).
                    #[allow(clippy::disallowed_methods)]
                    let checked = Python::try_attach(|py| py.check_signals());
                    match checked {
                        Some(Ok(())) => false,
                        Some(Err(e)) => {
                            raised.borrow_mut().get_or_insert(e);
                            true
                        }
                        // Finalized already: nobody is left to raise to.
                        None => true,
                    }
                };
                let outcome = wait(&self.inner, &interrupted);
                (outcome, raised.into_inner())
            },
            |(outcome, _)| {
                // Best effort: what this fails to give back runs out by its
                // ttl, and no one is left to report the failure to.
                if let Ok(taken) = outcome {
                    give_back(&self.inner, taken);
                }
            },
        );
        match (outcome, raised) {
            (Err(lockyard::Error::Interrupted(_)), Some(raised)) => {
                logging::forward(py);
                Err(raised)
            }
            (outcome, _) => finish(py, outcome),
        }
    }
}

/// Runs `body` detached, counted among this process's calls in flight.
/// If the interpreter started exiting meanwhile and this thread may not
/// attach any more, `give_back` gets the outcome and the thread parks until
/// the process ends: attaching to a finalizing interpreter ends the thread
/// inside these frames, which aborts the process.
///
/// The count drops only once the thread is attached again, so
/// [`before_exit`], which waits for it to reach zero, cannot let
/// finalization begin while a thread is between its call and the GIL.
fn detach_unless_exiting<R: Send>(
    py: Python<'_>,
    body: impl FnOnce() -> R + Send,
    give_back: impl FnOnce(R) + Send,
) -> R {
    let in_flight = InFlight::enter();
    // The closure only borrows `in_flight`: moved into it, the count would
    // drop when the closure returns, before the thread re-attaches, and
    // exiting could begin finalizing while the thread waits for the GIL.
    let in_flight = &in_flight;
    // The detach of every call through this door (clippy.toml bans
    // detaching anywhere else).
    #[allow(clippy::disallowed_methods)]
    py.detach(move || {
        let outcome = body();
        if must_not_attach() {
            give_back(outcome);
            in_flight.leave_for_good();
        }
        outcome
    })
}

/// For a thread that waits on its own (the log forwarder): `wait` runs
/// detached and uncounted, since exiting need not wait for it to end, and
/// `then` runs attached and counted in flight like a call, so that exiting
/// waits for it to finish instead of finalizing under it. Once the
/// interpreter is exiting the thread parks after `wait` instead.
pub(crate) fn after_detached_wait<R>(
    py: Python<'_>,
    wait: impl FnOnce() + Send,
    then: impl FnOnce(Python<'_>) -> R,
) -> R {
    // This door's to detach (clippy.toml bans detaching elsewhere).
    #[allow(clippy::disallowed_methods)]
    let in_flight = py.detach(|| {
        wait();
        let in_flight = InFlight::enter();
        if must_not_attach() {
            in_flight.leave_for_good();
        }
        in_flight
    });
    let outcome = then(py);
    drop(in_flight);
    outcome
}

/// Set once the interpreter starts exiting, to the exiting process and
/// thread: every other thread checks it instead of attaching. A child
/// forked meanwhile (by a daemon thread) is not exiting: its threads
/// attach as usual.
static EXITING: Mutex<Option<(u32, ThreadId)>> = Mutex::new(None);
/// Whether [`EXITING`] was set, read without its mutex on every poll.
static EXIT_STARTED: AtomicBool = AtomicBool::new(false);
/// This process's threads inside a detached call, as `pid << 32 | count`
/// (see [`in_flight`]).
static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);
/// How long exiting waits for calls in flight: a wait notices within a
/// 50 ms poll, then leaves the queue in one round trip; a call's round trip
/// is bounded by the command timeout, and one still running after this
/// parks when it returns.
const GIVE_UP_WITHIN: Duration = Duration::from_secs(2);

/// Registered with `atexit`, which runs after non-daemon threads were
/// joined and before finalization begins, on the thread that finalizes:
/// from now on every other thread's wait ends without attaching and its
/// calls park when they return. Exiting then waits, without the GIL, until
/// every call in flight has parked or attached again: otherwise the process
/// could end first and strand a grant a waiter was handed. The exiting
/// thread itself goes on as before: later exit handlers and finalizers run
/// on it and may take and release locks.
#[pyfunction]
pub(crate) fn before_exit(py: Python<'_>) {
    *EXITING.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((std::process::id(), std::thread::current().id()));
    EXIT_STARTED.store(true, Ordering::Release);
    // Waits of asyncio loops that will never run again leave their lines.
    crate::asyncio::abort_all();
    // Not counted in flight like a call: this wait is for the count to
    // reach zero (clippy.toml bans detaching outside this file).
    #[allow(clippy::disallowed_methods)]
    py.detach(|| {
        let give_up_at = Instant::now() + GIVE_UP_WITHIN;
        while in_flight(0) > 0 && Instant::now() < give_up_at {
            std::thread::sleep(Duration::from_millis(5));
        }
        // An uncaught KeyboardInterrupt ends the process by SIGINT, after
        // this hook and without C's atexit: wait for handed-off work here.
        lockyard::finish_background_work();
    });
    // The forwarder parks once exiting has begun: what the background
    // logged while this waited is handed over here, on the exiting thread,
    // while logging still works.
    logging::forward(py);
}

/// Whether this process has begun exiting ([`before_exit`] ran in it).
pub(crate) fn exiting() -> bool {
    EXIT_STARTED.load(Ordering::Acquire)
        && matches!(
            *EXITING.lock().unwrap_or_else(|e| e.into_inner()),
            Some((pid, _)) if pid == std::process::id()
        )
}

/// Whether this thread must not attach again: the interpreter is exiting
/// (or gone) and this is not the thread that finalizes it. The exiting
/// thread always may: Python clears `Py_IsInitialized` when finalization
/// begins, before it runs the modules' finalizers on that thread, and a
/// lockyard call from one of them must return, not park the thread that
/// has to finish exiting.
fn must_not_attach() -> bool {
    if EXIT_STARTED.load(Ordering::Acquire) {
        let exiting = *EXITING.lock().unwrap_or_else(|e| e.into_inner());
        match exiting {
            Some((pid, thread)) if pid == std::process::id() => {
                return thread != std::thread::current().id();
            }
            // Forked while the parent exited: this process is not exiting.
            _ => {}
        }
    }
    !interpreter_usable()
}

/// One thread's detached call, counted in [`IN_FLIGHT`] until dropped.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        in_flight(1);
        InFlight
    }

    /// Leaves the count and parks this thread until the process ends (the
    /// count is left here: the owner's drop never runs).
    fn leave_for_good(&self) -> ! {
        in_flight(-1);
        loop {
            std::thread::park();
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        in_flight(-1);
    }
}

/// Adds `delta` to the count of this process's calls in flight and returns
/// it. A forked child starts from none: its parent's threads do not exist
/// in it, and its exit must not wait for them.
fn in_flight(delta: i64) -> u64 {
    let pid = u64::from(std::process::id());
    let mut current = IN_FLIGHT.load(Ordering::Acquire);
    loop {
        let count = if current >> 32 == pid {
            current & 0xffff_ffff
        } else {
            0
        };
        let next = count.saturating_add_signed(delta);
        match IN_FLIGHT.compare_exchange_weak(
            current,
            pid << 32 | next,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return next,
            Err(actual) => current = actual,
        }
    }
}

fn interpreter_usable() -> bool {
    // SAFETY: callable at any time, attached or not.
    unsafe { pyo3::ffi::Py_IsInitialized() != 0 }
}

/// Runs a core call that needs no object (a one-off read such as
/// `holder`) detached, like [`Unlocked::call`].
pub(crate) fn detached<R: Send>(
    py: Python<'_>,
    call: impl FnOnce() -> lockyard::Result<R> + Send,
) -> PyResult<R> {
    logging::prepare(py)?;
    let outcome = detach_unless_exiting(py, call, drop);
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
    /// already shutting down (then nothing else can run anyway). Counted
    /// in flight like every detached call: a daemon thread's drop that
    /// returns while the interpreter exits parks instead of attaching.
    fn drop(&mut self) {
        // SAFETY: `inner` is taken exactly once, here, and never used again.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        let dropping = move || drop(inner);
        // If attaching is impossible, try_attach drops the closure unrun,
        // and with it `inner`, on this thread. Attaching is this door's to
        // do (clippy.toml bans it anywhere else).
        #[allow(clippy::disallowed_methods)]
        Python::try_attach(|py| detach_unless_exiting(py, dropping, drop));
    }
}
