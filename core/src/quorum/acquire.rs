//! Taking the quorum read/write lock.
//!
//! An attempt asks every node at once and waits until a quorum granted, a
//! quorum became impossible, or the attempt's deadline passed (past it only
//! while too few answers are in to tell, see `attempt`). Without
//! quorum, everything granted is released (late grants by the tasks that
//! get them, see `fanout.rs`) and the next attempt follows after a jittered
//! backoff. A write needs a strict majority, n/2+1; a read ⌈n/2⌉: a write
//! set and a read set always share a node, and no node grants both, so a
//! read and a write can never both reach quorum.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backoff::{backoff, BACKOFF_MAX, UNREACHABLE_BACKOFF_MAX};
use super::engine::{Hold, Quorum};
use super::fanout::Round;
use super::node::{acquire, release, Mode, Request};
use super::tally::{write_quorum, Tally};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::identity::random_hex;
use crate::wait::Deadline;

/// Shortest attempt a tight user timeout still allows.
const MIN_ATTEMPT: Duration = Duration::from_millis(100);

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

impl Quorum {
    /// The lock in `mode`, for messages.
    pub(crate) fn describe(&self, mode: Mode) -> String {
        match mode {
            Mode::Write => format!("the write lock of {}", self.what),
            Mode::Read => format!("a read lock of {}", self.what),
        }
    }

    /// Waits until `deadline` (a zero timeout: one attempt) for a grant
    /// from a quorum. Ok(None) when the deadline passed. Dropped before it
    /// ends, it leaves nothing granted: the open attempt's grants are
    /// released, late ones by the tasks that get them.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        deadline: Deadline,
    ) -> Result<Option<Hold>> {
        let mut waiting = Waiting {
            quorum: self,
            identity,
            armed: mode == Mode::Write,
        };
        let waited = self.wait_for_grant(mode, identity, deadline).await;
        if matches!(waited, Ok(Some(_))) {
            waiting.armed = false;
        }
        waited
    }

    /// Repeats attempts until one gets a quorum. A round that missed it
    /// because too few nodes answered is repeated too (as dsync does):
    /// nodes restart, and a wait with a timeout (or none) should ride that
    /// out; a try-once (zero timeout) reports it at once, and a wait whose
    /// last attempt found too few nodes ends with that error, not a timeout.
    async fn wait_for_grant(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        deadline: Deadline,
    ) -> Result<Option<Hold>> {
        if deadline.check()?.spent() {
            return Ok(None);
        }
        let give_up_at = deadline.at();
        let (mut attempt, mut adopted) = (0u32, false);
        loop {
            let mut pause = backoff(attempt, BACKOFF_MAX);
            let mut unreachable = None;
            match self.attempt(mode, identity, give_up_at).await? {
                Attempt::Held(hold) => return Ok(Some(hold)),
                Attempt::Adopted if !adopted => {
                    adopted = true;
                    continue;
                }
                Attempt::Busy | Attempt::Adopted => {}
                Attempt::Unreachable(e) if deadline.is_one_attempt() => return Err(e),
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
            tokio::time::sleep_until(wake_at.into()).await;
            attempt = attempt.saturating_add(1);
        }
    }

    async fn attempt(
        self: &Arc<Self>,
        mode: Mode,
        identity: &str,
        give_up_at: Option<Instant>,
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
        // Gives back what the round granted unless it becomes the hold,
        // however the attempt ends: dropped midway too.
        let mut open = OpenRound {
            quorum: self,
            request: request.clone(),
            round: round.clone(),
            armed: true,
        };
        let tally = round.wait(Some(deadline), quorum).await;
        let tally = self
            .wait_on(&round, tally, sent, deadline, give_up_at, quorum)
            .await;
        if tally.yes >= quorum {
            open.armed = false;
            let candidate = round.granted().iter().map(|&(_, v)| v).max().unwrap_or(0);
            return Ok(Attempt::Held(self.hold(
                request,
                round,
                candidate,
                lease_start,
            )));
        }
        // Grants recorded from here on are released by their own tasks.
        drop(open);
        if let Some((node, theirs)) = round.other_nodes(&self.nodes) {
            return Err(self.other_node_list(&node, &theirs));
        }
        if tally.recovering == n {
            self.adopt_new_nodes().await;
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
    async fn adopt_new_nodes(&self) {
        let n = self.nodes.len();
        self.confirm(0..n, write_quorum(n), |node| node.adopt())
            .await;
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
    async fn wait_on(
        &self,
        round: &Round,
        tally: Tally,
        sent: Instant,
        deadline: Instant,
        give_up_at: Option<Instant>,
        quorum: usize,
    ) -> Tally {
        if tally.yes >= quorum || tally.pending == 0 {
            return tally;
        }
        let until = give_up_at.map(|at| at.max(deadline));
        if tally.answered() < quorum {
            // Too few answers in to tell a busy lock from nodes that are
            // down: answers on their way are from nodes not yet known to
            // be down (a slow link, a first connection), so wait on for
            // them. Each request fails by its own timeout at the latest;
            // the caller's deadline, if it comes first, makes the attempt
            // a timeout, never "too few reachable".
            return round.wait(until, quorum).await;
        }
        if tally.recovering == tally.answered() {
            // Every answer so far from a node in its restart guard: the
            // nodes may all be new, which only the last answers can tell
            // (see `adopt_new_nodes`). Worth a wait on first contact.
            let first_contact = sent + self.request_timeout;
            let until = until.map_or(first_contact, |at| at.min(first_contact));
            return round.wait(Some(until), usize::MAX).await;
        }
        tally
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

    /// Takes a writer's "writer waiting" mark back (see [`Waiting`]).
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
        let (server, operation) = (format!("{n} nodes"), self.describe(mode));
        // A quorum may answer later if enough of the failed nodes only
        // failed for now; nodes that reject us for good will not.
        if tally.answered() + round.transient_failures() >= self.quorum(mode) {
            Error::backend_transient(&server, &operation, message)
        } else {
            Error::backend(&server, &operation, message)
        }
    }

    /// Releases `granted` without waiting: the requests end on their own.
    fn release_granted(&self, request: &Arc<Request>, granted: &[(usize, u64)]) {
        self.give_back(granted.iter().map(|&(i, _)| i), |node| {
            release(node, request.clone())
        });
    }
}

/// A writer's wait under way: however it ends without the lock (given up,
/// failed, dropped), it takes its "writer waiting" mark back, so readers
/// need not wait for the mark to lapse. Best effort, not awaited.
struct Waiting<'a> {
    quorum: &'a Quorum,
    identity: &'a str,
    armed: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.quorum.withdraw(self.identity);
        }
    }
}

/// An attempt's round that has not become a hold: dropped, it is closed
/// and what it granted so far is given back.
struct OpenRound<'a> {
    quorum: &'a Quorum,
    request: Arc<Request>,
    round: Arc<Round>,
    armed: bool,
}

impl Drop for OpenRound<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.quorum
                .release_granted(&self.request, &self.round.close());
        }
    }
}
