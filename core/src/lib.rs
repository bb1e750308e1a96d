//! # lockyard
//!
//! Distributed locks and coordination primitives that stay correct under
//! crashes, pauses and network faults: a holder's lease runs on the
//! server's clock, is refreshed in the background, and a holder can always
//! ask whether it may have lost the lock. Every grant carries a fencing
//! token that only increases.
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # fn main() -> lockyard::Result<()> {
//! use std::time::Duration;
//! use lockyard::redis::Lock;
//!
//! let lock = Lock::builder("redis://127.0.0.1:6379/0", "deploy").build()?;
//! let guard = lock.acquire(Some(Duration::from_secs(5)))?;
//! guard.check_health()?;
//! // ... the work only one machine may do at a time ...
//! guard.release()?;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "redis"))]
//! # fn main() {}
//! ```
//!
//! `quorum::RwLock` is a read/write lock over N independent Redis
//! servers that keeps working while fewer than half of them are down.
//!
//! The API is blocking; a small internal runtime refreshes held locks.
//!
//! # Cargo features
//!
//! Each backend is a feature, all on by default; turn off the ones you do
//! not use to leave out their dependencies:
//!
//! | feature  | module             | what it adds                                              |
//! |----------|--------------------|-----------------------------------------------------------|
//! | `redis`  | `lockyard::redis`  | `Lock`, `WaitGroup`, `Session`, `Election`, `exclusive`   |
//! | `gcs`    | `lockyard::gcs`    | `Lock` on Google Cloud Storage (brings reqwest, google-cloud-auth) |
//! | `quorum` | `lockyard::quorum` | `RwLock` over N Redis servers; implies `redis`            |
//! | `etcd`   | `lockyard::etcd`   | the same five on etcd v3, a consensus store (brings reqwest) |
//!
//! A Redis-only build, with no HTTP stack:
//!
//! ```toml
//! lockyard = { version = "0.1", default-features = false, features = ["redis"] }
//! ```
//!
//! [`Error`], [`Result`] and [`as_holder`] exist under every feature set.

#[cfg(any(feature = "redis", feature = "etcd"))]
mod behavior;
mod clock;
#[cfg(any(feature = "redis", feature = "etcd"))]
mod ending;
pub mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(any(feature = "redis", feature = "etcd"))]
pub mod exclusive;
#[cfg(feature = "gcs")]
pub mod gcs;
#[cfg(any(feature = "redis", feature = "etcd"))]
pub mod group;
pub mod guard;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
mod health;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
mod holds;
mod identity;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub mod lease;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub mod limits;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub mod owners;
mod pid;
#[cfg(feature = "quorum")]
pub mod quorum;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
mod runtime;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
mod small_map;
#[cfg(any(feature = "redis", feature = "etcd"))]
mod state;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub mod wait;

pub use error::{Error, Result};
pub use identity::{as_holder, note_process_start};
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub use limits::{MAX_PERIOD, MAX_WAIT};
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub use runtime::{detach, finish_background_work, live_tasks, Detached};
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub use wait::{Deadline, Interrupt};
