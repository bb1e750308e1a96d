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
//! writes nothing and the full entry follows; a line found busy keeps to
//! the full entry until an entry finds it empty again, so contended names
//! do not pay for a failed attempt each time.

use std::sync::atomic::Ordering;

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

impl Queue {
    /// Whether the next entry tries [`Queue::enter_alone`] first: not for
    /// a lock whose own session's bar must not bar it (the full entry
    /// reads whose bar it is), nor for a line last found busy.
    pub(crate) fn tries_alone(&self) -> bool {
        !self.is_barring() && !self.crowded.load(Ordering::Relaxed)
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
        let answer = self
            .client
            .call_tracked("kv/txn", &txn, self.request_until())
            .await;
        let (answer, resent) = match answer {
            Err(fault) if fault.is_lease_gone() => {
                lease.gone();
                return Ok(Uncontended::LeaseGone);
            }
            answer => {
                answer.map_err(|fault| fault.into_error(&self.client, "queueing for the lock"))?
            }
        };
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(Uncontended::Held {
                revision: kv::revision(&answer),
                resent,
            });
        }
        self.crowded.store(true, Ordering::Relaxed);
        Ok(Uncontended::Crowded { resent })
    }
}
