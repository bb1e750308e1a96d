//! The clock every lease deadline is measured on. Boot time (Linux's
//! CLOCK_BOOTTIME) counts the time the machine spent suspended, which the
//! monotonic clock behind `Instant` does not: after a laptop sleep or a
//! suspended VM, a lease that ran out meanwhile must read as run out the
//! moment the process resumes, not at its next refresh. Where the platform
//! has no boot-time clock, the monotonic clock stands in.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// A source of the current time, in nanoseconds from an arbitrary origin.
pub(crate) trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Duration;

    /// `at` (taken with `Instant`) on this clock: as far from now as it is
    /// from `Instant::now()`.
    fn on_this_clock(&self, at: Instant) -> Duration {
        let (now, instant_now) = (self.now(), Instant::now());
        match at.checked_duration_since(instant_now) {
            Some(ahead) => now + ahead,
            None => now.saturating_sub(instant_now - at),
        }
    }

    /// The `Instant` that is as far from now as `at` is on this clock.
    #[cfg(feature = "gcs")]
    fn to_instant(&self, at: Duration) -> Instant {
        let (now, instant_now) = (self.now(), Instant::now());
        match at.checked_sub(now) {
            Some(ahead) => instant_now + ahead,
            None => instant_now.checked_sub(now - at).unwrap_or(instant_now),
        }
    }
}

/// Boot time where the platform has it, monotonic time otherwise.
#[derive(Debug)]
pub(crate) struct BootClock;

pub(crate) static BOOT: BootClock = BootClock;

static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

impl Clock for BootClock {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn now(&self) -> Duration {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid timespec to write to; CLOCK_BOOTTIME
        // exists on every Linux since 2.6.39.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 {
            return ORIGIN.elapsed();
        }
        Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn now(&self) -> Duration {
        ORIGIN.elapsed()
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Boot time plus a jump the test sets: a machine that was suspended
    /// for that long, as the process sees it on resuming.
    #[derive(Debug)]
    pub(crate) struct Suspendable {
        slept: AtomicU64,
    }

    impl Suspendable {
        pub(crate) const fn new() -> Self {
            Suspendable {
                slept: AtomicU64::new(0),
            }
        }

        pub(crate) fn suspend_for(&self, slept: Duration) {
            self.slept
                .fetch_add(slept.as_nanos() as u64, Ordering::SeqCst);
        }
    }

    impl Clock for Suspendable {
        fn now(&self) -> Duration {
            BOOT.now() + Duration::from_nanos(self.slept.load(Ordering::SeqCst))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_map_to_the_same_distance_from_now() {
        let ahead = BOOT.on_this_clock(Instant::now() + Duration::from_secs(5));
        let left = ahead.saturating_sub(BOOT.now());
        assert!(left > Duration::from_millis(4900) && left <= Duration::from_secs(5));
        let behind = BOOT.on_this_clock(Instant::now() - Duration::from_secs(1));
        assert!(behind < BOOT.now());
    }
}
