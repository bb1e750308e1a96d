//! A read/write lock over N independent Redis servers that keeps working
//! while fewer than half of them are down: minio's dsync, with leases that
//! expire on each server, background refresh, health and fencing.
//!
//! - `lock.rs`: the public [`RwLock`], its guards and builder;
//! - `engine.rs`: the algorithm: a hold, its refresher, fencing and
//!   release; `acquire.rs`: taking the lock; `backoff.rs`: waits between
//!   attempts;
//! - `fanout.rs`: a round of parallel requests; `tally.rs`: how its
//!   answers add up;
//! - `node.rs`: one Redis server as a lock node; `admin.rs`: operator tools.

mod acquire;
mod admin;
mod backoff;
mod engine;
mod fanout;
mod guards;
#[cfg(test)]
mod memory;
mod node;
mod rw_lock;
mod tally;
#[cfg(test)]
mod tests;

pub use admin::{force_release, inspect, Grant, NodeState};
pub use guards::{ReadGuard, WriteGuard};
pub use rw_lock::{RwLock, RwLockBuilder};

#[doc(hidden)]
pub use crate::runtime::live_tasks;
