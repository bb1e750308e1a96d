//! How a waiter spaces its looks at a held lock: "decorrelated jitter"
//! (each wait drawn between `min` and `multiplier` times the last one,
//! capped at `max`), the gem's choice for the shortest completion time.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limits;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    pub(crate) min: Duration,
    pub(crate) max: Duration,
    pub(crate) multiplier: f64,
}

impl Backoff {
    /// The gem's rules: min ≥ 0, max ≥ min, multiplier ≥ 0.
    pub(crate) fn new(min: Duration, max: Duration, multiplier: f64) -> Result<Backoff> {
        limits::period("backoff_min", min)?;
        limits::period("backoff_max", max)?;
        if max < min {
            return Err(Error::config(format!(
                "backoff_max ({max:?}) may not be smaller than backoff_min ({min:?})"
            )));
        }
        if !multiplier.is_finite() || multiplier < 0.0 {
            return Err(Error::config(format!(
                "backoff_multiplier must be a finite number >= 0, got {multiplier}"
            )));
        }
        Ok(Backoff {
            min,
            max,
            multiplier,
        })
    }

    pub(crate) fn steps(&self) -> Steps {
        Steps {
            backoff: *self,
            last: None,
        }
    }
}

/// The waits of one acquisition: the first is `min`, then jittered.
pub(crate) struct Steps {
    backoff: Backoff,
    last: Option<Duration>,
}

impl Steps {
    pub(crate) fn next_wait(&mut self) -> Duration {
        let b = self.backoff;
        let wait = match self.last {
            None => b.min,
            Some(last) => {
                // Checked: `last` times a huge multiplier is past any Duration.
                let high = Duration::try_from_secs_f64(last.as_secs_f64() * b.multiplier)
                    .unwrap_or(b.max)
                    .max(b.min);
                (b.min + (high - b.min).mul_f64(unit_random())).min(b.max)
            }
        };
        self.last = Some(wait);
        wait
    }
}

/// Uniform in [0, 1).
fn unit_random() -> f64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS random source failed");
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn waits_stay_between_min_and_max_and_grow() {
        let mut steps = Backoff::new(MS(100), MS(1000), 2.0).unwrap().steps();
        assert_eq!(steps.next_wait(), MS(100));
        let waits: Vec<_> = (0..50).map(|_| steps.next_wait()).collect();
        assert!(waits.iter().all(|w| *w >= MS(100) && *w <= MS(1000)));
        assert!(waits.iter().any(|w| *w > MS(300)), "{waits:?}");
    }

    #[test]
    fn a_huge_multiplier_caps_at_max_instead_of_overflowing() {
        let mut steps = Backoff::new(MS(100), MS(1000), f64::MAX).unwrap().steps();
        let waits: Vec<_> = (0..20).map(|_| steps.next_wait()).collect();
        assert!(waits.iter().all(|w| *w >= MS(100) && *w <= MS(1000)));
    }

    #[test]
    fn the_gems_rules_for_bad_settings() {
        assert!(Backoff::new(MS(2), MS(1), 2.0).is_err());
        assert!(Backoff::new(MS(1), MS(2), -1.0).is_err());
        assert!(Backoff::new(MS(1), Duration::from_secs(31 * 24 * 3600), 2.0).is_err());
        assert!(Backoff::new(MS(1), MS(2), f64::NAN).is_err());
        let flat = Backoff::new(MS(5), MS(5), 0.0).unwrap();
        let mut steps = flat.steps();
        assert!((0..5).all(|_| steps.next_wait() == MS(5)));
    }
}
