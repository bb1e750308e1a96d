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
}

/// A point in time on the boot clock: what every lease deadline, and the
/// send time of every request that sets one, is measured in. Unlike
/// `Instant`, the distance between two stamps includes any time the machine
/// spent suspended in between, a request in flight during a suspend
/// included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(Duration);

impl Stamp {
    pub(crate) fn now() -> Stamp {
        Stamp(BOOT.now())
    }

    /// How long until this point; zero once it has passed.
    #[cfg(any(feature = "redis", feature = "gcs"))]
    pub(crate) fn left(self) -> Duration {
        self.0.saturating_sub(BOOT.now())
    }

    #[cfg(any(feature = "redis", feature = "gcs"))]
    pub(crate) fn has_passed(self) -> bool {
        self.left().is_zero()
    }

    /// Seconds since the clock's origin, for arithmetic with a server's
    /// clock (GCS `Date` headers).
    #[cfg(feature = "gcs")]
    pub(crate) fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }

    #[cfg(feature = "gcs")]
    pub(crate) fn from_secs_f64(seconds: f64) -> Stamp {
        Stamp(Duration::try_from_secs_f64(seconds).unwrap_or_default())
    }

    pub(crate) fn nanos(self) -> u64 {
        self.0.as_nanos() as u64
    }

    #[cfg(any(feature = "gcs", feature = "quorum", feature = "etcd"))]
    pub(crate) fn from_nanos(nanos: u64) -> Stamp {
        Stamp(Duration::from_nanos(nanos))
    }
}

impl std::ops::Add<Duration> for Stamp {
    type Output = Stamp;

    /// Saturating: a deadline too far to hold is "never", not a panic.
    fn add(self, length: Duration) -> Stamp {
        Stamp(self.0.saturating_add(length))
    }
}

#[cfg(feature = "etcd")]
impl std::ops::Sub<Duration> for Stamp {
    type Output = Stamp;

    /// Saturating at the clock's start: a deadline that early has passed.
    fn sub(self, length: Duration) -> Stamp {
        Stamp(self.0.saturating_sub(length))
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

#[cfg(all(test, any(feature = "redis", feature = "gcs")))]
mod tests {
    use super::*;

    #[test]
    fn stamps_measure_time_left() {
        let ahead = Stamp::now() + Duration::from_secs(5);
        assert!(
            ahead.left() > Duration::from_millis(4900) && ahead.left() <= Duration::from_secs(5)
        );
        assert!(!ahead.has_passed());
        let now = Stamp::now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(now.has_passed() && now.left().is_zero());
    }
}
