//! Primitives on a Redis server or Redis Cluster.

mod election;
mod exclusive;
mod keys;
mod lock;
mod scripts;
mod semaphore;
mod server;
mod session;
mod settings;
mod wait_group;

pub use election::{Election, Observer, Term};
pub use exclusive::{exclusive, Claim, Exclusive};
pub use lock::{holder, Lock, LockBuilder, LockGuard};
pub use session::{Behavior, Session, SessionBuilder};
pub use settings::seconds;
pub use wait_group::{Slot, WaitGroup, WaitGroupBuilder};
