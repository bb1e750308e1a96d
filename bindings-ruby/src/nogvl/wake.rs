//! The wake signal: how an interrupt reaches a thread blocked in a socket
//! read. Ruby's own unblocking function for I/O does the same with
//! SIGVTALRM, which ours cannot use: a call blocks SIGVTALRM (Ruby's timer
//! sends it to whichever thread takes it, and the EINTR would fail a
//! release). So lockyard takes a real-time signal nobody else uses, with a
//! handler that does nothing but return — without SA_RESTART, so the read
//! fails with EINTR. It is taken only if no handler is installed for it;
//! otherwise interrupts fall back to the core's polling (every wait slice,
//! and a silent read's timeout).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

/// The signal, or 0 if it was not free.
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static INSTALL: Once = Once::new();

/// Takes the wake signal, once per process, if it is free.
pub(super) fn install() {
    INSTALL.call_once(|| {
        // Counted from the top: glibc and threading libraries use the
        // lowest real-time signals.
        let signal = libc::SIGRTMAX() - 3;
        // SAFETY: sigaction with a zeroed, then filled, struct; the handler
        // is async-signal-safe (it does nothing).
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0
                || current.sa_sigaction != libc::SIG_DFL
            {
                return;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = do_nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = 0;
            if libc::sigaction(signal, &action, std::ptr::null_mut()) == 0 {
                SIGNAL.store(signal, Ordering::Release);
            }
        }
    });
}

extern "C" fn do_nothing(_signal: libc::c_int) {}

/// The wake signal, if taken.
pub(super) fn signal() -> Option<libc::c_int> {
    Some(SIGNAL.load(Ordering::Acquire)).filter(|&signal| signal != 0)
}

/// Sends the wake signal to `thread`; async-signal-safe.
pub(super) fn send(thread: libc::pthread_t) {
    if let Some(signal) = signal() {
        // SAFETY: `thread` is alive: it is inside the call whose unblocking
        // function runs, and Ruby calls that only while the call lasts.
        unsafe {
            libc::pthread_kill(thread, signal);
        }
    }
}
