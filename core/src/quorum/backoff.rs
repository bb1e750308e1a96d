//! Waits between attempts: equal jitter, so contenders that collided
//! spread apart, capped low for a busy lock and higher for nodes that do
//! not answer.

use std::time::Duration;

/// Longest wait between retries of a denied attempt.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_millis(100);
/// Longest wait between retries while too few nodes are reachable, and
/// between retries of an unlock a node did not answer: long enough not to
/// hammer a node that is coming back, short enough to notice it soon.
pub(crate) const UNREACHABLE_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Equal jitter: half of an exponentially growing step, plus a random part
/// of the other half, so contenders that collided spread apart.
pub(crate) fn backoff(attempt: u32, max: Duration) -> Duration {
    let step = (Duration::from_millis(2) * 2u32.pow(attempt.min(10))).min(max);
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).expect("the OS random source failed");
    let fraction = f64::from(u32::from_le_bytes(random)) / f64::from(u32::MAX);
    step / 2 + step.mul_f64(fraction / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_stays_bounded() {
        for attempt in 0..20 {
            let wait = backoff(attempt, BACKOFF_MAX);
            assert!(
                wait >= Duration::from_millis(1) && wait <= BACKOFF_MAX,
                "{wait:?}"
            );
        }
        assert!(backoff(0, BACKOFF_MAX) <= Duration::from_millis(2));
        assert!(backoff(10, BACKOFF_MAX) >= BACKOFF_MAX / 2);
        assert!(backoff(20, UNREACHABLE_BACKOFF_MAX) >= UNREACHABLE_BACKOFF_MAX / 2);
    }
}
