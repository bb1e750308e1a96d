//! # lockyard
//!
//! Distributed locks and coordination primitives that stay correct under
//! crashes, pauses and network faults: a holder's lease runs on the
//! server's clock, is refreshed in the background, and a holder can always
//! ask whether it may have lost the lock. Every grant carries a fencing
//! token that only increases.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockyard::redis::Lock;
//!
//! let lock = Lock::builder("redis://127.0.0.1:6379/0", "deploy").build()?;
//! let guard = lock.acquire(Some(Duration::from_secs(5)))?;
//! guard.check_health()?;
//! // ... the work only one machine may do at a time ...
//! guard.release()?;
//! # Ok::<(), lockyard::Error>(())
//! ```
//!
//! [`quorum::RwLock`] is a read/write lock over N independent Redis
//! servers that keeps working while fewer than half of them are down.
//!
//! The API is blocking; a small internal runtime refreshes held locks.

pub mod error;
pub mod gcs;
pub mod guard;
mod health;
mod holds;
mod identity;
mod lease;
pub mod quorum;
pub mod redis;
mod runtime;

pub use error::{Error, Result};
pub use identity::as_holder;
