//! The quorum read/write lock: dsync's `drwmutex.go` on N independent
//! Redis servers, with leases, refresh, health and fencing.
//!
//! An attempt asks every node at once and waits until a quorum granted, a
//! quorum became impossible, or the attempt's deadline passed (past it only
//! while too few answers are in to tell, see `attempt`). Without
//! quorum, everything granted is released (late grants by the tasks that
//! get them, see `fanout.rs`) and the next attempt follows after a jittered
//! backoff. A write needs a strict majority, n/2+1; a read ⌈n/2⌉: a write
//! set and a read set always share a node, and no node grants both, so a
//! read and a write can never both reach quorum.
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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::fanout::{ask_all, Interrupted, Round};
use super::node::{acquire, release, Grant, Mode, NetLocker, Reply, Request};
use super::tally::{read_quorum, write_quorum, Tally};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::identity::random_hex;
use crate::lease::Lease;
use crate::limits;
use crate::runtime;

/// Longest wait between retries of a denied attempt.
const BACKOFF_MAX: Duration = Duration::from_millis(100);
/// Longest wait between retries while too few nodes are reachable, and
/// between retries of an unlock a node did not answer: long enough not to
/// hammer a node that is coming back, short enough to notice it soon.
const UNREACHABLE_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Shortest attempt a tight user timeout still allows.
const MIN_ATTEMPT: Duration = Duration::from_millis(100);

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

/// How one attempt ended.
enum Attempt {
    Held(Hold),
    /// Denied by a quorum of answers, or cut by the caller's deadline.
    Busy,
    /// Every node was new: their guard ended, so ask again at once (a
    /// try-once on new nodes must not fail for that).
    Adopted,
    /// Fewer nodes than a quorum answered: worth retrying, they may be
    /// restarting.
    Unreachable(Error),
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
    sealed: Mutex<Option<u64>>,
    pub(crate) health: Arc<Health>,
    refresher: JoinHandle<()>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

impl Quorum {
    fn quorum(&self, mode: Mode) -> usize {
        match mode {
            Mode::Write => write_quorum(self.nodes.len()),
            Mode::Read => read_quorum(self.nodes.len()),
        }
    }

    fn describe(&self, mode: Mode) -> String {
        match mode {
            Mode::Write => format!("the write lock of {}", self.what),
            Mode::Read => format!("a read lock of {}", self.what),
        }
    }

    /// Waits up to `timeout` (None: forever, zero: one attempt) for a grant
    /// from a quorum. Ok(None) when the timeout ran out.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        timeout: Option<Duration>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Hold>> {
        let waited = self.wait_for_grant(mode, identity, timeout, interrupted);
        if mode == Mode::Write && !matches!(waited, Ok(Some(_))) {
            self.withdraw(identity);
        }
        waited
    }

    /// Repeats attempts until one gets a quorum. A round that missed it
    /// because too few nodes answered is repeated too (as dsync does):
    /// nodes restart, and a wait with a timeout (or none) should ride that
    /// out; a try-once (zero timeout) reports it at once, and a wait whose
    /// last attempt found too few nodes ends with that error, not a timeout.
    fn wait_for_grant(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        timeout: Option<Duration>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Hold>> {
        let give_up_at = limits::deadline(Instant::now(), limits::wait(timeout)?);
        let (mut attempt, mut adopted) = (0u32, false);
        loop {
            let mut pause = backoff(attempt, BACKOFF_MAX);
            let mut unreachable = None;
            match self.attempt(mode, identity, give_up_at, interrupted)? {
                Attempt::Held(hold) => return Ok(Some(hold)),
                Attempt::Adopted if !adopted => {
                    adopted = true;
                    continue;
                }
                Attempt::Busy | Attempt::Adopted => {}
                Attempt::Unreachable(e) if timeout.is_some_and(|t| t.is_zero()) => return Err(e),
                Attempt::Unreachable(e) => {
                    pause = backoff(attempt, UNREACHABLE_BACKOFF_MAX);
                    unreachable = Some(e);
                }
            }
            let now = Instant::now();
            let mut wake_at = now + pause;
            if let Some(at) = give_up_at {
                if now >= at {
                    return unreachable.map_or(Ok(None), Err);
                }
                wake_at = wake_at.min(at);
            }
            while Instant::now() < wake_at {
                if interrupted() {
                    return Err(Error::Interrupted(self.describe(mode)));
                }
                std::thread::sleep(wake_at.min(Instant::now() + POLL) - Instant::now());
            }
            attempt = attempt.saturating_add(1);
        }
    }

    fn attempt(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        give_up_at: Option<Instant>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Attempt> {
        let n = self.nodes.len();
        let quorum = self.quorum(mode);
        let request = self.request(mode, identity);
        let sent = Instant::now();
        // The lease is measured from here, on the clock that counts a suspend.
        let lease_start = Stamp::now();
        let mut deadline = sent + self.attempt_timeout;
        if let Some(at) = give_up_at {
            deadline = deadline.min(at.max(sent + MIN_ATTEMPT));
        }
        let round = Round::start(
            &self.nodes,
            0..n,
            self.request_timeout,
            Some(request.clone()),
            |node| acquire(node, request.clone()),
        );
        let outcome = round
            .wait(Some(deadline), interrupted, quorum)
            .and_then(|tally| {
                self.wait_on(
                    &round,
                    tally,
                    sent,
                    deadline,
                    give_up_at,
                    interrupted,
                    quorum,
                )
            });
        let Ok(tally) = outcome else {
            self.release_granted(&request, &round.close());
            return Err(Error::Interrupted(self.describe(mode)));
        };
        if tally.yes >= quorum {
            let candidate = round.granted().iter().map(|&(_, v)| v).max().unwrap_or(0);
            return Ok(Attempt::Held(self.hold(
                request,
                round,
                candidate,
                lease_start,
            )));
        }
        // Grants recorded from here on are released by their own tasks.
        self.release_granted(&request, &round.close());
        if let Some((node, theirs)) = round.other_nodes(&self.nodes) {
            return Err(self.other_node_list(&node, &theirs));
        }
        if tally.recovering == n {
            self.adopt_new_nodes();
            return Ok(Attempt::Adopted);
        }
        // Nodes that said no are up: a quorum of answers without a quorum
        // of grants is a busy lock, to wait for; fewer answers than a
        // quorum once every node answered or failed (refused, or silent
        // past its request timeout) means too few nodes are reachable to
        // ever grant it. Answers still pending here mean the caller's
        // deadline passed first: a timeout, like a denied attempt.
        if tally.pending == 0 && tally.answered() < quorum {
            return Ok(Attempt::Unreachable(
                self.too_few_answered(mode, tally, &round),
            ));
        }
        Ok(Attempt::Busy)
    }

    /// Every node is inside its restart guard: none remembers a grant, so
    /// they are new (or all lost their data together, when no lease is
    /// left to protect either): they may grant at once (`adopt.lua`).
    fn adopt_new_nodes(&self) {
        let n = self.nodes.len();
        self.confirm(0..n, write_quorum(n), |node| node.adopt());
    }

    fn other_node_list(&self, node: &str, theirs: &str) -> Error {
        Error::config(format!(
            "{}: this client lists {} servers (fingerprint {}), but a holder of \
             this name on {node} listed {} (fingerprint {theirs}); every client \
             of a quorum lock must use the same list of servers, or they do \
             not exclude each other",
            self.what,
            self.nodes.len(),
            self.fingerprint,
            theirs.split('-').next().unwrap_or("other servers"),
        ))
    }

    /// Waits on past the attempt's deadline when the answers in cannot
    /// tell what the round means yet.
    #[allow(clippy::too_many_arguments)]
    fn wait_on(
        &self,
        round: &Round,
        tally: Tally,
        sent: Instant,
        deadline: Instant,
        give_up_at: Option<Instant>,
        interrupted: &dyn Fn() -> bool,
        quorum: usize,
    ) -> std::result::Result<Tally, Interrupted> {
        if tally.yes >= quorum || tally.pending == 0 {
            return Ok(tally);
        }
        let until = give_up_at.map(|at| at.max(deadline));
        if tally.answered() < quorum {
            // Too few answers in to tell a busy lock from nodes that are
            // down: answers on their way are from nodes not yet known to
            // be down (a slow link, a first connection), so wait on for
            // them. Each request fails by its own timeout at the latest;
            // the caller's deadline, if it comes first, makes the attempt
            // a timeout, never "too few reachable".
            return round.wait(until, interrupted, quorum);
        }
        if tally.recovering == tally.answered() {
            // Every answer so far from a node in its restart guard: the
            // nodes may all be new, which only the last answers can tell
            // (see `adopt_new_nodes`). Worth a wait on first contact.
            let first_contact = sent + self.request_timeout;
            let until = until.map_or(first_contact, |at| at.min(first_contact));
            return round.wait(Some(until), interrupted, usize::MAX);
        }
        Ok(tally)
    }

    /// A fresh uid per attempt; the waiting mark is the holder's own.
    fn request(&self, mode: Mode, identity: &str) -> Arc<Request> {
        Arc::new(Request {
            resource: self.resource.clone(),
            uid: format!("{identity}#{}", random_hex(6)),
            waiter: identity.to_owned(),
            mode,
            ttl_ms: self.lease.ttl_ms(),
            waiting_ms: self.waiting_mark.as_millis() as u64,
            fingerprint: self.fingerprint.clone(),
        })
    }

    /// A writer that gave up takes its "writer waiting" mark back, so
    /// readers need not wait for it to lapse. Best effort, not awaited.
    fn withdraw(&self, identity: &str) {
        let request = self.request(Mode::Write, identity);
        self.send(0..self.nodes.len(), |node| node.unlock(request.clone()));
    }

    fn too_few_answered(&self, mode: Mode, tally: Tally, round: &Round) -> Error {
        let n = self.nodes.len();
        let mut message = format!(
            "only {} of {n} nodes answered, {} needed",
            tally.answered(),
            self.quorum(mode)
        );
        if let Some(failure) = round.first_failure() {
            message.push_str(&format!("; first failure: {failure}"));
        }
        Error::backend(&format!("{n} nodes"), &self.describe(mode), message)
    }

    /// Releases `granted` without waiting: the requests end on their own.
    fn release_granted(&self, request: &Arc<Request>, granted: &[(usize, u64)]) {
        self.send(granted.iter().map(|&(i, _)| i), |node| {
            release(node, request.clone())
        });
    }

    /// Sends `call` to `targets` and lets the requests finish on their own.
    fn send(
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
    fn confirm(
        &self,
        targets: impl IntoIterator<Item = usize>,
        quorum: usize,
        call: impl Fn(Arc<dyn NetLocker>) -> Reply<bool>,
    ) -> (usize, Arc<Round>) {
        let round = Round::start(&self.nodes, targets, self.request_timeout, None, |node| {
            as_answer(call(node))
        });
        let deadline = Instant::now() + self.attempt_timeout;
        match round.wait(Some(deadline), &|| false, quorum) {
            Ok(tally) => (tally.yes, round),
            Err(_) => unreachable!("never interrupted"),
        }
    }

    fn hold(
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
            sealed: Mutex::new(None),
            health,
            refresher,
        }
    }

    /// Gives the grants back; Ok(false) when a quorum of them had already
    /// been lost (what the lock protected may have been touched meanwhile).
    pub(crate) fn release(&self, hold: &Hold) -> Result<bool> {
        hold.refresher.abort();
        let granted = hold.round.close();
        let quorum = self.quorum(hold.mode);
        let (released, round) = self.confirm(granted.iter().map(|&(i, _)| i), quorum, |node| {
            release(node, hold.request.clone())
        });
        self.retry_release(hold, round);
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
        if hold.mode == Mode::Read {
            return Ok(None);
        }
        let mut sealed = hold.sealed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(token) = *sealed {
            return Ok(Some(token));
        }
        hold.health.check(&self.what)?;
        let quorum = self.quorum(Mode::Write);
        let token = hold.candidate;
        let targets = hold.round.granted().into_iter().map(|(i, _)| i);
        let (recorded, _) = self.confirm(targets, quorum, |node| {
            node.seal(hold.request.clone(), token)
        });
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

const POLL: Duration = Duration::from_millis(50);

/// Equal jitter: half of an exponentially growing step, plus a random part
/// of the other half, so contenders that collided spread apart.
fn backoff(attempt: u32, max: Duration) -> Duration {
    let step = (Duration::from_millis(2) * 2u32.pow(attempt.min(10))).min(max);
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).expect("the OS random source failed");
    let fraction = f64::from(u32::from_le_bytes(random)) / f64::from(u32::MAX);
    step / 2 + step.mul_f64(fraction / 2.0)
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
    let mut failures = 0;
    loop {
        tokio::time::sleep(lease.refresh_every).await;
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
            failures = 0;
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
        failures += 1;
        let error = last_error.map(|e| e.to_string()).unwrap_or_default();
        log::warn!(
            "refreshing {} reached only {live} nodes ({failures}/{}): {error}",
            quorum.what,
            lease.max_refresh_fails
        );
        if failures >= lease.max_refresh_fails {
            health.mark_lost(format!(
                "{failures} refreshes in a row reached fewer than {needed} nodes, the last with: {error}"
            ));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_stays_bounded() {
        for attempt in 0..20 {
            let wait = backoff(attempt, BACKOFF_MAX);
            assert!(
                wait >= Duration::from_millis(1) && wait <= BACKOFF_MAX,
                "{wait:?}"
            );
        }
        assert!(backoff(0, BACKOFF_MAX) <= Duration::from_millis(2));
        assert!(backoff(10, BACKOFF_MAX) >= BACKOFF_MAX / 2);
        assert!(backoff(20, UNREACHABLE_BACKOFF_MAX) >= UNREACHABLE_BACKOFF_MAX / 2);
    }
}
