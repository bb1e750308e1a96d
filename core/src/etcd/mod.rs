//! Locks on etcd v3, the consensus store: for locks that must hold through
//! a failover. etcd commits every write through Raft before it answers.
//!
//! - `lock.rs`: the public [`Lock`]; `admin.rs`: [`holder`], [`inspect`] and
//!   [`force_release`] for operators; `queue.rs`: the waiting line of one
//!   name (etcd's concurrency recipe, one Txn per step); `removal.rs`: a
//!   delete that knows what it did when its reply is lost;
//!   `uncontended.rs`: the small Txn that takes a name with no key;
//! - `leases.rs`: this process's leases, kept alive by one task each, which
//!   also checks the held keys and deletes keys left behind;
//!   `session.rs`: [`Session`], one lease that locks live under, and the
//!   bars of its lock_delay; `election.rs`: [`Election`], a session's
//!   campaign in a lock's line, and its [`Observer`]; `exclusive.rs`:
//!   [`exclusive`] workers;
//! - `client.rs`: requests to etcd's JSON gateway, failed over across the
//!   members; `kv.rs`: the pieces of its requests and answers;
//!   `target.rs`: the `etcd://` URL.
//!
//! See `README.md` in this directory for why the gateway and not gRPC.

mod admin;
mod client;
mod election;
mod exclusive;
mod grant;
mod kv;
mod leases;
mod lock;
mod queue;
mod removal;
mod session;
mod slots;
mod target;
mod uncontended;
mod wait_group;

pub use crate::behavior::Behavior;
pub use crate::state::{HolderState, LockState, Term};
pub use admin::{force_release, holder, inspect};
pub use election::{Election, Observer};
pub use exclusive::{claim, exclusive, Claim, Exclusive};
pub use lock::{Lock, LockBuilder, LockGuard};
pub use session::{Session, SessionBuilder};
pub use wait_group::{WaitGroup, WaitGroupBuilder};

/// One held slot of a [`WaitGroup`]; freed on drop.
pub type Slot<'a> = crate::group::Slot<'a, WaitGroup>;
