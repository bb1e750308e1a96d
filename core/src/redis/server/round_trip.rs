//! A server's smoothed round trip, which bounds how far a caller's
//! deadline may cut its requests short: a request always gets a few round
//! trips to be answered, so a slow link does not turn every short wait into
//! a timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::super::caller::LEAST_TIME;

/// Before the first connection to a server, how long connecting may take
/// however close the caller's deadline: its round trip is not known yet.
const FIRST_CONNECT_LEAST_TIME: Duration = Duration::from_secs(1);

/// The smoothed round trip of callers' requests, in µs; 0 before the
/// first connection.
#[derive(Default)]
pub(super) struct RoundTrip(AtomicU64);

impl RoundTrip {
    /// Folds one round trip into the smoothed one (as TCP's SRTT, 1/8).
    pub(super) fn took(&self, round_trip: Duration) {
        let sample = u64::try_from(round_trip.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |smoothed| {
                Some(match smoothed {
                    0 => sample,
                    _ => smoothed - smoothed / 8 + sample / 8,
                })
            });
    }

    /// The time a first connection took, as the first sample: until a
    /// request was answered, it is all that is known.
    pub(super) fn took_first(&self, connecting: Duration) {
        if self.0.load(Ordering::Relaxed) == 0 {
            self.took(connecting);
        }
    }

    /// The least time a caller's deadline leaves a request: three round
    /// trips, and at least [`LEAST_TIME`].
    pub(super) fn least_time(&self) -> Duration {
        match self.0.load(Ordering::Relaxed) {
            0 => FIRST_CONNECT_LEAST_TIME,
            us => LEAST_TIME.max(Duration::from_micros(us).saturating_mul(3)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_gets_three_round_trips_and_at_least_the_least_time() {
        let round_trip = RoundTrip::default();
        assert_eq!(round_trip.least_time(), FIRST_CONNECT_LEAST_TIME);
        round_trip.took_first(Duration::from_millis(40));
        assert_eq!(round_trip.least_time(), Duration::from_millis(120));
        round_trip.took_first(Duration::from_secs(5));
        assert_eq!(
            round_trip.least_time(),
            Duration::from_millis(120),
            "only the first"
        );
        for _ in 0..100 {
            round_trip.took(Duration::from_micros(100));
        }
        assert_eq!(round_trip.least_time(), LEAST_TIME);
    }
}
