//! The durations lockyard accepts, checked in one place for every option
//! and call, and the deadline arithmetic that cannot overflow.
//!
//! A lease-like period (ttl, lock_delay, refresh_interval, connect and
//! request timeouts, GCS backoff) is at most [`MAX_PERIOD`]: 30 days. Redis
//! keeps expiries in milliseconds and the scripts do float arithmetic on
//! them, so a longer period would first lose precision and then overflow
//! (a ttl of 2^64 ms became a 380 ms lease); nothing real needs a lease
//! longer than a month. A wait's timeout is at most [`MAX_WAIT`]: 100
//! years; `None` is how to wait forever. Anything longer is
//! [`Error::Config`], like Python's `threading.Lock.acquire(timeout=1e19)`
//! raising `OverflowError`: a value that large is a unit mistake more often
//! than a wish to wait, and the caller hears about it at once.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The longest ttl, lock_delay, refresh_interval, connect or request
/// timeout, or backoff: 30 days.
pub const MAX_PERIOD: Duration = Duration::from_secs(30 * 24 * 3600);

/// The longest timeout of a wait (`acquire`, `add`, `wait`, `campaign`,
/// …): 100 years. `None` waits forever.
pub const MAX_WAIT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Checks a period option: at most [`MAX_PERIOD`].
pub(crate) fn period(what: &str, length: Duration) -> Result<Duration> {
    if length > MAX_PERIOD {
        return Err(Error::config(format!(
            "{what} must be at most 30 days, got {length:?}"
        )));
    }
    Ok(length)
}

/// Checks a period option that must also be positive.
pub(crate) fn positive_period(what: &str, length: Duration) -> Result<Duration> {
    if length.is_zero() {
        return Err(Error::config(format!("{what} must be positive")));
    }
    period(what, length)
}

/// Checks the timeout of a wait: `None` (forever) or at most [`MAX_WAIT`].
/// Every wait checks its own; this is for a binding that takes a timeout
/// now and waits later (Python's `wg.slot(timeout)`), so the error comes
/// where the value was given.
///
/// # Errors
/// [`Error::Config`] for a timeout over 100 years.
pub fn wait(timeout: Option<Duration>) -> Result<Option<Duration>> {
    match timeout {
        Some(length) if length > MAX_WAIT => Err(Error::config(format!(
            "timeout must be at most 100 years (None waits forever), got {length:?}"
        ))),
        other => Ok(other),
    }
}

/// When a wait of `timeout` that starts at `start` gives up: None for
/// forever, and for a deadline past what `Instant` can hold (which a
/// checked timeout never reaches, but a panic here would cross into
/// Python or Ruby). For the core's waits and a binding's own deadline
/// (a Ruby wait resumed after an interrupt keeps it).
pub fn deadline(start: Instant, timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|length| start.checked_add(length))
}

/// A deadline `length` from now, saturating at about a year from now: for
/// internal waits bounded by another deadline (`at.min(...)`).
#[cfg(any(feature = "redis", feature = "gcs"))]
pub(crate) fn from_now(length: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(length)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_past_30_days_are_config_errors() {
        let days = |n: u64| Duration::from_secs(n * 24 * 3600);
        assert_eq!(period("ttl", days(30)).unwrap(), days(30));
        for bad in [days(31), Duration::from_millis(u64::MAX), Duration::MAX] {
            assert!(
                matches!(period("ttl", bad), Err(Error::Config(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            positive_period("connect_timeout", Duration::ZERO),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn waits_past_100_years_are_config_errors_and_none_is_forever() {
        assert_eq!(wait(None).unwrap(), None);
        assert_eq!(wait(Some(MAX_WAIT)).unwrap(), Some(MAX_WAIT));
        for bad in [
            Duration::from_secs_f64(1e19),
            Duration::from_millis(u64::MAX),
        ] {
            assert!(matches!(wait(Some(bad)), Err(Error::Config(_))), "{bad:?}");
        }
    }

    #[test]
    fn deadlines_never_overflow() {
        let now = Instant::now();
        assert_eq!(deadline(now, None), None);
        assert_eq!(deadline(now, Some(Duration::MAX)), None);
        assert!(deadline(now, Some(MAX_WAIT)).is_some_and(|at| at > now));
        #[cfg(any(feature = "redis", feature = "gcs"))]
        assert!(from_now(Duration::MAX) > now);
    }
}
