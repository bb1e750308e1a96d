//! SIGINT, SIGTERM and SIGHUP sent to `lockyard`: noted here, then
//! either end a wait for the lock or are passed on to COMMAND, whose
//! lock is released only once it exits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::exit::Failure;

pub const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The last signal received and not yet handled (0: none).
#[derive(Clone)]
pub struct Signals(Arc<AtomicUsize>);

impl Signals {
    /// Replaces the default action (die at once, leaving the lock to run
    /// out and COMMAND orphaned) by noting the signal. A signal ignored
    /// when lockyard started (`nohup`, a script's background job) stays
    /// ignored, for lockyard and for COMMAND.
    ///
    /// Under the wheel's or the gem's entry point the interpreter has
    /// handlers of its own, which signal-hook would call after ours: they
    /// would raise KeyboardInterrupt or Interrupt once lockyard returns,
    /// replacing COMMAND's exit status by a traceback. They go first.
    pub fn install() -> Result<Signals, Failure> {
        let pending = Arc::new(AtomicUsize::new(0));
        for signal in FORWARDED {
            if ignored(signal) {
                continue;
            }
            // SAFETY: restoring the default action of a signal before
            // installing our own handler for it.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
            signal_hook::flag::register_usize(signal, pending.clone(), signal as usize).map_err(
                |e| Failure {
                    status: crate::exit::UNAVAILABLE,
                    message: format!("cannot install a signal handler: {e}"),
                },
            )?;
        }
        Ok(Signals(pending))
    }

    /// The pending signal, if any, left pending.
    pub fn peek(&self) -> Option<i32> {
        Some(self.0.load(Ordering::SeqCst) as i32).filter(|&s| s != 0)
    }

    /// The pending signal, if any, now handled.
    pub fn take(&self) -> Option<i32> {
        Some(self.0.swap(0, Ordering::SeqCst) as i32).filter(|&s| s != 0)
    }

    /// How a wait cut short by a signal ends: as a shell reports a
    /// command killed by it.
    pub fn ended_wait(&self, name: &str) -> Failure {
        let signal = self.take().unwrap_or(libc::SIGINT);
        Failure {
            status: 128 + signal,
            message: format!("interrupted by signal {signal} while waiting for {name:?}"),
        }
    }
}

/// Whether `signal` is ignored in this process.
fn ignored(signal: i32) -> bool {
    // SAFETY: sigaction with no new action only reads the current one
    // into a zeroed struct of the right type.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}
