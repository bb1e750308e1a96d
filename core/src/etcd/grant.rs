//! Taking a place in a line and giving it back, for a blocking or an async
//! caller: the key goes on this process's lease, the wait ends on the
//! caller's deadline, interrupt or drop, and a key left behind by a wait
//! given up is handed to the lease to delete. Shared by the lock and the
//! wait group.

use std::sync::Arc;
use std::time::Duration;

use super::leases::{Held, Lease, Leases};
use super::queue::{Queue, Taken};
use crate::error::{Error, Result};
use crate::runtime::{self, Ended};
use crate::wait::{Deadline, Interrupt};

/// A granted place: the key held, on the lease it rides on.
pub(crate) struct Grant {
    pub(crate) held: Arc<Held>,
    pub(crate) lease: Arc<Lease>,
}

/// Puts `key` (with `value`) in `queue`'s line on a lease of `leases` and
/// waits until it holds, until `deadline`. None when the deadline passed
/// first (or one attempt found every place taken): nothing stays queued.
pub(crate) fn take(
    queue: &Queue,
    leases: &Leases,
    key: &str,
    value: &str,
    deadline: Deadline,
    interrupted: Interrupt<'_>,
) -> Result<Option<Grant>> {
    let Some(one_attempt) = attempt(deadline) else {
        return Ok(None);
    };
    let until = if one_attempt { None } else { deadline.at() };
    let waiting = wait(queue, leases, key, value, one_attempt);
    match runtime::block_on_interruptibly(waiting, until, interrupted) {
        Ended::Done(taken) => taken,
        Ended::TimedOut => Ok(None),
        Ended::Interrupted => Err(Error::Interrupted(queue.what().to_owned())),
    }
}

/// [`take`] for an async caller. The wait runs on lockyard's runtime,
/// where the client's connections live; dropped meanwhile, it leaves
/// nothing held or queued.
pub(crate) async fn take_async(
    queue: Arc<Queue>,
    leases: Arc<Leases>,
    key: String,
    value: String,
    deadline: Deadline,
) -> Result<Option<Grant>> {
    let Some(one_attempt) = attempt(deadline) else {
        return Ok(None);
    };
    let until = if one_attempt { None } else { deadline.at() };
    let what = queue.what().to_owned();
    let delivered = runtime::on_runtime(&what, async move {
        let waiting = wait(&queue, &leases, &key, &value, one_attempt);
        let taken = match until {
            None => waiting.await,
            Some(at) => tokio::time::timeout_at(at.into(), waiting)
                .await
                .unwrap_or(Ok(None)),
        };
        // Unreceived (the caller went away as it was granted), the place
        // is given back as the delivery is dropped.
        taken.map(|grant| grant.map(|grant| Delivery(Some((queue, grant)))))
    })
    .await?;
    Ok(delivered.map(Delivery::open))
}

/// Whether a take with `deadline` makes one attempt only; None when its
/// deadline is spent and it makes none.
fn attempt(deadline: Deadline) -> Option<bool> {
    // A first run whose deadline already passed still makes its attempt.
    (!deadline.spent())
        .then(|| deadline.is_one_attempt() || deadline.left() == Some(Duration::ZERO))
}

/// The wait for a place, in the line or (`one_attempt`) at once. Dropped
/// midway, or failing, it hands a key it may have put to its lease to
/// delete.
async fn wait(
    queue: &Queue,
    leases: &Leases,
    key: &str,
    value: &str,
    one_attempt: bool,
) -> Result<Option<Grant>> {
    if one_attempt && queue.is_full().await? {
        return Ok(None);
    }
    let mut queued = Queued {
        queue,
        key,
        lease: None,
    };
    // A lease etcd forgot (revoked, or run out while nothing was held) is
    // found on the first put; one more try gets a new one.
    for _ in 0..2 {
        let lease = leases.live(queue.request_until()).await?;
        queued.lease = Some(lease.clone());
        match queue.take(key, value, &lease, one_attempt).await? {
            Taken::Held { revision, resent } => {
                if let Some(bars) = &lease.bars {
                    queue.put_bar(key, revision, bars).await?;
                }
                queued.lease = None;
                return Ok(Some(Grant {
                    held: lease.hold(key.to_owned(), revision, resent),
                    lease,
                }));
            }
            // One attempt that found the line full took its key out again.
            Taken::Busy { resent } => {
                queued.lease = None;
                if resent {
                    lease.stray(key.to_owned());
                }
                return Ok(None);
            }
            Taken::LeaseGone => continue,
        }
    }
    Err(two_leases_lost(queue))
}

/// A key a wait may have put: handed to its lease for deletion if the wait
/// ends without holding its place (given up, or failed).
struct Queued<'a> {
    queue: &'a Queue,
    key: &'a str,
    /// The lease the key went on, once asked for.
    lease: Option<Arc<Lease>>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.stray(self.key.to_owned());
            // A bar put just before (its answer lost, say) goes too.
            stray_bar(self.queue, &lease, self.key);
        }
    }
}

/// A place granted to an async caller, on its way there: dropped unopened,
/// it is given back in the background.
struct Delivery(Option<(Arc<Queue>, Grant)>);

impl Delivery {
    fn open(mut self) -> Grant {
        let (_, grant) = self.0.take().expect("a delivery is opened once");
        grant
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some((queue, grant)) = self.0.take() {
            give_back_in_background(queue, grant);
        }
    }
}

pub(crate) fn two_leases_lost(queue: &Queue) -> Error {
    Error::backend(
        queue.shown(),
        "granting a lease",
        "etcd lost two leases in a row as soon as they were granted",
    )
}

/// Deletes the grant's key if it is still the one taken; a delete that
/// gets no answer, or a key whose put may still land again, is left to the
/// lease's keep-alive task, which deletes it.
pub(crate) fn give_back(queue: &Queue, grant: &Grant) -> Result<bool> {
    runtime::block_on(leave(queue, grant))
}

/// [`give_back`] for an async caller, on lockyard's runtime; dropped
/// before it ends, the give-back runs on.
pub(crate) async fn give_back_async(queue: Arc<Queue>, grant: Grant) -> Result<bool> {
    let what = queue.what().to_owned();
    runtime::to_the_end(&what, async move { leave(&queue, &grant).await }).await
}

/// [`give_back`] that returns at once; an exiting process waits for it.
pub(crate) fn give_back_in_background(queue: Arc<Queue>, grant: Grant) {
    runtime::spawn_awaited(async move {
        // A loss is the lease's to report; the key is dealt with either way.
        let _ = leave(&queue, &grant).await;
    });
}

async fn leave(queue: &Queue, grant: &Grant) -> Result<bool> {
    let was_live = grant.held.health.is_healthy();
    let (key, revision) = (&grant.held.key, grant.held.revision);
    let lease_live = grant.lease.health.is_healthy();
    let left = queue.leave(key, revision, was_live, &grant.lease).await;
    if left.is_err() || grant.held.resent {
        grant.lease.stray(key.clone());
    }
    // A lease that may have run out leaves its bar standing (lock_delay).
    if left.is_err() && lease_live {
        stray_bar(queue, &grant.lease, key);
    }
    left
}

/// Deletes the bar of the holder `key` on the sweeps of its session's bar
/// lease, if it is still that grant's: kept alive with the session, it
/// would bar the name as long as the session lives.
fn stray_bar(queue: &Queue, lease: &Lease, key: &str) {
    if let (Some(bars), Some(value)) = (&lease.bars, queue.bar_value(key)) {
        bars.stray_if(queue.bar_key(), value);
    }
}
