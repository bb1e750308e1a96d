//! The waiting line of one name: etcd's concurrency recipe, run by our
//! client with one Txn per step.
//!
//! Every acquire puts a key of its own under `lockyard/<name>/`, on its
//! lease, and holds once it is among the `limit` oldest keys there by
//! create revision; that revision is its fencing token. A waiter of a lock
//! watches only the key just ahead of it, so a release wakes one waiter
//! (FIFO, no herd) and waiting writes nothing.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{Client, Fault};
use super::kv;
use super::leases::Lease;
use crate::error::{Error, Result};

/// A watch is opened again after this long even if it saw nothing: a
/// connection that died without a word cannot hold a waiter forever.
const WATCH_RENEWAL: Duration = Duration::from_secs(30);

pub(crate) struct Queue {
    client: Arc<Client>,
    /// `lockyard/<escaped name>/`
    prefix: String,
    limit: i64,
    /// "lock \"deploy\"", for messages.
    what: String,
}

/// Where a key stands in the line.
enum Place {
    Holds,
    /// Behind `ahead`, as read at `revision`.
    Behind {
        ahead: String,
        revision: i64,
    },
    /// The key is gone: its lease ran out, or someone deleted it.
    Gone,
}

impl Queue {
    pub(crate) fn new(client: Arc<Client>, name: &str, limit: i64, what: String) -> Result<Queue> {
        if name.is_empty() {
            return Err(Error::config("the name must not be empty"));
        }
        // A '/' in a name would put one name's line inside another's range.
        let escaped = name.replace('%', "%25").replace('/', "%2F");
        Ok(Queue {
            client,
            prefix: format!("lockyard/{escaped}/"),
            limit,
            what,
        })
    }

    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// A key of this line for one acquire.
    pub(crate) fn key(&self, nonce: &str) -> String {
        format!("{}{nonce}", self.prefix)
    }

    /// How long one request may be retried on other members.
    fn until(&self) -> Instant {
        Instant::now() + self.client.request_timeout()
    }

    async fn call(&self, path: &str, body: &Value, operation: &str) -> Result<Value> {
        self.client
            .call(path, body, self.until())
            .await
            .map_err(|fault| fault.into_error(&self.client, operation))
    }

    /// Whether all `limit` places are taken: a look that writes nothing,
    /// for a single attempt that would only leave again.
    pub(crate) async fn is_full(&self) -> Result<bool> {
        let count = json!({
            "key": kv::encode(&self.prefix),
            "range_end": kv::prefix_end(&self.prefix),
            "count_only": true,
        });
        let answer = self.call("kv/range", &count, "reading the lock").await?;
        Ok(kv::number(&answer["count"]) >= self.limit)
    }

    /// Puts `key` on `lease` and waits until it holds. Returns its create
    /// revision, or None when `one_attempt` found the lock held (its key
    /// deleted again). Given up (dropped) or failed at any point, it may
    /// leave the key behind: the caller hands it to [`Lease::stray`].
    pub(crate) async fn take(
        &self,
        key: &str,
        value: &str,
        lease: &Lease,
        one_attempt: bool,
    ) -> Result<Option<i64>> {
        let revision = self.enter(key, value, lease).await?;
        loop {
            match self.place(key, revision).await? {
                Place::Holds => return Ok(Some(revision)),
                Place::Gone => {
                    return Err(Error::backend(
                        self.client.shown(),
                        "waiting",
                        format!(
                            "the waiter's key for {} is gone from etcd ({})",
                            self.what,
                            lease
                                .loss()
                                .unwrap_or_else(|| "deleted by someone else".into())
                        ),
                    ))
                }
                Place::Behind { .. } if one_attempt => {
                    self.leave(key, revision).await?;
                    return Ok(None);
                }
                Place::Behind {
                    ahead,
                    revision: read_at,
                } => {
                    let wait = self.until_gone(&ahead, read_at + 1);
                    if let Some(ended) = unless_lost(wait, lease.lost()).await {
                        ended?;
                        continue;
                    }
                    let why = lease.loss().unwrap_or_default();
                    return Err(Error::backend(
                        self.client.shown(),
                        "waiting",
                        format!("the waiter for {} lost its lease: {why}", self.what),
                    ));
                }
            }
        }
    }

    /// Puts `key` unless it exists (a retry after a lost reply finds its
    /// own put): its create revision.
    async fn enter(&self, key: &str, value: &str, lease: &Lease) -> Result<i64> {
        let txn = json!({
            "compare": [kv::created_at(key, 0)],
            "success": [{"request_put": {"key": kv::encode(key), "value": kv::encode(value), "lease": lease.id}}],
            "failure": [kv::get(key)],
        });
        let answer = self.call("kv/txn", &txn, "queueing for the lock").await;
        let answer = match answer {
            Err(e) if is_lease_gone(&e) => {
                return Err(Error::backend(
                    self.client.shown(),
                    "queueing for the lock",
                    format!(
                        "the lease {:x} ran out before {} was asked for",
                        lease.id, self.what
                    ),
                ))
            }
            other => other?,
        };
        if answer["succeeded"].as_bool() == Some(true) {
            return Ok(kv::revision(&answer));
        }
        Ok(kv::entries(kv::response(&answer, 0))
            .first()
            .map_or(kv::revision(&answer), |entry| entry.create_revision))
    }

    /// Where `key`, created at `revision`, stands: one read-only Txn.
    async fn place(&self, key: &str, revision: i64) -> Result<Place> {
        let txn = json!({"success": [
            kv::get(key),
            kv::oldest(&self.prefix, self.limit),
            kv::newest_before(&self.prefix, revision),
        ]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        if kv::entries(kv::response(&answer, 0)).is_empty() {
            return Ok(Place::Gone);
        }
        if kv::entries(kv::response(&answer, 1))
            .iter()
            .any(|entry| entry.key == key)
        {
            return Ok(Place::Holds);
        }
        let ahead = kv::entries(kv::response(&answer, 2));
        Ok(match ahead.into_iter().next() {
            // Only a lock's waiter knows one key whose end frees it; with
            // room for several holders any release may (see `until_gone`).
            Some(entry) if self.limit == 1 => Place::Behind {
                ahead: entry.key,
                revision: kv::revision(&answer),
            },
            _ => Place::Behind {
                ahead: String::new(),
                revision: kv::revision(&answer),
            },
        })
    }

    /// Resolves when `ahead` (or, when empty, any key of the line) is
    /// deleted at or after `from`, when the watch ends, or after
    /// [`WATCH_RENEWAL`]: the caller then reads its place again.
    async fn until_gone(&self, ahead: &str, from: i64) -> Result<()> {
        let mut create = json!({"start_revision": from, "filters": ["NOPUT"]});
        if ahead.is_empty() {
            create["key"] = kv::encode(&self.prefix).into();
            create["range_end"] = kv::prefix_end(&self.prefix).into();
        } else {
            create["key"] = kv::encode(ahead).into();
        }
        let watch = async {
            let mut lines = match self
                .client
                .stream("watch", &json!({"create_request": create}), self.until())
                .await
            {
                Ok(lines) => lines,
                Err(Fault::Unanswered(_)) => {
                    // No member took the watch: read the place again after a pause.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    return Ok(());
                }
                Err(fault) => return Err(fault.into_error(&self.client, "watching the lock")),
            };
            loop {
                match lines.next().await {
                    Ok(Some(message)) => {
                        let result = &message["result"];
                        let deleted = result["events"]
                            .as_array()
                            .is_some_and(|events| !events.is_empty());
                        if deleted || result["canceled"].as_bool() == Some(true) {
                            return Ok(());
                        }
                    }
                    Ok(None) => return Ok(()),
                    Err(fault) if fault.is_compacted() => return Ok(()),
                    Err(Fault::Unanswered(_)) => return Ok(()),
                    Err(fault) => return Err(fault.into_error(&self.client, "watching the lock")),
                }
            }
        };
        tokio::time::timeout(WATCH_RENEWAL, watch)
            .await
            .unwrap_or(Ok(()))
    }

    /// Deletes `key` if it is still the one created at `revision`: true if
    /// it was (the hold was kept to the end).
    pub(crate) async fn leave(&self, key: &str, revision: i64) -> Result<bool> {
        let txn = json!({
            "compare": [kv::created_at(key, revision)],
            "success": [{"request_delete_range": {"key": kv::encode(key)}}],
        });
        let answer = self.call("kv/txn", &txn, "releasing the lock").await?;
        Ok(answer["succeeded"].as_bool() == Some(true))
    }

    /// The oldest `limit` keys: the holders, with their values.
    pub(crate) async fn holders(&self) -> Result<Vec<kv::Entry>> {
        let txn = json!({"success": [kv::oldest(&self.prefix, self.limit)]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        Ok(kv::entries(kv::response(&answer, 0)))
    }
}

fn is_lease_gone(error: &Error) -> bool {
    matches!(error, Error::Backend { message, .. } if message.contains("lease not found"))
}

/// What `wait` ended with, or None if `lost` resolved first.
async fn unless_lost<T>(
    wait: impl Future<Output = T>,
    lost: impl Future<Output = ()>,
) -> Option<T> {
    let mut wait = pin!(wait);
    let mut lost = pin!(lost);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(ended) = wait.as_mut().poll(cx) {
            return Poll::Ready(Some(ended));
        }
        if lost.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}
