//! The uncontended entry: a name with no key at all is taken by a Txn that
//! carries only what that case needs.
//!
//! etcd's gateway decodes every field of a request and Raft logs all of
//! it, so a request's size is part of its cost: the full entry's compares
//! for the name's shape, its reads of the holders and the bar, and its
//! failure branch made an uncontended cycle 13–20 % slower than the bare
//! put-if-absent (bench/etcd.py). When the name has no key (no holder, no
//! waiter, nothing of another shape) and no bar, the put alone decides:
//! this key is the oldest and the only one, so it holds. Otherwise the Txn
//! writes nothing and the full entry follows; a name found busy keeps to
//! the full entry until an entry finds it empty again, so contended names
//! do not pay for a failed attempt each time. That memory is the process's,
//! not the lock object's: code that builds a `Lock` per acquire is common.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex, MutexGuard, TryLockError};

use serde_json::json;

use super::kv;
use super::leases::Lease;
use super::queue::Queue;
use crate::error::Result;

/// How an uncontended entry ended.
pub(crate) enum Uncontended {
    /// Put and held, at this revision; `resent` as in [`super::queue::Taken`].
    Held {
        revision: i64,
        resent: bool,
    },
    /// The name has a key or a bar: nothing was put (unless an attempt
    /// whose reply was lost did, which the full entry finds: `resent`).
    Crowded {
        resent: bool,
    },
    LeaseGone,
}

/// The names (their key prefixes) whose last entry in this process found
/// them busy. A name left out only costs one failed small Txn: so the set
/// starts over rather than grow without end, and is passed by when another
/// thread has it (never waited on: a child forked while a thread of its
/// parent had it would wait forever).
static CROWDED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);
const CROWDED_MOST: usize = 10_000;

impl Queue {
    /// Whether the next entry tries [`Queue::enter_alone`] first: not for
    /// a lock whose own session's bar must not bar it (the full entry
    /// reads whose bar it is), nor for a name last found busy.
    pub(crate) fn tries_alone(&self) -> bool {
        !self.is_barring() && !crowded().is_some_and(|names| names.contains(&self.prefix))
    }

    /// Notes whether an entry found the line busy.
    pub(crate) fn found_crowded(&self, busy: bool) {
        let Some(mut names) = crowded() else {
            return;
        };
        if !busy {
            names.remove(&self.prefix);
            return;
        }
        if names.len() >= CROWDED_MOST {
            names.clear();
        }
        names.insert(self.prefix.clone());
    }

    /// Puts `key` on `lease` if the name has no key and no bar.
    pub(crate) async fn enter_alone(
        &self,
        key: &str,
        value: &str,
        lease: &Lease,
    ) -> Result<Uncontended> {
        let txn = json!({
            "compare": [
                kv::none_in(kv::encode(&self.prefix), kv::prefix_end(&self.prefix)),
                kv::created_at(&self.bar_key(), 0),
            ],
            "success": [
                {"request_put": {"key": kv::encode(key), "value": kv::encode(value), "lease": lease.id}},
            ],
        });
        let Some((answer, resent)) = self.enter_txn(&txn, lease).await? else {
            return Ok(Uncontended::LeaseGone);
        };
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(Uncontended::Held {
                revision: kv::revision(&answer),
                resent,
            });
        }
        self.found_crowded(true);
        Ok(Uncontended::Crowded { resent })
    }
}

fn crowded() -> Option<MutexGuard<'static, HashSet<String>>> {
    match CROWDED.try_lock() {
        Ok(names) => Some(names),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
