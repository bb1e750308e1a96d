//! Taking a place in a line from a blocking caller: the key goes on this
//! process's lease, the wait ends on the caller's deadline or interrupt,
//! and a key left behind by a wait given up is handed to the lease to
//! delete. Shared by the lock and the wait group.

use std::sync::{Arc, Mutex};
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
    if deadline.spent() {
        return Ok(None);
    }
    // A first run whose deadline already passed still makes its attempt.
    let one_attempt = deadline.is_one_attempt() || deadline.left() == Some(Duration::ZERO);
    // The lease the key went on, once asked for: where a key left by a
    // wait given up is handed for deletion.
    let queued: Mutex<Option<Arc<Lease>>> = Mutex::new(None);
    let taking = async {
        if one_attempt && queue.is_full().await? {
            return Ok(None);
        }
        // A lease etcd forgot (revoked, or run out while nothing was held)
        // is found on the first put; one more try gets a new one.
        for _ in 0..2 {
            let lease = leases.live(queue.request_until()).await?;
            *queued.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease.clone());
            match queue.take(key, value, &lease, one_attempt).await? {
                Taken::Held { revision, resent } => {
                    if let Some(bars) = &lease.bars {
                        queue.put_bar(key, revision, bars).await?;
                    }
                    return Ok(Some((lease, revision, resent)));
                }
                Taken::Busy { resent } => {
                    if resent {
                        lease.stray(key.to_owned());
                    }
                    return Ok(None);
                }
                Taken::LeaseGone => continue,
            }
        }
        Err(two_leases_lost(queue))
    };
    let until = if one_attempt { None } else { deadline.at() };
    let ended = runtime::block_on_interruptibly(taking, until, interrupted);
    let given_up = || {
        if let Some(lease) = queued.lock().unwrap_or_else(|e| e.into_inner()).take() {
            lease.stray(key.to_owned());
            // A bar put just before (its answer lost, say) goes too.
            stray_bar(queue, &lease, key);
        }
    };
    match ended {
        Ended::Done(Ok(Some((lease, revision, resent)))) => Ok(Some(Grant {
            held: lease.hold(key.to_owned(), revision, resent),
            lease,
        })),
        // One attempt that found the line full took its key out again.
        Ended::Done(Ok(None)) => Ok(None),
        Ended::TimedOut => {
            given_up();
            Ok(None)
        }
        Ended::Done(Err(e)) => {
            given_up();
            Err(e)
        }
        Ended::Interrupted => {
            given_up();
            Err(Error::Interrupted(queue.what().to_owned()))
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
    let was_live = grant.held.health.is_healthy();
    let (key, revision) = (&grant.held.key, grant.held.revision);
    let lease_live = grant.lease.health.is_healthy();
    let left = runtime::block_on(queue.leave(key, revision, was_live, &grant.lease));
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
