//! The server's clock, estimated from the `Date` headers of its replies.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The server's clock as seen from here: the offset between the `Date` of
/// recent responses and the local wall clock. Only ever used to write
/// `expires_at` in server time; staleness is judged against the `Date` of
/// the response that returned the object.
#[derive(Default)]
pub(crate) struct ServerClock {
    offset_ms: AtomicI64,
    known: AtomicBool,
}

fn wall_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl ServerClock {
    /// `Date` has whole seconds and is truncated: add half a second.
    pub(crate) fn observe(&self, server_time: Option<f64>) {
        if let Some(at) = server_time {
            let offset = (at + 0.5 - wall_now()) * 1000.0;
            self.offset_ms.store(offset as i64, Ordering::Relaxed);
            self.known.store(true, Ordering::Relaxed);
        }
    }

    /// Whether any reply has been seen yet.
    pub(crate) fn is_known(&self) -> bool {
        self.known.load(Ordering::Relaxed)
    }

    pub(crate) fn now(&self) -> f64 {
        wall_now() + self.offset_ms.load(Ordering::Relaxed) as f64 / 1000.0
    }
}
