//! Parallel requests to every node, collected by a caller that may stop
//! listening at any time, without leaks (source 003).
//!
//! Exactly one side decides when a round ends: the caller, by closing it.
//! Each request runs as its own task on the internal runtime, bounded by a
//! request timeout, and on finishing records its answer in the round under
//! the round's mutex; recording never blocks on the caller, so a task never
//! waits for a consumer that has left. Closing happens under the same
//! mutex, so every grant is undone by exactly one side: a grant recorded
//! before the close is the caller's to release, a grant (or an answer
//! that may hide one) recorded after it is released by its own task.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::node::{release, Grant, NetLocker, Reply, Request};
use super::tally::{granted, tally, Answer, Tally};
use crate::error::{Error, Result};
use crate::runtime;

/// Longest sleep between two looks at the answers still on their way.
pub(crate) const POLL: Duration = Duration::from_millis(50);

pub(crate) struct Round {
    state: Mutex<State>,
    changed: Notify,
    /// For acquire rounds: what to release when a grant comes too late.
    undo: Option<Arc<Request>>,
}

struct State {
    answers: Vec<Answer>,
    closed: bool,
    /// The yes count the caller waits for: answers that cannot change its
    /// decision do not wake it (on a small machine every wake-up counts).
    quorum: usize,
    /// Keeps an exiting process waiting for a give-back's answers.
    exit_hold: Option<runtime::Background>,
}

impl Round {
    /// Sends `call` to `targets` (indexes into `nodes`) in parallel. An
    /// acquire round passes `undo`: then a grant recorded after the round
    /// closed, or a failed request that may have been granted anyway, is
    /// released by the task that got it.
    pub(crate) fn start(
        nodes: &[Arc<dyn NetLocker>],
        targets: impl IntoIterator<Item = usize>,
        request_timeout: Duration,
        undo: Option<Arc<Request>>,
        call: impl Fn(Arc<dyn NetLocker>) -> Reply<Grant>,
    ) -> Arc<Round> {
        Round::begin(nodes, targets, request_timeout, undo, call, false)
    }

    /// [`Round::start`] for a give-back (a release): an exiting process
    /// waits until every node answered or failed (each within the request
    /// timeout), unless [`Round::let_exit`] says the rest does not matter.
    /// A grant given back this way must reach a slow node, not die with
    /// the process and block others for its ttl.
    pub(crate) fn give_back(
        nodes: &[Arc<dyn NetLocker>],
        targets: impl IntoIterator<Item = usize>,
        request_timeout: Duration,
        call: impl Fn(Arc<dyn NetLocker>) -> Reply<Grant>,
    ) -> Arc<Round> {
        Round::begin(nodes, targets, request_timeout, None, call, true)
    }

    /// An exiting process need not wait for this round's answers still
    /// on their way (a release that reached a quorum: the lock is free).
    pub(crate) fn let_exit(&self) {
        let exit_hold = self.lock().exit_hold.take();
        drop(exit_hold);
    }

    fn begin(
        nodes: &[Arc<dyn NetLocker>],
        targets: impl IntoIterator<Item = usize>,
        request_timeout: Duration,
        undo: Option<Arc<Request>>,
        call: impl Fn(Arc<dyn NetLocker>) -> Reply<Grant>,
        exit_waits: bool,
    ) -> Arc<Round> {
        let mut answers: Vec<Answer> = nodes.iter().map(|_| Answer::NotAsked).collect();
        let targets: Vec<usize> = targets.into_iter().collect();
        for &index in &targets {
            answers[index] = Answer::Pending;
        }
        let round = Arc::new(Round {
            state: Mutex::new(State {
                answers,
                closed: false,
                quorum: usize::MAX,
                exit_hold: (exit_waits && !targets.is_empty()).then(runtime::Background::started),
            }),
            changed: Notify::new(),
            undo,
        });
        let requests: Vec<_> = targets
            .into_iter()
            .map(|index| (index, nodes[index].clone(), call(nodes[index].clone())))
            .collect();
        let spawner = round.clone();
        // One hop to the runtime thread, which then spawns locally.
        runtime::spawn(async move {
            for (index, node, reply) in requests {
                tokio::spawn(spawner.clone().ask(index, node, reply, request_timeout));
            }
        });
        round
    }

    async fn ask(
        self: Arc<Self>,
        index: usize,
        node: Arc<dyn NetLocker>,
        reply: Reply<Grant>,
        request_timeout: Duration,
    ) {
        let answer = match tokio::time::timeout(request_timeout, reply).await {
            Ok(Ok(Grant::Yes(value))) => Answer::Yes(value),
            Ok(Ok(Grant::No)) => Answer::No,
            Ok(Ok(Grant::Recovering)) => Answer::Recovering,
            Ok(Ok(Grant::OtherNodes(theirs))) => Answer::OtherNodes(theirs),
            Ok(Err(e)) => Answer::Failed(e),
            Err(_) => Answer::Failed(Error::backend_transient(
                node.name(),
                "request",
                format!("no answer within {request_timeout:?}"),
            )),
        };
        if let Some(request) = self.record(index, answer) {
            // Best effort: a grant we could not give back expires by TTL.
            let _ = tokio::time::timeout(request_timeout, release(node, request)).await;
        }
    }

    /// Stores an answer; returns the request to undo when it is this task's
    /// job to release what the node may have granted.
    fn record(&self, index: usize, answer: Answer) -> Option<Arc<Request>> {
        let mut state = self.lock();
        let undo = match (&answer, state.closed) {
            (Answer::Yes(_), true) | (Answer::Failed(_), _) => self.undo.clone(),
            _ => None,
        };
        state.answers[index] = answer;
        let now = tally(&state.answers);
        let decided = now.decides(state.quorum);
        let exit_hold = if now.pending == 0 {
            state.exit_hold.take()
        } else {
            None
        };
        drop(state);
        drop(exit_hold);
        if decided {
            self.changed.notify_waiters();
        }
        undo
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `quorum` nodes said yes, a quorum of answers ruled that
    /// out, every answer is in, or `deadline` passed (None: no deadline;
    /// every request ends by its request timeout); the caller tells
    /// "denied" (a quorum answered) from "too few reachable" by the tally.
    /// Dropped, it leaves the round as it is (see [`Round::close`]).
    pub(crate) async fn wait(&self, deadline: Option<Instant>, quorum: usize) -> Tally {
        loop {
            // Listening before looking: an answer recorded in between
            // still wakes this wait.
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.lock();
                state.quorum = quorum;
                let now = tally(&state.answers);
                if now.decides(quorum) || deadline.is_some_and(|at| Instant::now() >= at) {
                    return now;
                }
            }
            match deadline {
                None => changed.await,
                Some(at) => {
                    let at = tokio::time::Instant::from_std(at);
                    let _ = tokio::time::timeout_at(at, changed).await;
                }
            }
        }
    }

    /// Ends the round for its caller: answers from now on belong to their
    /// tasks. Returns the nodes that had granted, with their values.
    pub(crate) fn close(&self) -> Vec<(usize, u64)> {
        let mut state = self.lock();
        state.closed = true;
        granted(&state.answers)
    }

    /// The nodes that granted so far (late grants included while open).
    pub(crate) fn granted(&self) -> Vec<(usize, u64)> {
        granted(&self.lock().answers)
    }

    /// Marks a granted node's grant as gone (a refresh found it lost).
    pub(crate) fn forget(&self, index: usize) {
        self.lock().answers[index] = Answer::No;
    }

    /// A node whose holders of the name listed other nodes: its name and
    /// their fingerprint.
    pub(crate) fn other_nodes(&self, nodes: &[Arc<dyn NetLocker>]) -> Option<(String, String)> {
        let state = self.lock();
        state.answers.iter().enumerate().find_map(|(i, a)| match a {
            Answer::OtherNodes(theirs) => Some((nodes[i].name().to_owned(), theirs.clone())),
            _ => None,
        })
    }

    /// How many requests are still on their way.
    pub(crate) fn pending(&self) -> usize {
        tally(&self.lock().answers).pending
    }

    /// The nodes that have not answered yes or no (failed, or still pending).
    pub(crate) fn unanswered(&self) -> Vec<usize> {
        let state = self.lock();
        state
            .answers
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                Answer::Pending | Answer::Failed(_) => Some(i),
                _ => None,
            })
            .collect()
    }

    /// The first failure, for the error message when too few answered.
    pub(crate) fn first_failure(&self) -> Option<String> {
        self.lock().answers.iter().find_map(|a| match a {
            Answer::Failed(e) => Some(e.to_string()),
            _ => None,
        })
    }

    /// How many nodes failed in a way that may pass (unreachable, silent).
    pub(crate) fn transient_failures(&self) -> usize {
        let state = self.lock();
        state
            .answers
            .iter()
            .filter(|a| matches!(a, Answer::Failed(e) if e.is_transient()))
            .count()
    }
}

/// Runs `call` on `targets` in parallel from a task on the runtime; each request is bounded by `request_timeout`, so
/// a stopped node delays the result by at most that much. Dropping the
/// future (the refresher being stopped) aborts the requests with it.
pub(crate) async fn ask_all(
    nodes: &[Arc<dyn NetLocker>],
    targets: &[usize],
    request_timeout: Duration,
    call: impl Fn(Arc<dyn NetLocker>) -> Reply<bool>,
) -> Vec<(usize, Result<bool>)> {
    let mut set = tokio::task::JoinSet::new();
    for &index in targets {
        let reply = call(nodes[index].clone());
        let name = nodes[index].name().to_owned();
        set.spawn(async move {
            let outcome = match tokio::time::timeout(request_timeout, reply).await {
                Ok(outcome) => outcome,
                Err(_) => Err(Error::backend_transient(
                    &name,
                    "refresh",
                    format!("no answer within {request_timeout:?}"),
                )),
            };
            (index, outcome)
        });
    }
    let mut outcomes = Vec::with_capacity(targets.len());
    while let Some(joined) = set.join_next().await {
        if let Ok(outcome) = joined {
            outcomes.push(outcome);
        }
    }
    outcomes
}
