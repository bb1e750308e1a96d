//! What bounds a request made on a caller's thread besides the server's
//! answer: the caller's deadline and interrupt. A network that goes silent
//! (sockets open, no bytes) would otherwise hold a caller for the whole
//! command timeout: `acquire(timeout=1)` must end near 1 s, and Ctrl-C,
//! `Thread#raise` or `Timeout.timeout` must end it at once.
//!
//! A blocking read cannot be resumed once it gave up (redis-rs then skips
//! the late reply), so an interrupt cannot be polled during the read. It
//! ends the read instead: the signal that carries it (SIGINT, or the one a
//! binding sends to the blocked thread) fails the read with EINTR, and the
//! request then asks `interrupted` whether to give up.

use std::time::{Duration, Instant};

/// However close the caller's deadline, a request gets this long to be
/// answered: a wait always makes its first attempt, and a healthy server
/// answers in well under a millisecond.
const LEAST_TIME: Duration = Duration::from_millis(50);

/// The caller a request runs for.
#[derive(Clone, Copy)]
pub(crate) struct Caller<'a> {
    give_up_at: Option<Instant>,
    interrupted: &'a dyn Fn() -> bool,
}

impl<'a> Caller<'a> {
    /// A caller who gives up at `give_up_at` (None: never) or when
    /// `interrupted` answers true.
    pub(crate) fn new(give_up_at: Option<Instant>, interrupted: &'a dyn Fn() -> bool) -> Self {
        Caller {
            give_up_at,
            interrupted,
        }
    }

    /// A caller with no deadline who cannot be interrupted: the request
    /// runs to its own timeout (a release, a status read).
    pub(crate) fn patient() -> Caller<'static> {
        Caller {
            give_up_at: None,
            interrupted: &|| false,
        }
    }

    pub(crate) fn give_up_at(&self) -> Option<Instant> {
        self.give_up_at
    }

    /// How long to wait for an answer the request itself allows `limit`
    /// for: cut to what is left of the caller's wait.
    pub(crate) fn read_timeout(&self, limit: Duration) -> Duration {
        match self.give_up_at {
            Some(at) => limit.min(at.saturating_duration_since(Instant::now()).max(LEAST_TIME)),
            None => limit,
        }
    }

    /// The caller's deadline has passed: a request that failed now failed
    /// because it was cut to the deadline, or would be sent too late.
    pub(crate) fn is_late(&self) -> bool {
        self.give_up_at.is_some_and(|at| Instant::now() >= at)
    }

    pub(crate) fn interrupted(&self) -> bool {
        (self.interrupted)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_waits_no_longer_than_the_caller_but_gets_its_least_time() {
        let never = || false;
        let soon = Caller::new(Some(Instant::now() + Duration::from_secs(1)), &never);
        let cut = soon.read_timeout(Duration::from_secs(10));
        assert!(cut <= Duration::from_secs(1) && cut > Duration::from_millis(900));
        assert_eq!(
            soon.read_timeout(Duration::from_millis(5)),
            Duration::from_millis(5)
        );

        let past = Caller::new(Some(Instant::now()), &never);
        assert_eq!(past.read_timeout(Duration::from_secs(10)), LEAST_TIME);
        assert!(past.is_late() && !soon.is_late());

        let patient = Caller::patient();
        assert_eq!(
            patient.read_timeout(Duration::from_secs(10)),
            Duration::from_secs(10)
        );
        assert!(!patient.is_late() && !patient.interrupted());
    }
}
