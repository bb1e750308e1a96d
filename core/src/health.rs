//! Health of one held lock or slot. Reading it is two atomic loads and a
//! clock read, cheap enough for a hot loop; the background refresher and the
//! lease deadline are what change it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::clock::{Clock, Stamp, BOOT};

/// Shared between the holder and its refresher.
#[derive(Debug)]
pub(crate) struct Health {
    lost: AtomicBool,
    /// Until when the lease surely lasts, in ns on `clock` (boot time, which
    /// counts a suspended machine's sleep): the send time of the request
    /// that set it plus its length. A paused process, or one whose machine
    /// was suspended, sees this pass the moment it resumes.
    valid_until: AtomicU64,
    clock: &'static dyn Clock,
    reason: Mutex<Option<String>>,
    /// Why refreshes keep failing, while they do: unhealthy, yet not lost,
    /// since a refresh that lands later proves the hold was kept (GCS).
    failing: AtomicBool,
    failing_reason: Mutex<Option<String>>,
}

impl Health {
    pub(crate) fn new(valid_until: Stamp) -> Self {
        Self::on(&BOOT, valid_until)
    }

    fn on(clock: &'static dyn Clock, valid_until: Stamp) -> Self {
        Health {
            lost: AtomicBool::new(false),
            valid_until: AtomicU64::new(valid_until.nanos()),
            clock,
            reason: Mutex::new(None),
            failing: AtomicBool::new(false),
            failing_reason: Mutex::new(None),
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        !self.lost.load(Ordering::Acquire)
            && self.now() < self.valid_until.load(Ordering::Acquire)
            && !self.failing.load(Ordering::Acquire)
    }

    /// Marks the hold unhealthy while refreshes keep failing (`Some(why)`),
    /// or healthy again once one lands (`None`).
    #[cfg(feature = "gcs")]
    pub(crate) fn set_failing(&self, why: Option<String>) {
        let mut reason = self
            .failing_reason
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.failing.store(why.is_some(), Ordering::Release);
        *reason = why;
    }

    /// When the lease surely lasts until, as last extended.
    #[cfg(any(feature = "gcs", feature = "quorum"))]
    pub(crate) fn valid_until(&self) -> Stamp {
        Stamp::from_nanos(self.valid_until.load(Ordering::Acquire))
    }

    fn now(&self) -> u64 {
        self.clock.now().as_nanos() as u64
    }

    /// Why the hold is unhealthy, if it is.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.lost.load(Ordering::Acquire) {
            let reason = self.reason.lock().unwrap_or_else(|e| e.into_inner());
            return Some(reason.clone().unwrap_or_else(|| "lost".into()));
        }
        if self.failing.load(Ordering::Acquire) {
            let why = self
                .failing_reason
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            return Some(
                why.clone()
                    .unwrap_or_else(|| "its refreshes keep failing".into()),
            );
        }
        let left = self.valid_until.load(Ordering::Acquire) as i128 - self.now() as i128;
        (left <= 0).then(|| {
            format!(
                "its lease ran out {:?} ago without a successful refresh (paused or partitioned?)",
                Duration::from_nanos((-left) as u64)
            )
        })
    }

    /// Ok while healthy, else why not as [`crate::Error::LockUnhealthy`] of `what`.
    pub(crate) fn check(&self, what: &str) -> crate::Result<()> {
        match self.problem() {
            None => Ok(()),
            Some(reason) => Err(crate::Error::LockUnhealthy {
                what: what.to_owned(),
                reason,
            }),
        }
    }

    pub(crate) fn extend(&self, valid_until: Stamp) {
        self.valid_until
            .fetch_max(valid_until.nanos(), Ordering::AcqRel);
    }

    pub(crate) fn mark_lost(&self, reason: impl Into<String>) {
        let mut slot = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(reason.into());
        }
        self.lost.store(true, Ordering::Release);
    }
}

/// Logs that a hold had already been lost when its holder gave it back (a
/// release answered Ok(false)): whatever it protected may have been touched
/// meanwhile by `others`. Logged here, once, for every face that gives a
/// hold back: a binding's `release` or block end, a Rust guard's drop, a
/// background release. Passes `released` through.
pub(crate) fn warn_if_lost(
    released: crate::Result<bool>,
    what: impl FnOnce() -> String,
    given_back: &str,
    others: &str,
) -> crate::Result<bool> {
    if matches!(released, Ok(false)) {
        let what = what();
        log::warn!(
            "{what} had been lost before it was {given_back}: {others} may have run meanwhile"
        );
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_until_the_lease_runs_out() {
        let health = Health::new(Stamp::now() + Duration::from_millis(30));
        assert!(health.is_healthy());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!health.is_healthy());
        assert!(health.problem().unwrap().contains("lease ran out"));
    }

    #[cfg(feature = "gcs")]
    #[test]
    fn failing_refreshes_make_it_unhealthy_until_one_lands_but_lost_stays_lost() {
        let health = Health::new(Stamp::now() + Duration::from_secs(60));
        health.set_failing(Some("3 refreshes in a row failed".into()));
        assert!(!health.is_healthy());
        assert_eq!(health.problem().unwrap(), "3 refreshes in a row failed");
        health.set_failing(None);
        assert!(health.is_healthy());
        health.mark_lost("taken over");
        health.set_failing(None);
        assert_eq!(health.problem().unwrap(), "taken over");
    }

    #[test]
    fn a_lease_that_ran_out_while_the_machine_slept_is_unhealthy_on_resume() {
        static CLOCK: crate::clock::testing::Suspendable =
            crate::clock::testing::Suspendable::new();
        let health = Health::on(&CLOCK, Stamp::now() + Duration::from_secs(30));
        assert!(health.is_healthy());
        // Instant (CLOCK_MONOTONIC) stood still meanwhile; boot time did not.
        CLOCK.suspend_for(Duration::from_secs(31));
        assert!(!health.is_healthy());
        assert!(health.problem().unwrap().contains("lease ran out"));
    }

    #[test]
    fn lost_stays_lost_with_the_first_reason() {
        let health = Health::new(Stamp::now() + Duration::from_secs(60));
        health.mark_lost("taken over");
        health.mark_lost("second");
        health.extend(Stamp::now() + Duration::from_secs(120));
        assert!(!health.is_healthy());
        assert_eq!(health.problem().unwrap(), "taken over");
    }
}
