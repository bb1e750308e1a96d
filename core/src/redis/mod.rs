//! Primitives on a Redis server or Redis Cluster.

mod admin;
mod caller;
mod client;
mod election;
mod exclusive;
mod failure;
mod hold;
mod keepalive;
mod keys;
mod lock;
mod refresh_batch;
mod route;
mod schedule;
mod scripts;
mod semaphore;
mod sentinel;
mod server;
mod session;
mod slots;
mod wait_group;

pub use crate::lease::{seconds, LeaseBuilder};
pub use admin::{force_release, inspect, HolderState, LockState};
pub use election::{Election, Observer, Term};
pub use exclusive::{claim, exclusive, Claim, Exclusive};
#[cfg(feature = "quorum")]
pub(crate) use keys::check_name;
pub use lock::{holder, Lock, LockBuilder, LockGuard};
#[doc(hidden)]
pub use refresh_batch::refresh_exchanges;
#[cfg(feature = "quorum")]
pub(crate) use route::Route;
pub(crate) use schedule::lock_for_fork as lock_schedule_for_fork;
#[doc(hidden)]
pub use scripts::source as script_source;
#[cfg(feature = "quorum")]
pub(crate) use server::{server, Server, COMMAND_TIMEOUT};
pub use session::{Behavior, Session, SessionBuilder};
pub use wait_group::{Slot, WaitGroup, WaitGroupBuilder};
