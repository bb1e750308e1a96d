//! What ends a caller's wait other than getting what it waits for: its
//! [`Deadline`] and its [`Interrupt`] check. Every wait of the core takes
//! both and answers a deadline that passed with [`Error::Timeout`], worded
//! here once, so a binding neither builds timeouts nor keeps deadlines of
//! its own.

use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::limits;

/// Asked while a wait blocks (at least every 50 ms, and whenever a signal
/// ends a read): true abandons the wait, which then leaves nothing held or
/// queued and returns [`Error::Interrupted`]. A binding answers it from its
/// interpreter (Python's pending signals, Ruby's thread interrupts); a Rust
/// caller that needs none passes [`NEVER`].
pub type Interrupt<'a> = &'a dyn Fn() -> bool;

/// The interrupt check of a caller that cannot be interrupted.
pub const NEVER: Interrupt<'static> = &|| false;

/// When a wait gives up, fixed when the wait is first asked for: a wait
/// resumed after an interrupt that did not end it (a Ruby signal trap, a
/// deferred `Thread#raise`) keeps its deadline instead of starting over.
///
/// A zero timeout means one attempt, never cut short by the deadline; the
/// first run of a wait makes its attempt even once its deadline passed. A
/// run [resumed](Deadline::resumed) after the deadline does not: it ends at
/// once, so an interrupt that keeps coming back (a signal trap) cannot make
/// a wait ask again and again on a network that does not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    timeout: Option<Duration>,
    at: Option<Instant>,
    resumed: bool,
}

impl Deadline {
    /// A wait of `timeout` starting now (None: forever).
    pub fn after(timeout: Option<Duration>) -> Self {
        Deadline {
            timeout,
            at: limits::deadline(Instant::now(), timeout),
            resumed: false,
        }
    }

    /// The same deadline, for the wait run again after an interrupt that
    /// did not end it (a Ruby signal trap, a deferred `Thread#raise`): once
    /// it has passed, the wait answers [`Error::Timeout`] without asking
    /// the server again.
    pub fn resumed(self) -> Self {
        Deadline {
            resumed: true,
            ..self
        }
    }

    /// A resumed wait whose deadline passed: over before it asks anything.
    pub(crate) fn spent(&self) -> bool {
        self.resumed && self.left() == Some(Duration::ZERO)
    }

    /// No deadline: the wait ends only when granted, interrupted or failed.
    pub fn never() -> Self {
        Deadline::after(None)
    }

    /// The timeout this deadline was made from (None: forever).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The instant the wait gives up; None for forever (or past what
    /// `Instant` can hold).
    pub fn at(&self) -> Option<Instant> {
        self.at
    }

    /// Time left until the deadline, zero once it passed; None for forever.
    pub fn left(&self) -> Option<Duration> {
        self.at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// A one-attempt wait (`timeout` zero, `try_acquire`).
    #[cfg(any(feature = "redis", feature = "etcd"))]
    pub(crate) fn is_one_attempt(&self) -> bool {
        self.timeout == Some(Duration::ZERO)
    }

    /// Checks the timeout: at most [`crate::MAX_WAIT`].
    ///
    /// # Errors
    /// [`Error::Config`] for a timeout over 100 years.
    pub fn check(&self) -> Result<Self> {
        limits::wait(self.timeout)?;
        Ok(*self)
    }

    /// The error a wait for `what` ends with when this deadline passed.
    pub(crate) fn ran_out(&self, what: impl Into<String>) -> Error {
        Error::Timeout {
            what: what.into(),
            waited: self.timeout.unwrap_or_default(),
        }
    }
}

impl From<Option<Duration>> for Deadline {
    fn from(timeout: Option<Duration>) -> Self {
        Deadline::after(timeout)
    }
}

impl From<Duration> for Deadline {
    fn from(timeout: Duration) -> Self {
        Deadline::after(Some(timeout))
    }
}

/// Locks `mutex` for a wait until `deadline`: for an object a binding
/// shares between threads (an election's observer), whose waits must stay
/// interruptible, and keep their deadline, while another thread's wait
/// holds it. Ok(None) once the deadline passed first; [`Error::Interrupted`]
/// (naming `what`) once `interrupted` answers true, asked every 10 ms.
///
/// # Errors
/// [`Error::Interrupted`].
pub fn lock_within<'m, T>(
    mutex: &'m Mutex<T>,
    deadline: Deadline,
    interrupted: Interrupt<'_>,
    what: &str,
) -> Result<Option<MutexGuard<'m, T>>> {
    const PAUSE: Duration = Duration::from_millis(10);
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Ok(Some(guard)),
            Err(TryLockError::Poisoned(poisoned)) => return Ok(Some(poisoned.into_inner())),
            Err(TryLockError::WouldBlock) => {}
        }
        if interrupted() {
            return Err(Error::Interrupted(what.to_owned()));
        }
        if deadline.left() == Some(Duration::ZERO) {
            return Ok(None);
        }
        std::thread::sleep(PAUSE);
    }
}

/// For the faces that answer a wait with true or false (`acquire() ->
/// bool`, like `threading.Lock`; `WaitGroup::wait`): a wait that timed out
/// is `false`; every other failure stays an error.
pub trait InTime {
    fn in_time(self) -> Result<bool>;
}

impl InTime for Result<()> {
    fn in_time(self) -> Result<bool> {
        match self {
            Ok(()) => Ok(true),
            Err(Error::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_fixed_when_made() {
        let deadline = Deadline::after(Some(Duration::from_millis(30)));
        let first = deadline.left().unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(deadline.left(), Some(Duration::ZERO));
        assert!(first <= Duration::from_millis(30));
        assert_eq!(Deadline::never().left(), None);
    }

    #[test]
    #[cfg(feature = "redis")]
    fn only_a_zero_timeout_is_one_attempt() {
        assert!(Deadline::after(Some(Duration::ZERO)).is_one_attempt());
        assert!(!Deadline::after(Some(Duration::from_millis(1))).is_one_attempt());
        assert!(!Deadline::never().is_one_attempt());
    }

    #[test]
    fn only_a_resumed_wait_past_its_deadline_is_spent() {
        let once = Deadline::after(Some(Duration::ZERO));
        assert!(!once.spent(), "the first run makes its one attempt");
        assert!(once.resumed().spent());
        let later = Deadline::after(Some(Duration::from_secs(60)));
        assert!(!later.resumed().spent(), "time is left");
        assert!(!Deadline::never().resumed().spent());
    }

    #[test]
    fn timeouts_over_a_century_are_refused() {
        let century = Duration::from_secs(101 * 365 * 24 * 3600);
        assert!(matches!(
            Deadline::after(Some(century)).check(),
            Err(Error::Config(_))
        ));
        assert!(Deadline::after(Some(Duration::from_secs(1)))
            .check()
            .is_ok());
    }

    #[test]
    fn a_timeout_reads_as_false_and_other_errors_stay() {
        let deadline = Deadline::after(Some(Duration::from_secs(2)));
        let timed_out = Err(deadline.ran_out("lock \"deploy\""));
        assert_eq!(
            timed_out.as_ref().unwrap_err().to_string(),
            "timed out after 2s waiting for lock \"deploy\""
        );
        assert!(!timed_out.in_time().unwrap());
        assert!(Ok(()).in_time().unwrap());
        assert!(Err(Error::Interrupted("x".into())).in_time().is_err());
    }
}
