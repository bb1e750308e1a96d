//! A conditional delete that still knows what it did when its reply is
//! lost.
//!
//! The client sends a request again when its reply does not come, and a
//! delete sent again finds the key gone either way: deleted by its own
//! first attempt, or by someone else before that attempt ran (an operator's
//! `force_release`, another process's `done`, a lease that ran out). Only
//! the first answers "kept to the end" / "freed". So the Txn's failure
//! branch leaves a mark of this one call, a key outside every line's range,
//! and asks for the mark's previous value: an attempt that finds the mark
//! already there knows that an earlier attempt of the same call failed
//! too. A delete that succeeds writes no mark, so the uncontended release
//! stays one request; a failed one (a lost hold, a slot already freed)
//! costs a second request, which deletes the mark. The mark rides on the
//! caller's lease, so a mark whose attempt lands after the caller gave up
//! goes with the lease's sweeps (or with the lease) instead of staying.

use serde_json::{json, Value};

use std::sync::Arc;

use super::kv;
use super::leases::Lease;
use super::queue::Queue;
use crate::error::Result;
use crate::identity;

/// What a [`Queue::delete_once`] did.
pub(crate) struct Removal {
    /// The attempt that answered deleted the key.
    pub(crate) deleted: bool,
    /// An earlier attempt of this call, whose reply was lost, deleted it.
    pub(crate) by_lost_attempt: bool,
    /// The key was not there when the answering attempt ran.
    pub(crate) gone: bool,
}

impl Queue {
    /// Deletes `key`, together with `also`, if `compare` holds, in one Txn.
    /// The mark goes on `marks` (None: an operator's call, with no lease;
    /// its mark stays if the call gives up and an attempt lands later).
    pub(crate) async fn delete_once(
        &self,
        key: &str,
        compare: Value,
        also: Vec<Value>,
        marks: Option<&Arc<Lease>>,
        operation: &str,
    ) -> Result<Removal> {
        let mark = self.mark_key();
        let lease = marks.map_or(0, |lease| lease.id);
        let mut success = vec![json!({"request_delete_range": {"key": kv::encode(key)}})];
        success.extend(also);
        let txn = json!({
            "compare": [compare],
            "success": success,
            "failure": [
                kv::get(key),
                {"request_put": {"key": kv::encode(&mark), "lease": lease, "prev_kv": true}},
            ],
        });
        let (answer, resent) = match self
            .client
            .call_tracked("kv/txn", &txn, self.request_until())
            .await
        {
            Ok(answered) => answered,
            // Only a failed compare puts the mark: the key is not ours, and
            // our lease is gone, so no earlier attempt of ours ran on it.
            Err(fault) if fault.is_lease_gone() => {
                return Ok(Removal {
                    deleted: false,
                    by_lost_attempt: false,
                    gone: true,
                })
            }
            Err(fault) => {
                if let Some(lease) = marks {
                    lease.stray(mark);
                }
                return Err(fault.into_error(&self.client, operation));
            }
        };
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(Removal {
                deleted: true,
                by_lost_attempt: false,
                gone: false,
            });
        }
        let gone = kv::entries(kv::response(&answer, 0)).is_empty();
        let failed_before = answer["responses"][1]["response_put"]["prev_kv"].is_object();
        self.drop_mark(&mark).await;
        // Sent again, and no earlier attempt found the key missing: the
        // first attempt deleted it. (Or it is still on its way and will
        // find the key gone: a mark cannot tell that one case.)
        Ok(Removal {
            deleted: false,
            by_lost_attempt: resent && gone && !failed_before,
            gone,
        })
    }

    /// `lockyard/<escaped name>.gone.<nonce>`: outside every line's range,
    /// like the bar, and one per call.
    fn mark_key(&self) -> String {
        let stem = self.prefix.trim_end_matches('/');
        format!("{stem}.gone.{}", identity::random_hex(8))
    }

    async fn drop_mark(&self, mark: &str) {
        let delete = json!({"key": kv::encode(mark)});
        if let Err(e) = self
            .call("kv/deleterange", &delete, "deleting a mark")
            .await
        {
            log::warn!("{mark} stays in etcd: {e}");
        }
    }
}
