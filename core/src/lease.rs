//! The lease every primitive grants (Redis, quorum, GCS): how long a grant
//! lives without refresh, validated once; the options and setters every
//! builder of a leased primitive shares; the keep-alive policy every
//! refresher follows; the defaults of those options; and the check of
//! durations the bindings pass as seconds.

use std::time::Duration;

use crate::error::{Error, Result};
#[cfg(any(feature = "redis", feature = "gcs"))]
use crate::limits;

/// How long a grant lives without refresh, and how it is kept alive.
#[cfg(any(feature = "redis", feature = "gcs"))]
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    pub(crate) ttl: Duration,
    pub(crate) refresh_every: Duration,
    pub(crate) max_refresh_fails: u32,
}

#[cfg(any(feature = "redis", feature = "gcs"))]
impl Lease {
    /// `ttl` is from 1 ms to [`limits::MAX_PERIOD`]; `refresh_interval`
    /// defaults to ttl / (max_refresh_fails · 3), so that
    /// `max_refresh_fails` consecutive failures still leave a third of the
    /// lease to notice them.
    pub(crate) fn new(
        ttl: Duration,
        refresh_interval: Option<Duration>,
        max_refresh_fails: u32,
    ) -> Result<Lease> {
        if ttl < Duration::from_millis(1) {
            return Err(Error::config(format!(
                "ttl must be at least 1 ms, got {ttl:?}"
            )));
        }
        limits::period("ttl", ttl)?;
        if max_refresh_fails == 0 {
            return Err(Error::config("max_refresh_fails must be at least 1"));
        }
        let bound = ttl / max_refresh_fails;
        let refresh_every = match refresh_interval {
            None => bound / 3,
            Some(every) if every.is_zero() => {
                return Err(Error::config("refresh_interval must be positive"));
            }
            Some(every) if every >= bound => {
                return Err(Error::config(format!(
                    "refresh_interval ({every:?}) must be less than ttl / max_refresh_fails ({bound:?}), or the lease can run out between refreshes"
                )));
            }
            Some(every) => every,
        };
        Ok(Lease {
            ttl,
            refresh_every: refresh_every.max(Duration::from_millis(1)),
            max_refresh_fails,
        })
    }

    /// How long one background call (a refresh, a renewal) may take: about
    /// ttl/10, so that a connection gone silent, where a new one would
    /// answer at once, costs a retry and not the lease. At least 100 ms,
    /// and never more than the command timeout.
    #[cfg(feature = "redis")]
    pub(crate) fn background_timeout(&self) -> Duration {
        (self.ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(10))
    }

    #[cfg(feature = "redis")]
    pub(crate) fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis() as u64
    }
}

/// The keep-alive policy every refresher follows (Redis, quorum, GCS):
/// failures count only in a row, and `max_refresh_fails` of them exhaust
/// the hold's tries. What that means is the backend's: lost for Redis and
/// quorum, unhealthy until a refresh lands again for GCS. Failures that
/// prove the grant gone (taken over, deleted, no quorum left) are not
/// counted here: they lose the hold at once.
#[cfg(any(feature = "redis", feature = "gcs"))]
#[derive(Clone, Debug)]
pub(crate) struct KeepAlive {
    refresh_every: Duration,
    max_refresh_fails: u32,
    failures: u32,
}

/// What a failed refresh means for the hold.
#[cfg(any(feature = "redis", feature = "gcs"))]
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Fewer than `max_refresh_fails` in a row: try again.
    TryAgain,
    /// `max_refresh_fails` (or more) in a row; the reason says so.
    Exhausted(String),
}

#[cfg(any(feature = "redis", feature = "gcs"))]
impl KeepAlive {
    pub(crate) fn new(lease: &Lease) -> KeepAlive {
        KeepAlive {
            refresh_every: lease.refresh_every,
            max_refresh_fails: lease.max_refresh_fails,
            failures: 0,
        }
    }

    /// A refresh landed: the count starts over.
    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// A refresh failed with `error`.
    pub(crate) fn failed(&mut self, error: &dyn std::fmt::Display) -> Verdict {
        self.failed_as("failed", error)
    }

    /// A refresh failed as `how` ("reached fewer than 2 nodes"), the last
    /// error being `error`.
    pub(crate) fn failed_as(&mut self, how: &str, error: &dyn std::fmt::Display) -> Verdict {
        self.failures += 1;
        if self.failures < self.max_refresh_fails {
            return Verdict::TryAgain;
        }
        Verdict::Exhausted(format!(
            "{} refreshes in a row {how}, the last with: {error}",
            self.failures
        ))
    }

    /// Failures in a row so far.
    #[cfg(feature = "gcs")]
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// `failures/max_refresh_fails`, for the log.
    #[cfg(feature = "redis")]
    pub(crate) fn tally(&self) -> String {
        format!("{}/{}", self.failures, self.max_refresh_fails)
    }

    /// When the next try is due: a refresh period after a success; after
    /// a failure the same, or, where failures are retried sooner
    /// (`retry_first`), that doubling with each failure in a row but never
    /// later than the next regular refresh.
    pub(crate) fn next_try(&self, retry_first: Option<Duration>) -> Duration {
        let Some(first) = retry_first.filter(|_| self.failures > 0) else {
            return self.refresh_every;
        };
        (first * 2u32.saturating_pow(self.failures - 1)).min(self.refresh_every)
    }
}

/// How long a grant of a Redis lock, wait group or quorum lock outlives its
/// holder's last refresh when no ttl is set (the GCS lock's is
/// `gcs::LockBuilder::DEFAULT_TTL`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Consecutive transient refresh failures that exhaust a hold when
/// `max_refresh_fails` is not set, for every leased primitive.
pub const DEFAULT_MAX_REFRESH_FAILS: u32 = 3;

/// How long connecting to a Redis server may take before it counts as
/// unreachable when `connect_timeout` is not set (and for the calls that
/// take no options: `holder`, `inspect`, `force_release`, `Election::new`);
/// for etcd, how long one request to a member may take.
#[cfg(any(feature = "redis", feature = "etcd"))]
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The lease options a builder carries, with the defaults every leased
/// primitive shares; the builder's setters fill them in (see
/// [`lease_setters!`]) and its `build` turns them into a [`Lease`].
#[cfg(any(feature = "redis", feature = "gcs"))]
#[derive(Clone, Debug)]
pub(crate) struct LeaseOptions {
    /// None: the primitive's own default (see [`LeaseOptions::lease`]);
    /// kept apart so that a Redis lock under a session can refuse one.
    pub(crate) ttl: Option<Duration>,
    pub(crate) refresh_interval: Option<Duration>,
    pub(crate) max_refresh_fails: u32,
    /// Only the Redis builders connect to a server of their own.
    #[cfg(feature = "redis")]
    pub(crate) connect_timeout: Duration,
}

#[cfg(any(feature = "redis", feature = "gcs"))]
impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            ttl: None,
            refresh_interval: None,
            max_refresh_fails: DEFAULT_MAX_REFRESH_FAILS,
            #[cfg(feature = "redis")]
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

#[cfg(any(feature = "redis", feature = "gcs"))]
impl LeaseOptions {
    /// The lease these options describe, `default_ttl` when none was set.
    pub(crate) fn lease(&self, default_ttl: Duration) -> Result<Lease> {
        Lease::new(
            self.ttl.unwrap_or(default_ttl),
            self.refresh_interval,
            self.max_refresh_fails,
        )
    }

    /// The connect timeout, checked: positive, at most
    /// [`limits::MAX_PERIOD`].
    #[cfg(feature = "redis")]
    pub(crate) fn connect_timeout(&self) -> Result<Duration> {
        limits::positive_period("connect_timeout", self.connect_timeout)?;
        Ok(self.connect_timeout)
    }
}

/// The lease setters of a builder whose options sit in a [`LeaseOptions`]
/// field named `lease`, in an `impl` block of their own, each with the doc
/// comment the builder gives it (defaults and wording differ by
/// primitive). With `connect_timeout` (the Redis builders) it implements
/// [`LeaseBuilder`] by those setters too; without it (the GCS lock
/// connects over HTTP with a request timeout instead), only the three.
#[cfg(any(feature = "redis", feature = "gcs"))]
macro_rules! lease_setters {
    (
        $builder:ident;
        $(#[$ttl_doc:meta])* ttl;
        $(#[$every_doc:meta])* refresh_interval;
        $(#[$fails_doc:meta])* max_refresh_fails;
        // An identifier, not the word itself, so that the `LeaseBuilder`
        // impl below can be written only when it is given; any other name
        // fails that impl.
        $($(#[$connect_doc:meta])* $connect_timeout:ident;)?
    ) => {
        impl $builder {
            $(#[$ttl_doc])*
            pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
                self.lease.ttl = Some(ttl);
                self
            }
            $(#[$every_doc])*
            pub fn refresh_interval(mut self, every: std::time::Duration) -> Self {
                self.lease.refresh_interval = Some(every);
                self
            }
            $(#[$fails_doc])*
            pub fn max_refresh_fails(mut self, count: u32) -> Self {
                self.lease.max_refresh_fails = count;
                self
            }
            $(
                $(#[$connect_doc])*
                pub fn $connect_timeout(mut self, timeout: std::time::Duration) -> Self {
                    self.lease.connect_timeout = timeout;
                    self
                }
            )?
        }
        $(
            impl $crate::lease::LeaseBuilder for $builder {
                fn ttl(self, ttl: std::time::Duration) -> Self {
                    $builder::ttl(self, ttl)
                }
                fn refresh_interval(self, every: std::time::Duration) -> Self {
                    $builder::refresh_interval(self, every)
                }
                fn max_refresh_fails(self, count: u32) -> Self {
                    $builder::max_refresh_fails(self, count)
                }
                fn $connect_timeout(self, timeout: std::time::Duration) -> Self {
                    $builder::$connect_timeout(self, timeout)
                }
            }
        )?
    };
}
#[cfg(any(feature = "redis", feature = "gcs"))]
pub(crate) use lease_setters;

/// The lease setters every Redis builder has (Lock, WaitGroup, the quorum
/// RwLock), for code that configures any of them the same way (the
/// bindings' constructors).
#[cfg(feature = "redis")]
pub trait LeaseBuilder: Sized {
    /// How long a grant outlives its holder's last refresh.
    fn ttl(self, ttl: Duration) -> Self;
    /// Refresh period; must be below ttl / max_refresh_fails.
    fn refresh_interval(self, every: Duration) -> Self;
    /// Consecutive transient refresh failures that make a hold unhealthy.
    fn max_refresh_fails(self, count: u32) -> Self;
    /// How long connecting may take before the server counts as unreachable.
    fn connect_timeout(self, timeout: Duration) -> Self;
}

/// Checks a user-given duration in seconds (bindings take floats).
#[cfg(any(feature = "redis", feature = "etcd"))]
pub fn seconds(what: &str, value: f64) -> Result<Duration> {
    if !value.is_finite() || value < 0.0 {
        return Err(Error::config(format!(
            "{what} must be a finite number of seconds >= 0, got {value}"
        )));
    }
    Duration::try_from_secs_f64(value).map_err(|e| Error::config(format!("{what}: {e}")))
}

#[cfg(all(test, any(feature = "redis", feature = "gcs")))]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn default_refresh_leaves_room_for_every_allowed_failure() {
        let lease = Lease::new(S(30), None, 3).unwrap();
        assert_eq!(lease.refresh_every, Duration::from_secs_f64(30.0 / 9.0));
    }

    #[test]
    fn only_max_refresh_fails_in_a_row_exhaust_a_hold() {
        let lease = Lease::new(S(30), None, 3).unwrap();
        let mut keep = KeepAlive::new(&lease);
        assert_eq!(keep.failed(&"timeout"), Verdict::TryAgain);
        keep.succeeded();
        assert_eq!(keep.failed(&"timeout"), Verdict::TryAgain);
        assert_eq!(keep.failed(&"timeout"), Verdict::TryAgain);
        #[cfg(feature = "redis")]
        assert_eq!(keep.tally(), "2/3");
        let first = Some(Duration::from_millis(100));
        assert_eq!(keep.next_try(first), Duration::from_millis(200));
        assert_eq!(keep.next_try(None), lease.refresh_every);
        assert_eq!(
            keep.failed(&"timeout"),
            Verdict::Exhausted("3 refreshes in a row failed, the last with: timeout".into())
        );
    }

    #[test]
    fn options_take_the_primitive_default_ttl_unless_one_is_set() {
        let options = LeaseOptions::default();
        assert_eq!(options.lease(S(300)).unwrap().ttl, S(300));
        let options = LeaseOptions {
            ttl: Some(S(7)),
            ..options
        };
        assert_eq!(options.lease(S(300)).unwrap().ttl, S(7));
        assert_eq!(options.lease(S(300)).unwrap().max_refresh_fails, 3);
    }

    #[cfg(feature = "redis")]
    #[test]
    fn seconds_rejects_what_is_not_a_duration() {
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(seconds("ttl", bad).is_err());
        }
        assert_eq!(seconds("ttl", 1.5).unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn bad_leases_are_config_errors() {
        let cases = [
            (Duration::ZERO, None, 3),
            (S(30), None, 0),
            (S(30), Some(S(10)), 3),
            (S(30), Some(Duration::ZERO), 3),
            (S(31 * 24 * 3600), None, 3),
            (Duration::from_millis(u64::MAX), None, 3),
            (Duration::from_secs_f64(1e19), None, 3),
        ];
        for (ttl, every, fails) in cases {
            let err = Lease::new(ttl, every, fails).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{ttl:?} {every:?} {fails}");
        }
    }
}
