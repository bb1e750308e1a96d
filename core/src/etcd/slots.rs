//! What a wait group asks of its line beyond taking and leaving a place:
//! freeing a slot by its token from any process, moving a slot onto the
//! lease of the process that works on it, counting, and waiting until the
//! line is empty.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::kv;
use super::leases::Lease;
use super::queue::Queue;
use crate::error::Result;

/// What a slot's value says once a process adopted it: a slot has one
/// adopter.
const ADOPTED: &str = " (adopted)";

/// How an adoption ended.
pub(crate) enum Adopted {
    /// The slot now rides on the adopter's lease; its fencing token.
    Ours(i64),
    /// Done, run out, or adopted by another process.
    Gone,
    /// The adopter's lease is gone: ask again with a new one.
    LeaseGone,
}

impl Queue {
    /// Deletes `key` (a slot, or a holder an operator removes), whoever
    /// holds it: true if it existed, also when the reply to the delete was
    /// lost and it was sent again (`removal.rs`). Its mark rides on `marks`.
    pub(crate) async fn remove(&self, key: &str, marks: Option<&Arc<Lease>>) -> Result<bool> {
        let removal = self
            .delete_once(key, kv::exists(key), Vec::new(), marks, "freeing a slot")
            .await?;
        Ok(removal.deleted || removal.by_lost_attempt)
    }

    /// Moves the slot `key` onto `lease`, keeping its create revision (its
    /// fencing token), unless another process adopted it first.
    pub(crate) async fn adopt(&self, key: &str, lease: &Lease, adopter: &str) -> Result<Adopted> {
        let read = json!({"success": [kv::read(key)]});
        let answer = self.call("kv/txn", &read, "reading a slot").await?;
        let Some(slot) = kv::entries(kv::response(&answer, 0)).into_iter().next() else {
            return Ok(Adopted::Gone);
        };
        if slot.lease == lease.id {
            return Ok(Adopted::Ours(slot.create_revision));
        }
        if slot.value.ends_with(ADOPTED) {
            return Ok(Adopted::Gone);
        }
        let txn = json!({
            "compare": [kv::created_at(key, slot.create_revision), kv::valued(key, &slot.value)],
            "success": [{"request_put": {
                "key": kv::encode(key),
                "value": kv::encode(&format!("{adopter}{ADOPTED}")),
                "lease": lease.id,
            }}],
            "failure": [kv::read(key)],
        });
        let answer = match self.client.call("kv/txn", &txn, self.request_until()).await {
            Err(fault) if fault.is_lease_gone() => {
                lease.gone();
                return Ok(Adopted::LeaseGone);
            }
            answer => answer.map_err(|fault| fault.into_error(&self.client, "adopting a slot"))?,
        };
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(Adopted::Ours(slot.create_revision));
        }
        // Changed meanwhile: ours only if it was our own put, sent again
        // after its reply was lost.
        let now = kv::entries(kv::response(&answer, 0));
        Ok(match now.first() {
            Some(entry) if entry.lease == lease.id => Adopted::Ours(entry.create_revision),
            _ => Adopted::Gone,
        })
    }

    /// How many keys the line has, and at which revision.
    async fn size(&self) -> Result<(i64, i64)> {
        let count = json!({
            "key": kv::encode(&self.own),
            "range_end": kv::prefix_end(&self.own),
            "count_only": true,
        });
        let answer = self.call("kv/range", &count, "counting slots").await?;
        Ok((kv::number(&answer["count"]), kv::revision(&answer)))
    }

    /// Held places: the line's keys, up to the limit.
    pub(crate) async fn held(&self) -> Result<u32> {
        let (keys, _) = self.size().await?;
        Ok(keys.min(self.limit).try_into().unwrap_or(u32::MAX))
    }

    /// Resolves once the line is empty: no holder and no waiter. Waits on
    /// a watch of its deletes, and reads again every request timeout (a
    /// frozen member sends nothing).
    pub(crate) async fn until_empty(&self) -> Result<()> {
        let mut pause = Duration::from_millis(100);
        loop {
            let revision = match self.size().await {
                Ok((0, _)) => return Ok(()),
                Ok((_, revision)) => revision,
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
                Err(e) => return Err(e),
            };
            pause = Duration::from_millis(100);
            let watch = self.until_gone("", "", revision + 1);
            match tokio::time::timeout(self.client.request_timeout(), watch).await {
                Ok(Err(e)) if !e.is_transient() => return Err(e),
                _ => continue,
            }
        }
    }
}
