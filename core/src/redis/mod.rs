//! Primitives on a Redis server or Redis Cluster.

mod keys;
mod lock;
mod scripts;
mod semaphore;
mod server;
pub(crate) mod settings;
mod wait_group;

pub use lock::{Lock, LockBuilder, LockGuard};
pub use settings::seconds;
pub use wait_group::{Slot, WaitGroup, WaitGroupBuilder};
