//! What `lockyard lock` and `lockyard elect` share: wait for the hold
//! (saying who is in the way), run COMMAND under it, give it back.

use std::ffi::OsString;
use std::time::Duration;

use lockyard::{Deadline, Error, Interrupt};

use crate::exit::{self, Failure};
use crate::output::say;
use crate::progress::Progress;
use crate::signals::Signals;
use crate::supervise::{self, Outcome, Watch};

/// A lock, slot or leadership that COMMAND runs under, on any backend.
pub trait Hold {
    /// Waits until `deadline`; [`Error::Timeout`] when it passed.
    fn acquire(&mut self, deadline: Deadline, interrupted: Interrupt<'_>) -> lockyard::Result<()>;
    /// Reads a flag and the clock; no I/O.
    fn healthy(&self) -> bool;
    fn fencing_token(&self) -> Option<u64>;
    fn release(&mut self) -> lockyard::Result<bool>;
}

/// How to wait and what to run.
pub struct Plan<'a> {
    pub name: &'a str,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    pub quiet: bool,
    pub command: &'a [OsString],
    pub signals: &'a Signals,
    /// Who is in the way, for the line shown while waiting.
    pub describe: Box<dyn Fn() -> Option<String> + Send>,
}

/// Acquires `hold`, runs the plan's COMMAND under it and releases it;
/// returns the exit status of `lockyard`.
pub fn run(hold: &mut dyn Hold, plan: Plan<'_>) -> Result<i32, Failure> {
    let signals = plan.signals;
    let progress = (!plan.quiet && plan.timeout != Some(Duration::ZERO))
        .then(|| Progress::start(plan.name.to_owned(), plan.describe));
    let acquired = hold.acquire(Deadline::after(plan.timeout), &|| signals.peek().is_some());
    if let Some(progress) = progress {
        progress.stop();
    }
    match acquired {
        Ok(()) => {}
        Err(Error::Timeout { .. }) => {
            return Err(Failure {
                status: exit::NOT_ACQUIRED,
                message: match plan.timeout {
                    Some(Duration::ZERO) => format!("{:?} is held by another", plan.name),
                    Some(t) => format!("{:?} was not acquired within {t:?}", plan.name),
                    None => format!("{:?} was not acquired", plan.name),
                },
            });
        }
        Err(Error::Interrupted(_)) => return Err(signals.ended_wait(plan.name)),
        Err(e) => return Err(e.into()),
    }
    let mut env = vec![("LOCKYARD_NAME", plan.name.to_owned())];
    if let Some(token) = hold.fencing_token() {
        env.push(("LOCKYARD_FENCING_TOKEN", token.to_string()));
    }
    let outcome = supervise::run(
        plan.command,
        &env,
        &Watch {
            what: format!("{:?}", plan.name),
            healthy: &|| hold.healthy(),
            grace: plan.grace,
            signals,
        },
    );
    // Released whatever COMMAND came to, even when it could not start.
    if let Err(e) = hold.release() {
        say!("lockyard: releasing {:?} failed: {e}", plan.name);
    }
    Ok(match outcome? {
        Outcome::Exited(status) => status,
        Outcome::Lost => exit::LOST,
    })
}
