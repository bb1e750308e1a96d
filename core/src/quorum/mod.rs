//! A read/write lock over N independent Redis servers that keeps working
//! while fewer than half of them are down: minio's dsync, with leases that
//! expire on each server, background refresh, health and fencing.

mod admin;
mod engine;
mod fanout;
mod lock;
#[cfg(test)]
mod memory;
mod node;
mod tally;
#[cfg(test)]
mod tests;

pub use admin::{force_release, inspect, Grant, NodeState};
pub use lock::{ReadGuard, RwLock, RwLockBuilder, WriteGuard};

/// Live tasks on lockyard's internal runtime (requests in flight,
/// refreshers, connection drivers). Tests use it to prove that the fan-out
/// returns to its baseline after timeouts, cancellations and node failures.
#[doc(hidden)]
pub fn live_tasks() -> usize {
    crate::runtime::alive_tasks()
}
