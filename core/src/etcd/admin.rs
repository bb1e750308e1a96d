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

/// The identity stored by the current holder of the lock `name`, or None
/// when nobody holds it.
///
/// # Errors
/// [`crate::Error::Config`] for a bad name or URL, [`crate::Error::Backend`] if no member
/// answers.
pub fn holder(url: &str, name: &str) -> Result<Option<String>> {
    // The oldest key of the name holds, whatever it was taken as.
    let line = runtime::block_on(queue(url, name)?.line())?;
    Ok(line.into_iter().next().map(|entry| entry.value))
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
        let line = queue.line().await?;
        let limit = line_limit(&queue, &line);
        let mut holders = Vec::new();
        for entry in line.iter().take(limit as usize) {
            holders.push(HolderState {
                holder: entry.value.clone(),
                fencing_token: entry.create_revision as u64,
                expires_in: queue.lease_left(entry.lease).await?,
                value: None,
            });
        }
        Ok(LockState {
            waiters: (line.len() - holders.len()) as u32,
            limit: (!line.is_empty()).then_some(limit),
            holders,
            lock_delay: None,
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

/// Removes the holder of `name`, whoever it is: its key is deleted, the
/// first waiter takes the lock, and the old holder turns unhealthy at its
/// next keep-alive (within ttl/3). Returns how many holders were removed.
///
/// # Errors
/// As [`inspect`].
pub fn force_release(url: &str, name: &str) -> Result<u32> {
    let queue = queue(url, name)?;
    runtime::block_on(async {
        let mut removed = 0;
        let line = queue.line().await?;
        for entry in line.iter().take(line_limit(&queue, &line) as usize) {
            let delete = json!({"key": kv::encode(&entry.key)});
            let answer = queue.delete(&delete).await?;
            removed += kv::number(&answer["deleted"]) as u32;
        }
        Ok(removed)
    })
}
