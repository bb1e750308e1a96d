//! Looking at a name on etcd without holding it: whose it is ([`holder`]),
//! who holds it and who waits ([`inspect`]), and breaking the glass
//! ([`force_release`]). Like the Redis ones, they take a URL and a name,
//! not a lock object.

use std::sync::Arc;

use serde_json::json;

use super::client::Client;
use super::kv;
use super::queue::{Queue, Shape};
use super::target::Target;
use crate::error::Result;
use crate::lease::DEFAULT_CONNECT_TIMEOUT;
use crate::runtime;
use crate::state::{HolderState, LockState};

fn queue(url: &str, name: &str) -> Result<Queue> {
    let client = Arc::new(Client::new(Target::parse(url)?, DEFAULT_CONNECT_TIMEOUT));
    Queue::new(client, name, Shape::Lock, format!("lock {name:?}"))
}

/// What the current holder of the lock `name` stored (its value under a
/// session, else its identity); while a lost session's lock_delay bars the
/// name, the value it held it with if its behavior is `release`. None when
/// nobody holds it.
///
/// # Errors
/// [`crate::Error::Config`] for a bad name or URL, [`crate::Error::Backend`] if no member
/// answers.
pub fn holder(url: &str, name: &str) -> Result<Option<String>> {
    let queue = queue(url, name)?;
    runtime::block_on(async {
        let bar = queue.bar().await?;
        // The oldest key of the name holds, whatever it was taken as,
        // unless a lost session's bar keeps it waiting.
        if let Some(entry) = queue.line().await?.into_iter().next() {
            if queue.holds_despite(bar.as_ref(), &entry) {
                return Ok(Some(entry.value));
            }
        }
        // `<session> <nonce> <value>`
        Ok(bar.and_then(|bar| Some(bar.value.splitn(3, ' ').nth(2)?.to_owned())))
    })
}

/// Who holds the lock `name` on the etcd cluster at `url` (its identity,
/// its fencing token, what is left of its lease) and how many wait.
/// Writes nothing.
///
/// # Errors
/// [`crate::Error::Config`] for a bad name or URL, [`crate::Error::Backend`]
/// if no member answers.
pub fn inspect(url: &str, name: &str) -> Result<LockState> {
    let queue = queue(url, name)?;
    runtime::block_on(async {
        let bar = queue.bar().await?;
        let line = queue.line().await?;
        let limit = line_limit(&queue, &line);
        let barred = line
            .first()
            .is_some_and(|first| !queue.holds_despite(bar.as_ref(), first));
        let held = if barred { 0 } else { limit as usize };
        let mut holders = Vec::new();
        for entry in line.iter().take(held) {
            holders.push(HolderState {
                holder: entry.value.clone(),
                fencing_token: entry.create_revision as u64,
                expires_in: queue.lease_left(entry.lease).await?,
                value: None,
            });
        }
        // A bar with no holder is a lost session's lock_delay running.
        let lock_delay = match bar {
            Some(bar) if holders.is_empty() => Some(queue.lease_left(bar.lease).await?),
            _ => None,
        };
        Ok(LockState {
            waiters: (line.len() - holders.len()) as u32,
            limit: (!line.is_empty()).then_some(limit),
            holders,
            lock_delay,
        })
    })
}

/// How many of `line` hold: the limit its oldest key was put with (1 for
/// a lock; a wait group's keys carry theirs).
fn line_limit(queue: &Queue, line: &[kv::Entry]) -> u32 {
    line.first()
        .and_then(|entry| queue.shape_of(&entry.key))
        .and_then(|shape| u32::try_from(shape.limit()).ok())
        .unwrap_or(1)
}

/// Removes the holder of `name`, whoever it is: its key is deleted (and a
/// session's bar with it, so no lock_delay follows), the first waiter
/// takes the lock, and the old holder turns unhealthy at its next
/// keep-alive (within ttl/3). Returns how many holders were removed.
///
/// # Errors
/// As [`inspect`].
pub fn force_release(url: &str, name: &str) -> Result<u32> {
    let queue = queue(url, name)?;
    runtime::block_on(async {
        let mut removed = 0;
        let bar = queue.bar().await?;
        let line = queue.line().await?;
        // Barred by a lost session, the first in line holds nothing: the
        // bar alone is lifted.
        let barred = line
            .first()
            .is_some_and(|first| !queue.holds_despite(bar.as_ref(), first));
        let held = if barred {
            0
        } else {
            line_limit(&queue, &line) as usize
        };
        for entry in line.iter().take(held) {
            if queue.remove(&entry.key, None).await? {
                removed += 1;
            }
        }
        queue
            .delete(&json!({"key": kv::encode(&queue.bar_key())}))
            .await?;
        Ok(removed)
    })
}
