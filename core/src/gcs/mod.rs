//! A lock on Google Cloud Storage: the algorithm of the Ruby gem
//! distributed-lock-google-cloud-storage, with its known flaws fixed.
//!
//! - `lock.rs`: the public [`Lock`]; `options.rs`: its options;
//! - `engine.rs`: the algorithm, against any [`Store`]: a hold, its
//!   refresher and its release; `acquire.rs`: taking the lock;
//!   `requests.rs`: asking the store until a deadline; `clock.rs`: the
//!   server's clock;
//! - `client.rs`: the JSON API over HTTPS; `auth.rs`: endpoint and credentials;
//! - `store.rs`: the four conditional operations the algorithm needs;
//!   `writer.rs`: telling our own writes from anyone else's.
//!
//! See `README.md` in this directory for the choice of crates.

mod acquire;
mod admin;
mod auth;
mod backoff;
mod client;
mod clock;
mod engine;
mod in_task;
mod lock;
mod options;
mod requests;
mod store;
mod writer;

pub use admin::ObjectState;
pub use engine::LogSink;
pub use lock::{Lock, LockGuard};
pub use options::LockBuilder;
pub use store::{LockObject, Metadata, Reply, Store, StoreError, StoreFuture, Version};
