//! The engine of the quorum read/write lock, dsync's `drwmutex.go` on N
//! independent Redis servers: what every hold of one name shares, and a
//! hold's life after a quorum granted it (taking it is `acquire.rs`):
//! refreshed in the background, fenced, and given back.
//!
//! Fencing: every write grant on a node returns that node's next fencing
//! value, `max(last + 1, server time in µs)`. The holder's token is the max
//! over the quorum that granted it, and is *sealed* before it is first
//! handed out: written back to a write quorum of nodes, each of which
//! still holds the grant (so no later writer has been granted there yet).
//! Any later writer's quorum shares a node X with that sealed set, and X
//! granted the later writer after the seal, so X's value for it, and with
//! it the later token, is larger. Tokens never read are never sealed, and
//! need not be: nobody fenced anything with them.
//!
//! That needs X to remember the seal whenever the later writer comes, after
//! any idle time: the server-time seed cannot stand in for a forgotten
//! value, as node clocks may differ by any amount (a token from a node
//! hours ahead stays above the other nodes' clocks for those hours). So a
//! node's last value never expires; it is one counter per node for every
//! name (`node.rs`), so nothing accumulates as names come and go. Only a
//! node that loses its data (restarted without persistence) falls back to
//! its own clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::backoff::{backoff, UNREACHABLE_BACKOFF_MAX};
use super::fanout::{ask_all, Round, POLL};
use super::node::{release, Grant, Mode, NetLocker, Reply, Request};
use super::tally::{read_quorum, write_quorum};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::lease::{KeepAlive, Lease, Verdict};
use crate::runtime;

/// Everything the attempts and the refreshers share.
pub(crate) struct Quorum {
    pub(crate) nodes: Vec<Arc<dyn NetLocker>>,
    pub(crate) resource: String,
    pub(crate) lease: Lease,
    /// How long one attempt waits for answers.
    pub(crate) attempt_timeout: Duration,
    /// How long one request may run; bounds every task of the fan-out.
    pub(crate) request_timeout: Duration,
    /// How long a waiting writer's mark keeps new readers out.
    pub(crate) waiting_mark: Duration,
    /// "rw lock \"index\"", for messages.
    pub(crate) what: String,
    /// The node list, as every grant records it (see `lock.rs`).
    pub(crate) fingerprint: Arc<str>,
}

/// One held read or write lock.
pub(crate) struct Hold {
    pub(crate) mode: Mode,
    request: Arc<Request>,
    /// The acquire round, kept open: grants that arrive after quorum join
    /// the hold and are refreshed and released with it.
    round: Arc<Round>,
    /// Max fencing value of the granting quorum; the token once sealed.
    candidate: u64,
    /// Held while the token is being sealed: one seal per hold.
    sealed: tokio::sync::Mutex<Option<u64>>,
    pub(crate) health: Arc<Health>,
    refresher: JoinHandle<()>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

impl Quorum {
    /// How many grants a hold in `mode` needs.
    pub(crate) fn quorum(&self, mode: Mode) -> usize {
        match mode {
            Mode::Write => write_quorum(self.nodes.len()),
            Mode::Read => read_quorum(self.nodes.len()),
        }
    }

    /// Gives back what `call` releases on `targets`, letting the requests
    /// finish on their own; an exiting process waits for them.
    pub(crate) fn give_back(
        &self,
        targets: impl IntoIterator<Item = usize>,
        call: impl Fn(Arc<dyn NetLocker>) -> Reply<bool>,
    ) {
        Round::give_back(&self.nodes, targets, self.request_timeout, |node| {
            as_answer(call(node))
        });
    }

    /// Sends `call` to `targets` and lets the requests finish on their own.
    pub(crate) fn send(
        &self,
        targets: impl IntoIterator<Item = usize>,
        call: impl Fn(Arc<dyn NetLocker>) -> Reply<bool>,
    ) {
        Round::start(&self.nodes, targets, self.request_timeout, None, |node| {
            as_answer(call(node))
        });
    }

    /// Sends `call` to `targets` and waits, at most one attempt's time,
    /// until `quorum` of them said yes; returns how many did, and the round
    /// (whose requests go on).
    pub(crate) async fn confirm(
        &self,
        targets: impl IntoIterator<Item = usize>,
        quorum: usize,
        call: impl Fn(Arc<dyn NetLocker>) -> Reply<bool>,
    ) -> (usize, Arc<Round>) {
        let round = Round::start(&self.nodes, targets, self.request_timeout, None, |node| {
            as_answer(call(node))
        });
        let deadline = Instant::now() + self.attempt_timeout;
        let tally = round.wait(Some(deadline), quorum).await;
        (tally.yes, round)
    }

    /// A hold of what `round` granted, kept alive from now on by its own
    /// refresher.
    pub(crate) fn hold(
        self: &Arc<Self>,
        request: Arc<Request>,
        round: Arc<Round>,
        candidate: u64,
        sent: Stamp,
    ) -> Hold {
        let health = Arc::new(Health::new(sent + self.lease.ttl));
        let refresher = runtime::spawn(refresh_loop(
            self.clone(),
            request.clone(),
            round.clone(),
            health.clone(),
        ));
        Hold {
            mode: request.mode,
            request,
            round,
            candidate,
            sealed: tokio::sync::Mutex::new(None),
            health,
            refresher,
        }
    }

    /// Gives the grants back; Ok(false) when a quorum of them had already
    /// been lost (what the lock protected may have been touched meanwhile).
    pub(crate) fn release(&self, hold: &Hold) -> Result<bool> {
        runtime::block_on(self.release_async(hold))
    }

    /// [`Quorum::release`] for an async caller. The grants are closed at
    /// its first poll: dropped after that, the nodes that it did not hear
    /// from are asked again in the background.
    pub(crate) async fn release_async(&self, hold: &Hold) -> Result<bool> {
        hold.refresher.abort();
        let granted = hold.round.close();
        let quorum = self.quorum(hold.mode);
        let targets = granted.iter().map(|&(i, _)| i);
        let releasing = Round::give_back(&self.nodes, targets, self.request_timeout, |node| {
            as_answer(release(node, hold.request.clone()))
        });
        let retry = RetryRelease {
            quorum: self,
            hold,
            round: releasing.clone(),
        };
        let deadline = Instant::now() + self.attempt_timeout;
        let released = releasing.wait(Some(deadline), quorum).await.yes;
        if released >= quorum {
            // Free: the nodes still to answer are asked again, but an
            // exiting process need not wait for a node gone silent.
            releasing.let_exit();
        }
        drop(retry);
        Ok(released >= quorum)
    }

    /// Gives back, in the background, the grants of nodes that did not
    /// answer the release: otherwise the next holder waits out their whole
    /// TTL. Retried until each node answered or the lease ran out (the
    /// grant has expired by then); the caller does not wait.
    fn retry_release(&self, hold: &Hold, round: Arc<Round>) {
        runtime::spawn(release_missed(
            self.nodes.clone(),
            hold.request.clone(),
            round,
            self.request_timeout,
            hold.health.valid_until(),
        ));
    }

    /// The write hold's fencing token, sealed on a write quorum first (see
    /// the module docs). Read holds have none.
    pub(crate) fn fencing_token(&self, hold: &Hold) -> Result<Option<u64>> {
        runtime::block_on(self.fencing_token_async(hold))
    }

    /// [`Quorum::fencing_token`] for an async caller. Dropped before the
    /// seal is confirmed, the token stays unsealed (and unread).
    pub(crate) async fn fencing_token_async(&self, hold: &Hold) -> Result<Option<u64>> {
        if hold.mode == Mode::Read {
            return Ok(None);
        }
        let mut sealed = hold.sealed.lock().await;
        if let Some(token) = *sealed {
            return Ok(Some(token));
        }
        hold.health.check(&self.what)?;
        let quorum = self.quorum(Mode::Write);
        let token = hold.candidate;
        let targets = hold.round.granted().into_iter().map(|(i, _)| i);
        let (recorded, _) = self
            .confirm(targets, quorum, |node| {
                node.seal(hold.request.clone(), token)
            })
            .await;
        if recorded < quorum {
            return Err(Error::LockUnhealthy {
                what: self.what.clone(),
                reason: format!(
                    "its fencing token could be recorded on only {recorded} nodes, {quorum} needed"
                ),
            });
        }
        *sealed = Some(token);
        Ok(Some(token))
    }
}

/// Asks again, in the background, the nodes a release did not hear from,
/// once the release stops listening (done, or dropped).
struct RetryRelease<'a> {
    quorum: &'a Quorum,
    hold: &'a Hold,
    round: Arc<Round>,
}

impl Drop for RetryRelease<'_> {
    fn drop(&mut self) {
        self.quorum.retry_release(self.hold, self.round.clone());
    }
}

/// A yes/no request as a round answer.
fn as_answer(reply: Reply<bool>) -> Reply<Grant> {
    Box::pin(async move {
        Ok(match reply.await? {
            true => Grant::Yes(0),
            false => Grant::No,
        })
    })
}

/// The background part of [`Quorum::retry_release`].
async fn release_missed(
    nodes: Vec<Arc<dyn NetLocker>>,
    request: Arc<Request>,
    round: Arc<Round>,
    request_timeout: Duration,
    lease_end: Stamp,
) {
    // Retry only once every first request answered or timed out (and a
    // connection that went silent under it was dropped); usually that is
    // at once, and the task ends.
    let settle_by = Instant::now() + request_timeout;
    let mut look = Duration::from_millis(5);
    while round.pending() > 0 && Instant::now() < settle_by {
        tokio::time::sleep(look).await;
        look = (look * 2).min(POLL);
    }
    let mut left = round.unanswered();
    let mut attempt = 0;
    while !left.is_empty() && !lease_end.has_passed() {
        if attempt > 0 {
            tokio::time::sleep(backoff(attempt, UNREACHABLE_BACKOFF_MAX)).await;
        }
        let outcomes = ask_all(&nodes, &left, request_timeout, |node| {
            release(node, request.clone())
        })
        .await;
        left = outcomes
            .into_iter()
            .filter_map(|(i, outcome)| outcome.is_err().then_some(i))
            .collect();
        attempt += 1;
    }
}

/// Keeps a hold's grants alive until aborted. A refresh that leaves fewer
/// than a quorum of live grants marks the hold lost at once; a quorum that
/// could not be asked counts as a transient failure, and
/// `max_refresh_fails` of those in a row mark it lost too.
async fn refresh_loop(
    quorum: Arc<Quorum>,
    request: Arc<Request>,
    round: Arc<Round>,
    health: Arc<Health>,
) {
    let lease = &quorum.lease;
    let needed = quorum.quorum(request.mode);
    let mut keep = KeepAlive::new(lease);
    loop {
        tokio::time::sleep(keep.next_try(None)).await;
        let sent = Stamp::now();
        let targets: Vec<usize> = round.granted().iter().map(|&(i, _)| i).collect();
        let outcomes = ask_all(&quorum.nodes, &targets, quorum.request_timeout, |node| {
            node.refresh(request.clone())
        })
        .await;
        let (mut live, mut unknown, mut last_error) = (0, 0, None);
        for (index, outcome) in outcomes {
            match outcome {
                Ok(true) => live += 1,
                Ok(false) => round.forget(index),
                Err(e) => {
                    unknown += 1;
                    last_error = Some(e);
                }
            }
        }
        if live >= needed {
            keep.succeeded();
            health.extend(sent + lease.ttl);
            continue;
        }
        if live + unknown < needed {
            let reason = format!(
                "only {live} of {} nodes still hold its grant, {needed} needed",
                quorum.nodes.len()
            );
            log::warn!("{} lost: {reason}", quorum.what);
            health.mark_lost(reason);
            return;
        }
        let error = last_error.map(|e| e.to_string()).unwrap_or_default();
        let verdict = keep.failed_as(&format!("reached fewer than {needed} nodes"), &error);
        log::warn!(
            "refreshing {} reached only {live} nodes ({}): {error}",
            quorum.what,
            keep.tally()
        );
        if let Verdict::Exhausted(reason) = verdict {
            health.mark_lost(reason);
            return;
        }
    }
}

impl crate::holds::Held for Hold {
    fn health(&self) -> &Health {
        &self.health
    }
}
