//! The lease setters every Redis builder shares, and duration checks for
//! the bindings. The lease itself is `crate::lease::Lease`.

use std::time::Duration;

use crate::error::{Error, Result};

/// The lease setters every Redis builder has (Lock, WaitGroup, the quorum
/// RwLock), for code that configures any
/// of them the same way (the bindings' constructors).
pub trait LeaseBuilder: Sized {
    /// How long a grant outlives its holder's last refresh.
    fn ttl(self, ttl: Duration) -> Self;
    /// Refresh period; must be below ttl / max_refresh_fails.
    fn refresh_interval(self, every: Duration) -> Self;
    /// Consecutive transient refresh failures that make a hold unhealthy.
    fn max_refresh_fails(self, count: u32) -> Self;
    /// How long connecting may take before Redis counts as unreachable.
    fn connect_timeout(self, timeout: Duration) -> Self;
}

macro_rules! lease_builder {
    ($builder:ty) => {
        impl LeaseBuilder for $builder {
            fn ttl(self, ttl: Duration) -> Self {
                <$builder>::ttl(self, ttl)
            }
            fn refresh_interval(self, every: Duration) -> Self {
                <$builder>::refresh_interval(self, every)
            }
            fn max_refresh_fails(self, count: u32) -> Self {
                <$builder>::max_refresh_fails(self, count)
            }
            fn connect_timeout(self, timeout: Duration) -> Self {
                <$builder>::connect_timeout(self, timeout)
            }
        }
    };
}

lease_builder!(super::LockBuilder);
lease_builder!(super::WaitGroupBuilder);
#[cfg(feature = "quorum")]
lease_builder!(crate::quorum::RwLockBuilder);

/// Checks a user-given duration in seconds (bindings take floats).
pub fn seconds(what: &str, value: f64) -> Result<Duration> {
    if !value.is_finite() || value < 0.0 {
        return Err(Error::config(format!(
            "{what} must be a finite number of seconds >= 0, got {value}"
        )));
    }
    Duration::try_from_secs_f64(value).map_err(|e| Error::config(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_rejects_what_is_not_a_duration() {
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(seconds("ttl", bad).is_err());
        }
        assert_eq!(seconds("ttl", 1.5).unwrap(), Duration::from_millis(1500));
    }
}
