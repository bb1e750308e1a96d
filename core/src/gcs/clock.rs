//! The server's clock, bounded from the `Date` headers of its replies and
//! the boot clock, never from the local wall clock.
//!
//! A reply dated `D` (whole seconds, truncated) to a request sent at boot
//! time `s` and received at `r` was stamped while the server's clock read
//! between `D` and `D + 1`, at a boot time between `s` and `r`. Both clocks
//! run at the same rate over a few refreshes, so at any boot time `t` the
//! server's clock reads at most `D + 1 + (t - s)` and at least `D + (t - r)`.
//! A reply that comes back late (a slow link, a paused process) only loosens
//! the lower bound; a local clock stepped back or forward moves neither.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::clock::Stamp;

/// Bounds from this many recent replies are kept: enough for the upper
/// bound to tighten as replies land at different points of the server's
/// second, few enough that the clocks' rates cannot drift apart over them.
const REMEMBERED: usize = 16;

/// `Date` has whole seconds and is truncated.
const DATE_RESOLUTION: f64 = 1.0;

/// How far apart the clocks of the frontends answering for one bucket are
/// assumed to be, at most: replies may come from any of them, and a rival's
/// read may be answered by the fastest.
const FRONTEND_SKEW: f64 = 0.5;

pub(crate) struct ServerClock {
    /// (server − boot) bounds, in seconds, from recent replies: (at most,
    /// at least).
    offsets: Mutex<VecDeque<(f64, f64)>>,
    /// The local wall clock, for the guess before the first reply.
    wall: fn() -> f64,
}

impl Default for ServerClock {
    fn default() -> Self {
        ServerClock {
            offsets: Mutex::default(),
            wall: wall_now,
        }
    }
}

fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl ServerClock {
    /// Learns from a reply dated `server_time` to a request sent at `sent`
    /// and answered at `received`.
    pub(crate) fn observe(&self, sent: Stamp, received: Stamp, server_time: Option<f64>) {
        let Some(date) = server_time else { return };
        let mut offsets = self.offsets.lock().unwrap_or_else(|e| e.into_inner());
        if offsets.len() == REMEMBERED {
            offsets.pop_front();
        }
        offsets.push_back((
            date + DATE_RESOLUTION - sent.as_secs_f64(),
            date - received.as_secs_f64(),
        ));
    }

    /// The tightest (at most, at least) offsets known, if any reply was dated.
    fn offsets(&self) -> Option<(f64, f64)> {
        let offsets = self.offsets.lock().unwrap_or_else(|e| e.into_inner());
        offsets
            .iter()
            .copied()
            .reduce(|(most, least), (m, l)| (most.min(m), least.max(l)))
    }

    /// Whether any dated reply has been seen yet.
    pub(crate) fn is_known(&self) -> bool {
        self.offsets().is_some()
    }

    /// What the server's clock reads now at most: what a holder writes its
    /// `expires_at` from, so that the object outlives its local deadline.
    /// Before any reply, a guess from the local wall clock (as loose as a
    /// bound from a reply would be), which [`ServerClock::deadline`] then
    /// judges by the server's answer.
    pub(crate) fn at_most_now(&self) -> f64 {
        match self.offsets() {
            Some((most, _)) => Stamp::now().as_secs_f64() + most,
            None => (self.wall)() + DATE_RESOLUTION,
        }
    }

    /// What the server's clock reads now at least, on any frontend: the
    /// time a reply without a `Date` is judged by, so nobody else's object
    /// is found stale early.
    pub(crate) fn at_least_now(&self) -> f64 {
        match self.offsets() {
            Some((_, least)) => Stamp::now().as_secs_f64() + least - FRONTEND_SKEW,
            None => (self.wall)() - FRONTEND_SKEW,
        }
    }

    /// Until when, on the boot clock, no frontend's clock reads later than
    /// `expires_at` (server time): how long an object written with it
    /// surely stays ours. None before any dated reply.
    pub(crate) fn deadline(&self, expires_at: f64) -> Option<Stamp> {
        let (most, _) = self.offsets()?;
        Some(Stamp::from_secs_f64(expires_at - most - FRONTEND_SKEW))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A server whose clock reads boot time + 1000.3 s.
    fn server(at: Stamp) -> f64 {
        at.as_secs_f64() + 1000.3
    }

    #[test]
    fn a_late_reply_does_not_move_the_deadline_past_the_servers_expiry() {
        let clock = ServerClock::default();
        let sent = Stamp::now();
        // Stamped at once, then 2 s on the way back.
        let received = sent + Duration::from_secs(2);
        clock.observe(sent, received, Some(server(sent).floor()));
        let expires_at = server(received) + 10.0;
        let deadline = clock.deadline(expires_at).unwrap();
        assert!(server(deadline) <= expires_at, "never live past expiry");
        assert!(
            server(deadline) >= expires_at - DATE_RESOLUTION - FRONTEND_SKEW,
            "short by at most the resolution of Date and the frontends' skew"
        );
        let (most, least) = clock.offsets().unwrap();
        assert!(least <= 1000.3 && 1000.3 <= most, "{least} {most}");
    }

    #[test]
    fn the_tightest_bounds_of_recent_replies_win() {
        let clock = ServerClock::default();
        let stamped = Stamp::now();
        let date = server(stamped).floor();
        let early = Stamp::from_secs_f64(stamped.as_secs_f64() - 0.5);
        let late = stamped + Duration::from_millis(500);
        clock.observe(early, late, Some(date));
        clock.observe(stamped, stamped, Some(date));
        assert_eq!(
            clock.offsets(),
            Some((
                date + 1.0 - stamped.as_secs_f64(),
                date - stamped.as_secs_f64()
            ))
        );
        for _ in 0..REMEMBERED {
            clock.observe(early, late, Some(date));
        }
        let (most, _) = clock.offsets().unwrap();
        assert_eq!(
            most,
            date + 1.0 - early.as_secs_f64(),
            "old replies are forgotten"
        );
        assert!(clock.at_least_now() <= clock.at_most_now());
    }

    #[test]
    fn a_local_clock_stepped_back_moves_nothing_once_the_server_answered() {
        use std::sync::atomic::{AtomicI64, Ordering};
        static STEP_MS: AtomicI64 = AtomicI64::new(0);
        let clock = ServerClock {
            wall: || wall_now() + STEP_MS.load(Ordering::SeqCst) as f64 / 1000.0,
            ..ServerClock::default()
        };
        let guess = clock.at_most_now();
        let sent = Stamp::now();
        clock.observe(sent, sent, Some(server(sent).floor()));
        let (at_most, deadline) = (clock.at_most_now(), clock.deadline(guess + 30.0));
        STEP_MS.store(-2000, Ordering::SeqCst);
        assert!((clock.at_most_now() - at_most).abs() < 0.1);
        assert_eq!(clock.deadline(guess + 30.0), deadline);
        assert!(server(deadline.unwrap()) <= guess + 30.0);
    }

    /// Review: replies from two frontends (a load balancer in front of the
    /// store) whose clocks differ by 250 ms. The upper bound is the minimum
    /// over all recent replies, so it is tight for the slower frontend only;
    /// a rival whose read is answered by the faster one finds the object
    /// stale (its `Date` > `expires_at`) while the holder is still inside its
    /// deadline.
    #[test]
    fn replies_from_two_skewed_frontends_never_leave_the_holder_live_past_expiry() {
        let clock = ServerClock::default();
        let slow = |at: Stamp| at.as_secs_f64() + 1000.0;
        let fast = |at: Stamp| at.as_secs_f64() + 1000.25;
        let base = slow(Stamp::now()).floor();
        // Zero-latency replies, the slow frontend's 0.99 s into its second.
        let at = Stamp::from_secs_f64(base + 1.99 - 1000.0);
        clock.observe(at, at, Some(slow(at).floor()));
        clock.observe(at, at, Some(fast(at).floor()));
        let expires_at = base + 30.9;
        let deadline = clock.deadline(expires_at).unwrap();
        // Just before the holder's deadline:
        let live = Stamp::from_secs_f64(deadline.as_secs_f64() - 0.001);
        assert!(slow(live).floor() <= expires_at);
        assert!(
            fast(live).floor() <= expires_at,
            "healthy while the fast frontend dates {} > expires_at {expires_at}",
            fast(live).floor()
        );
    }

    #[test]
    fn unknown_until_a_dated_reply() {
        let clock = ServerClock::default();
        clock.observe(Stamp::now(), Stamp::now(), None);
        assert!(!clock.is_known());
        assert_eq!(clock.deadline(1e9), None);
    }
}
