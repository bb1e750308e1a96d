//! Primitives on a Redis server or Redis Cluster.

mod keys;
mod lock;
mod scripts;
mod semaphore;
mod server;
pub(crate) mod settings;
mod wait_group;

pub(crate) use keys::check_name;
pub use lock::{Lock, LockBuilder, LockGuard};
pub(crate) use server::{server, Server};
pub use settings::seconds;
pub(crate) use settings::Lease;
pub use wait_group::{Slot, WaitGroup, WaitGroupBuilder};
