//! A conditional delete that still knows what it did when its reply is
//! lost.
//!
//! The client sends a request again when its reply does not come, and a
//! delete sent again finds the key gone either way: deleted by an earlier
//! attempt of its own, or by someone else before those ran (an operator's
//! `force_release`, another process's `done`). Only the first answers
//! "kept to the end" / "freed". So the Txn's failure branch puts a mark of
//! this one call, a key outside every line's range, and reads its previous
//! version: how many earlier attempts ran and failed too. When every
//! earlier attempt whose fate is unknown is counted there, none deleted
//! the key. A delete that succeeds writes no mark, so the uncontended
//! release stays one request; a failed one (a lost hold, a slot already
//! freed) costs a second request, which deletes the mark.
//!
//! What a mark cannot tell: an earlier attempt that never reached etcd, or
//! reaches it only after the answering one, looks like one that deleted the
//! key, as every resent delete did before marks.
//!
//! The mark rides on the caller's lease (etcd refuses the Txn when that
//! lease is gone, and then the earlier rule answers), and goes on the
//! lease's sweeps whenever an attempt may still land after the call: it
//! never stays behind its lease.

use std::sync::Arc;

use serde_json::{json, Value};

use super::kv;
use super::leases::Lease;
use super::queue::Queue;
use crate::error::Result;
use crate::identity;

/// What a [`Queue::delete_once`] did.
pub(crate) struct Removal {
    /// The attempt that answered deleted the key.
    pub(crate) deleted: bool,
    /// The key was gone, and an earlier attempt of this call whose reply
    /// was lost may have deleted it: none is known to have failed.
    pub(crate) by_lost_attempt: bool,
    /// The key was not there when the answering attempt ran.
    pub(crate) gone: bool,
}

impl Queue {
    /// Deletes `key`, together with `also`, if `compare` holds, in one Txn.
    /// The mark goes on `marks`; an operator's call (None) puts none, and a
    /// resent attempt finding the key gone counts as the delete.
    pub(crate) async fn delete_once(
        &self,
        key: &str,
        compare: Value,
        also: Vec<Value>,
        marks: Option<&Arc<Lease>>,
        operation: &str,
    ) -> Result<Removal> {
        let mark = self.mark_key();
        let mut success = vec![json!({"request_delete_range": {"key": kv::encode(key)}})];
        success.extend(also);
        let mut failure = vec![kv::get(key)];
        if let Some(lease) = marks {
            failure.push(json!({"request_put": {
                "key": kv::encode(&mark),
                "lease": lease.id,
                "prev_kv": true,
            }}));
        }
        let txn = json!({"compare": [compare], "success": success, "failure": failure});
        let (answer, unsure) = self
            .client
            .call_counted("kv/txn", &txn, self.request_until())
            .await;
        // An attempt may still land after this call: its mark goes on the
        // sweeps. (With none unsure, an error wrote nothing.)
        if let Some(lease) = marks.filter(|_| unsure > 0) {
            lease.stray(mark.clone());
        }
        let answer = match answer {
            Ok(answer) => answer,
            // Only the failure branch puts on the lease: the key is gone,
            // and the lease with it, so no mark can be read.
            Err(fault) if fault.is_lease_gone() => {
                return Ok(Removal {
                    deleted: false,
                    by_lost_attempt: unsure > 0,
                    gone: true,
                })
            }
            Err(fault) => return Err(fault.into_error(&self.client, operation)),
        };
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(Removal {
                deleted: true,
                by_lost_attempt: false,
                gone: false,
            });
        }
        let gone = kv::entries(kv::response(&answer, 0)).is_empty();
        let failed_before = match marks {
            Some(lease) => {
                self.drop_mark(&mark, lease).await;
                let version =
                    kv::number(&answer["responses"][1]["response_put"]["prev_kv"]["version"]);
                u32::try_from(version).unwrap_or(u32::MAX)
            }
            None => 0,
        };
        Ok(Removal {
            deleted: false,
            by_lost_attempt: gone && failed_before < unsure,
            gone,
        })
    }

    /// `lockyard/<escaped name>.gone.<nonce>`: outside every line's range,
    /// like the bar, and one per call.
    fn mark_key(&self) -> String {
        self.key_beside(&format!("gone.{}", identity::random_hex(8)))
    }

    async fn drop_mark(&self, mark: &str, lease: &Arc<Lease>) {
        let delete = json!({"key": kv::encode(mark)});
        if let Err(e) = self
            .call("kv/deleterange", &delete, "deleting a mark")
            .await
        {
            log::warn!("{mark} is left to the lease's sweeps: {e}");
            lease.stray(mark.to_owned());
        }
    }
}
