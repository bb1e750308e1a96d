//! The one way a binding method may block: [`NoGvl::blocking`] runs the
//! core call without the GVL, so other Ruby threads run meanwhile, and with
//! an unblocking function, so `Thread#raise`, `Timeout.timeout` and Ctrl-C
//! interrupt a wait. The core value sits inside [`NoGvl`], so a blocking
//! call that forgets to release the GVL does not compile.

use std::ffi::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use magnus::{Error, Ruby};
use rb_sys::{rb_thread_call_without_gvl, Qnil, VALUE};

use crate::errors::OrRaise;

/// A core object whose blocking methods are reachable only without the GVL.
pub(crate) struct NoGvl<T>(T);

impl<T> NoGvl<T> {
    pub(crate) fn new(inner: T) -> Self {
        NoGvl(inner)
    }

    /// For methods that only read local state (flags, ids, tokens) and
    /// never wait on the network: they keep the GVL.
    pub(crate) fn nonblocking<R>(&self, read: impl FnOnce(&T) -> R) -> R {
        read(&self.0)
    }

    /// Runs `call` without the GVL. `call` gets an interrupt check to poll
    /// while it waits; once Ruby asks to interrupt the thread it answers
    /// true, and when `call` then gives up with `Error::Interrupted`, the
    /// pending Ruby exception (Timeout::Error, Interrupt, ...) is raised.
    /// An interrupt that raises nothing (a signal trap ran, the exception
    /// is deferred by `Thread.handle_interrupt`) resumes the call, which is
    /// why `call` may run more than once.
    pub(crate) fn blocking<R>(
        &self,
        ruby: &Ruby,
        mut call: impl FnMut(&T, &dyn Fn() -> bool) -> lockyard::Result<R>,
    ) -> Result<R, Error> {
        loop {
            match without_gvl(|interrupted| call(&self.0, interrupted))? {
                Err(lockyard::Error::Interrupted(_)) => ruby.thread_check_ints()?,
                outcome => return outcome.or_raise(ruby),
            }
        }
    }
}

/// A blocking core call that needs no object (creating a session, a
/// one-off read), run like [`NoGvl::blocking`].
pub(crate) fn blocking<R>(
    ruby: &Ruby,
    mut call: impl FnMut(&dyn Fn() -> bool) -> lockyard::Result<R>,
) -> Result<R, Error> {
    NoGvl(()).blocking(ruby, |_, interrupted| call(interrupted))
}

struct Call<'a, F, R> {
    work: Option<F>,
    outcome: Option<std::thread::Result<R>>,
    interrupted: &'a AtomicBool,
}

/// Runs `work` on this thread with the GVL released. A Ruby exception that
/// became due meanwhile comes back as `Err`; a panic in `work` is caught
/// without the GVL and resumed once it is held again.
fn without_gvl<F, R>(work: F) -> Result<R, Error>
where
    F: FnOnce(&dyn Fn() -> bool) -> R,
{
    let interrupted = AtomicBool::new(false);
    let mut call = Call {
        work: Some(work),
        outcome: None,
        interrupted: &interrupted,
    };
    let call_ptr = &mut call as *mut Call<'_, F, R> as *mut c_void;
    let flag_ptr = &interrupted as *const AtomicBool as *mut c_void;
    // Ruby checks for interrupts before and after `run`, and raises by
    // longjmp: `protect` catches that here, where no Rust value needs dropping.
    let raised = magnus::rb_sys::protect(|| unsafe {
        rb_thread_call_without_gvl(Some(run::<F, R>), call_ptr, Some(unblock), flag_ptr);
        Qnil as VALUE
    });
    match (call.outcome, raised) {
        (Some(Err(panic)), _) => panic::resume_unwind(panic),
        (_, Err(exception)) => Err(exception),
        (Some(Ok(value)), Ok(_)) => Ok(value),
        (None, Ok(_)) => unreachable!("Ruby skips a call without the GVL only to raise"),
    }
}

/// Runs without the GVL: must not touch any Ruby object.
unsafe extern "C" fn run<F, R>(data: *mut c_void) -> *mut c_void
where
    F: FnOnce(&dyn Fn() -> bool) -> R,
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

/// Ruby's unblocking function: called from another thread (or a signal
/// handler's deferred work) to make `run` return soon.
unsafe extern "C" fn unblock(data: *mut c_void) {
    let interrupted = &*(data as *const AtomicBool);
    interrupted.store(true, Ordering::Release);
}
