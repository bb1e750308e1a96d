//! The one way a binding method may block: [`NoGvl::blocking`] runs the
//! core call without the GVL, so other Ruby threads run meanwhile, and with
//! an unblocking function, so `Thread#raise`, `Timeout.timeout` and Ctrl-C
//! interrupt a wait. The core value sits inside [`NoGvl`], reachable only
//! through `blocking` or `nonblocking`, so every call to it states which
//! one it is. `nonblocking` keeps the GVL, so its closure gets a [`Local`]
//! view that offers only the core methods documented to touch no server: a
//! call that may ask the server (`lock.locked()`) does not compile there,
//! so it cannot keep the GVL by forgetting to ask. The closure `blocking`
//! runs must be `Send`: Ruby objects are not, so none can be taken along
//! to where the GVL is not held. [`blocking`], the form without an object,
//! is for the core calls that need none (a new session, `holder`, the
//! command line).
//!
//! Both run the core call as the current Fiber: a lock is held per Fiber,
//! like Ruby's own `Mutex`, not per OS thread. Ruby hands a dead Thread's
//! native thread to the next new Thread, which would otherwise inherit its
//! locks, and the fibers of one Thread share its native thread.

use lockyard::{Deadline, Interrupt};
use std::ffi::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use magnus::rb_sys::{AsRawValue, FromRawValue};
use magnus::{Error, Integer, Ruby, Value};
use rb_sys::{rb_fiber_current, rb_nogvl, rb_obj_id, RB_NOGVL_INTR_FAIL, RB_NOGVL_UBF_ASYNC_SAFE};

use crate::errors::OrRaise;

mod local;
mod wake;
use local::Local;

/// A core object whose blocking methods are reachable only without the GVL.
pub(crate) struct NoGvl<T>(T);

impl<T> NoGvl<T> {
    pub(crate) fn new(inner: T) -> Self {
        NoGvl(inner)
    }

    /// For methods that only read local state (flags, ids, tokens) and
    /// never wait on the network: they keep the GVL, and `read` sees only
    /// what [`Local`] offers of the core object.
    pub(crate) fn nonblocking<R>(&self, ruby: &Ruby, read: impl FnOnce(Local<'_, T>) -> R) -> R {
        lockyard::as_holder(current_fiber(ruby), || read(Local::new(&self.0)))
    }

    /// Runs `call` without the GVL. `call` gets an interrupt check to poll
    /// while it waits; once Ruby asks to interrupt the thread it answers
    /// true, and when `call` then gives up with `Error::Interrupted`, the
    /// pending Ruby exception (Timeout::Error, Interrupt, ...) is raised.
    /// An interrupt that raises nothing (a signal trap ran, the exception
    /// is deferred by `Thread.handle_interrupt`) resumes the call, which is
    /// why `call` may run more than once. A call that succeeds returns its
    /// value even if an interrupt came meanwhile: Ruby raises it at its next
    /// check, once the caller has kept what it was given (a lock, a token).
    pub(crate) fn blocking<R>(
        &self,
        ruby: &Ruby,
        mut call: impl FnMut(&T, Interrupt<'_>) -> lockyard::Result<R> + Send,
    ) -> Result<R, Error> {
        let holder = current_fiber(ruby);
        let on_main_thread = ruby.thread_current().as_raw() == ruby.thread_main().as_raw();
        loop {
            // The holder is a thread-local of the OS thread that runs the call.
            let attempt = without_gvl(|interrupted| {
                let _quiet = QuietSignals::block(on_main_thread);
                lockyard::as_holder(holder, || call(&self.0, interrupted))
            });
            match attempt {
                None | Some(Err(lockyard::Error::Interrupted(_))) => ruby.thread_check_ints()?,
                Some(outcome) => return outcome.or_raise(ruby),
            }
        }
    }
}

impl<T> NoGvl<T> {
    /// [`NoGvl::blocking`] for a wait until `deadline`: `call` gets the
    /// deadline of each run, [resumed](lockyard::Deadline::resumed) from
    /// the second run on, so a wait that an interrupt resumed after its
    /// deadline (a trap that keeps firing) ends at once instead of asking
    /// the server again.
    pub(crate) fn until<R>(
        &self,
        ruby: &Ruby,
        deadline: Deadline,
        mut call: impl FnMut(&T, Deadline, Interrupt<'_>) -> lockyard::Result<R> + Send,
    ) -> Result<R, Error> {
        let mut this_run = deadline;
        self.blocking(ruby, |inner, interrupted| {
            let run = std::mem::replace(&mut this_run, deadline.resumed());
            call(inner, run, interrupted)
        })
    }
}

/// The current Fiber's object id: unlike its address, never reused for
/// another object, so a new Fiber cannot take over a dead one's locks.
pub(crate) fn current_fiber(_ruby: &Ruby) -> u64 {
    // SAFETY: called with the GVL held (a `&Ruby` proves it); neither
    // function raises.
    let id = unsafe { Value::from_raw(rb_obj_id(rb_fiber_current())) };
    Integer::from_value(id)
        .and_then(|id| id.to_u64().ok())
        .expect("Ruby object ids are non-negative Integers")
}

/// A blocking core call that needs no object (creating a session, a
/// one-off read), run like [`NoGvl::blocking`].
pub(crate) fn blocking<R>(
    ruby: &Ruby,
    mut call: impl FnMut(Interrupt<'_>) -> lockyard::Result<R> + Send,
) -> Result<R, Error> {
    NoGvl(()).blocking(ruby, |_, interrupted| call(interrupted))
}

struct Call<'a, F, R> {
    work: Option<F>,
    outcome: Option<std::thread::Result<R>>,
    interrupted: &'a AtomicBool,
}

/// What Ruby's unblocking function reaches: the flag the call polls, and
/// the thread running it, which the wake signal pulls out of a socket read.
struct Unblock {
    flag: AtomicBool,
    thread: libc::pthread_t,
}

/// Runs `work` on this thread with the GVL released; None if Ruby skipped
/// it because an interrupt was already due. Ruby raises nothing here, not
/// even for an interrupt that arrives as `work` finishes: its value comes
/// back (a token just taken must reach the caller, who stores it before
/// Ruby's next interrupt check raises). A panic in `work` is caught without
/// the GVL and resumed once it is held again.
fn without_gvl<F, R>(work: F) -> Option<R>
where
    F: FnOnce(Interrupt<'_>) -> R,
{
    wake::install();
    let interrupt = Unblock {
        flag: AtomicBool::new(false),
        // SAFETY: pthread_self always succeeds.
        thread: unsafe { libc::pthread_self() },
    };
    let mut call = Call {
        work: Some(work),
        outcome: None,
        interrupted: &interrupt.flag,
    };
    let call_ptr = &mut call as *mut Call<'_, F, R> as *mut c_void;
    let interrupt_ptr = &interrupt as *const Unblock as *mut c_void;
    // INTR_FAIL: skip `work` when an interrupt is already due (as
    // rb_thread_call_without_gvl2). UBF_ASYNC_SAFE: `unblock` only stores an
    // atomic and sends a signal, so Ruby may call it from a signal handler;
    // without this flag a single-threaded process starts and stops a helper
    // thread on every call.
    let flags = (RB_NOGVL_INTR_FAIL | RB_NOGVL_UBF_ASYNC_SAFE) as std::os::raw::c_int;
    // SAFETY: `call` and `interrupt` outlive the call; `run` touches no
    // Ruby object, `unblock` only the flag and the running thread.
    // The binding's one release of the GVL (clippy.toml bans it elsewhere).
    #[allow(clippy::disallowed_methods)]
    unsafe {
        rb_nogvl(
            Some(run::<F, R>),
            call_ptr,
            Some(unblock),
            interrupt_ptr,
            flags,
        );
    }
    call.outcome
        .map(|outcome| outcome.unwrap_or_else(|panic| panic::resume_unwind(panic)))
}

/// Runs without the GVL: must not touch any Ruby object.
unsafe extern "C" fn run<F, R>(data: *mut c_void) -> *mut c_void
where
    F: FnOnce(Interrupt<'_>) -> R,
{
    let call = &mut *(data as *mut Call<'_, F, R>);
    let work = call.work.take().expect("a call runs once");
    let interrupted = call.interrupted;
    let is_interrupted = || interrupted.load(Ordering::Acquire);
    call.outcome = Some(panic::catch_unwind(AssertUnwindSafe(|| {
        work(&is_interrupted)
    })));
    std::ptr::null_mut()
}

/// Ruby's unblocking function: called from another thread (`Thread#raise`,
/// `Timeout.timeout`) or from a signal handler on the running thread
/// (Ctrl-C) to make `run` return soon. The flag alone is seen only at the
/// core's next poll; a socket read the network left silent would hold the
/// thread until its timeout, so the running thread is also sent the wake
/// signal, which fails the read with EINTR (the core then polls).
unsafe extern "C" fn unblock(data: *mut c_void) {
    let interrupt = &*(data as *const Unblock);
    interrupt.flag.store(true, Ordering::Release);
    wake::send(interrupt.thread);
}

/// Keeps signals from failing a call while it lasts. A signal handled on a
/// thread blocked in a socket read fails the read with EINTR (Ruby installs
/// its handlers without SA_RESTART). The core repeats a wait or an acquire
/// that a signal cut short, but not a release (repeating it would report a
/// slot it just freed as lost) nor the reply read while connecting, which it
/// reports as a BackendError. So: other threads block all asynchronous
/// signals (the kernel delivers them to a thread that takes them); the main
/// thread blocks only those that never mean "stop waiting" — SIGCHLD (Ruby
/// catches it for its child processes), SIGVTALRM (Ruby's own timer) and
/// SIGPIPE — and stays open to Ctrl-C and other trapped signals. Neither
/// blocks the wake signal, which only `unblock` sends.
struct QuietSignals {
    previous: libc::sigset_t,
}

/// Faults the kernel sends to the thread that caused them: never blocked.
const SYNCHRONOUS: [libc::c_int; 7] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGABRT,
];

impl QuietSignals {
    fn block(on_main_thread: bool) -> Self {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset or
        // sigfillset before use; pthread_sigmask only changes this thread.
        unsafe {
            let mut quiet: libc::sigset_t = std::mem::zeroed();
            if on_main_thread {
                libc::sigemptyset(&mut quiet);
                for signal in [libc::SIGCHLD, libc::SIGVTALRM, libc::SIGPIPE] {
                    libc::sigaddset(&mut quiet, signal);
                }
            } else {
                libc::sigfillset(&mut quiet);
                for signal in SYNCHRONOUS {
                    libc::sigdelset(&mut quiet, signal);
                }
                if let Some(signal) = wake::signal() {
                    libc::sigdelset(&mut quiet, signal);
                }
            }
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &quiet, &mut previous);
            QuietSignals { previous }
        }
    }
}

impl Drop for QuietSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask this thread had before `block`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}
