//! Leader election on etcd under a session (etcd's `concurrency.Election`,
//! with the Redis election's faces): a campaign is a key in the line of the
//! lock `name`, storing the campaign's value; the leader is the line's
//! holder, its fencing token its key's create revision. Observers watch
//! the line from a revision on, so they see every change in order, and a
//! leader's end however it came (resigned, lease run out, key deleted).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{Fault, Lines};
use super::grant::{self, Grant};
use super::kv;
use super::queue::{Barring, Queue, Shape};
use super::session::{Session, SessionState};
use super::target::Target;
use crate::error::{Error, Result};
use crate::health;
use crate::holds::{Holds, ProcessHolds};
use crate::identity::random_hex;
use crate::runtime::{self, Ended};
use crate::state::Term;
use crate::wait::{Deadline, InTime, Interrupt, NEVER};

/// A watch is opened again after this long, from the revision last seen:
/// its connection may have died without a word.
const WATCH_RENEWAL: Duration = Duration::from_secs(30);

/// Pause before watching again when no member took the watch.
const WATCH_RETRY: Duration = Duration::from_millis(200);

/// Campaigning for and observing the leadership of `name` on etcd.
///
/// ```no_run
/// use lockyard::etcd::{Election, Session};
///
/// let url = "etcd://127.0.0.1:2379";
/// let session = Session::builder(url).build()?;
/// let election = Election::new(url, "scheduler", &session)?;
/// if election.campaign("node-a", None)? {
///     println!("leading term {:?}", election.fencing_token());
/// }
/// for term in election.observe().take(3) {
///     println!("leader now: {:?}", term?.value);
/// }
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct Election {
    /// The line of the lock `name`, read by `leader` and observers.
    line: Arc<Queue>,
    session: Arc<SessionState>,
    name: String,
    /// This process's term, if it leads: a forked child does not, and its
    /// exit must not end its parent's term.
    term: Holds<(), Leading>,
}

/// A term this process holds: the grant, and the line it was taken in
/// (its bars carry the campaign's value).
struct Leading {
    line: Arc<Queue>,
    grant: Grant,
}

impl Election {
    /// The election `name` on the etcd cluster at `url` (the session's
    /// members), campaigning under `session`. Touches no server.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad name or URL, a URL naming other members
    /// than the session's, or a destroyed session.
    pub fn new(url: &str, name: &str, session: &Session) -> Result<Election> {
        let state = session.state().clone();
        state.usable()?;
        if !state.client.targets(&Target::parse(url)?) {
            return Err(Error::config(
                "the session is on other etcd members than the election's URL",
            ));
        }
        let line = Queue::new(state.client.clone(), name, Shape::Lock, what(name))?;
        Ok(Election {
            line: Arc::new(line),
            session: state,
            name: name.to_owned(),
            term: Holds::new(),
        })
    }

    /// Waits up to `timeout` (None: forever; zero: one attempt) to become
    /// the leader with `value`. Ok(false) when the timeout ran out.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty value or a timeout over 100 years,
    /// [`Error::AlreadyLocked`] when this election leads already,
    /// [`Error::LockUnhealthy`] when the session is lost,
    /// [`Error::Backend`] if no member answers.
    pub fn campaign(&self, value: &str, timeout: Option<Duration>) -> Result<bool> {
        self.campaign_interruptibly(value, timeout, NEVER).in_time()
    }

    /// [`Election::campaign`] until `deadline`, with an interrupt check
    /// asked at least every 50 ms. A campaign that ends without leading
    /// leaves nothing in line.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes, [`Error::Interrupted`],
    /// and those of [`Election::campaign`].
    pub fn campaign_interruptibly(
        &self,
        value: &str,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        let deadline = deadline.into().check()?;
        let (line, key) = self.ballot(value)?;
        let taken = grant::take(
            &line,
            &self.session.leases,
            &key,
            value,
            deadline,
            interrupted,
        )?;
        self.take_office(line, taken, deadline)
    }

    /// The line a campaign with `value` waits in (barred by other
    /// sessions' bars) and its key there.
    fn ballot(&self, value: &str) -> Result<(Arc<Queue>, String)> {
        if value.is_empty() {
            return Err(Error::config("a campaign's value must not be empty"));
        }
        // A lost session is the news, not the term it took with it.
        self.session.usable()?;
        if self.term().contains_key(&()) {
            return Err(Error::AlreadyLocked(self.line.what().to_owned()));
        }
        let mut line = Queue::new(
            self.session.client.clone(),
            &self.name,
            Shape::Lock,
            what(&self.name),
        )?;
        if self.session.leases.bars() {
            line = line.barred_by(Barring {
                kept: self.session.kept_value(Some(value)),
                session: self.session.id.clone(),
            });
        }
        let key = line.key(&random_hex(12));
        Ok((Arc::new(line), key))
    }

    /// Records the term a campaign until `deadline` took (None: it ran out).
    fn take_office(
        &self,
        line: Arc<Queue>,
        taken: Option<Grant>,
        deadline: Deadline,
    ) -> Result<()> {
        let grant =
            taken.ok_or_else(|| deadline.ran_out(format!("leadership of {}", self.line.what())))?;
        // Two threads campaigning on one election: the second leads only
        // once the first's term is over, lost if it is still recorded.
        self.term().insert((), Leading { line, grant });
        Ok(())
    }

    /// The async twin of [`Election::campaign`]: the wait runs on
    /// lockyard's runtime and is awaited on any executor, holding no
    /// thread. Dropped before it completes, it leaves nothing in line.
    ///
    /// # Errors
    /// Those of [`Election::campaign`].
    pub async fn campaign_async(&self, value: &str, timeout: Option<Duration>) -> Result<bool> {
        let deadline = Deadline::after(timeout).check()?;
        let (line, key) = self.ballot(value)?;
        let leases = self.session.leases.clone();
        let taken =
            grant::take_async(line.clone(), leases, key, value.to_owned(), deadline).await?;
        self.take_office(line, taken, deadline).in_time()
    }

    /// The async twin of [`Election::resign`]. Dropped before the answer,
    /// the resignation finishes in the background.
    ///
    /// # Errors
    /// [`Error::NotLocked`] when this election does not lead.
    pub async fn resign_async(&self) -> Result<bool> {
        let leading = self.leave_office()?;
        let given_back = grant::give_back_async(leading.line, leading.grant).await;
        self.report_resigned(given_back)
    }

    /// The async twin of [`Election::leader`].
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answers.
    pub async fn leader_async(&self) -> Result<Option<String>> {
        runtime::on_runtime(self.line.what(), leader_of(self.line.clone())).await
    }

    /// Steps down; the next campaigner takes over at once. Ok(false) when
    /// leadership had already been lost.
    ///
    /// # Errors
    /// [`Error::NotLocked`] when this election does not lead.
    pub fn resign(&self) -> Result<bool> {
        let leading = self.leave_office()?;
        self.report_resigned(grant::give_back(&leading.line, &leading.grant))
    }

    /// Takes this process's term out, to be given back.
    fn leave_office(&self) -> Result<Leading> {
        self.term()
            .remove(&())
            .ok_or_else(|| Error::NotLocked(self.line.what().to_owned()))
    }

    fn report_resigned(&self, given_back: Result<bool>) -> Result<bool> {
        health::warn_if_lost(
            given_back,
            || format!("leadership of {}", self.line.what()),
            "resigned",
            "another leader",
        )
    }

    /// The current leader's value, None when nobody leads (also while a
    /// lost session's lock_delay bars the name). Asks etcd.
    pub fn leader(&self) -> Result<Option<String>> {
        runtime::block_on(leader_of(self.line.clone()))
    }

    /// Whether this election leads and its session is surely live. Reads a
    /// flag and the clock; never touches etcd.
    pub fn is_leader(&self) -> bool {
        self.term()
            .get(&())
            .is_some_and(|leading| leading.grant.held.health.is_healthy())
    }

    /// # Errors
    /// [`Error::NotLocked`] when not leading, [`Error::LockUnhealthy`] when
    /// leadership may be lost.
    pub fn check_health(&self) -> Result<()> {
        match self.term().get(&()) {
            None => Err(Error::NotLocked(self.line.what().to_owned())),
            Some(leading) => leading.grant.held.health.check(self.line.what()),
        }
    }

    /// The fencing token of this election's current term, if it leads: its
    /// key's create revision.
    pub fn fencing_token(&self) -> Option<u64> {
        self.term()
            .get(&())
            .map(|leading| leading.grant.held.revision as u64)
    }

    /// The changes of leadership from now on, starting with the current
    /// state: an endless iterator (see [`Observer::next_change`] for one
    /// with a timeout and an interrupt check).
    pub fn observe(&self) -> Observer {
        Observer {
            handed_back: VecDeque::new(),
            what: self.line.what().to_owned(),
            watching: Arc::new(tokio::sync::Mutex::new(Watching {
                line: self.line.clone(),
                seen: None,
                watch: None,
                leader: None,
                pending: VecDeque::new(),
            })),
        }
    }

    /// Resigns as a drop does, on the runtime's blocking threads, and
    /// returns at once: for an election about to be dropped where blocking
    /// is not allowed (a garbage collector's finalizer).
    pub fn resign_in_background(&self) {
        let terms = self.term.drain();
        if terms.is_empty() {
            return;
        }
        let what = self.line.what().to_owned();
        runtime::spawn_blocking(move || {
            for leading in terms {
                if let Err(e) = grant::give_back(&leading.line, &leading.grant) {
                    log::warn!("resigning {what} in the background failed: {e}");
                }
            }
        });
    }

    fn term(&self) -> ProcessHolds<'_, (), Leading> {
        self.term.get()
    }
}

impl Drop for Election {
    /// A dropped leader resigns rather than leaving its term to the
    /// session; a forked child has no term to resign.
    fn drop(&mut self) {
        for leading in self.term.drain() {
            if let Err(e) = grant::give_back(&leading.line, &leading.grant) {
                log::warn!("resigning {} on drop failed: {e}", self.line.what());
            }
        }
    }
}

fn what(name: &str) -> String {
    format!("election {name:?}")
}

/// The value of `line`'s leader, asked of etcd.
async fn leader_of(line: Arc<Queue>) -> Result<Option<String>> {
    let read = Line::read(&line, 1).await?;
    Ok(read.leader(&line).map(|entry| entry.value.clone()))
}

/// The keys of an election's line and the name's bar, as of `revision`.
struct Line {
    revision: i64,
    keys: Vec<kv::Entry>,
    bar: Option<kv::Entry>,
}

impl Line {
    /// The line's `limit` oldest keys (0: all) and the bar, in one Txn.
    async fn read(queue: &Queue, limit: i64) -> Result<Line> {
        let txn = json!({"success": [kv::oldest(&queue.own, limit), kv::read(&queue.bar_key())]});
        let answer = queue.call("kv/txn", &txn, "reading the election").await?;
        Ok(Line {
            revision: kv::revision(&answer),
            keys: kv::entries(kv::response(&answer, 0)),
            bar: kv::entries(kv::response(&answer, 1)).into_iter().next(),
        })
    }

    /// The leader: the oldest key, unless another session's bar holds the
    /// name closed.
    fn leader(&self, queue: &Queue) -> Option<&kv::Entry> {
        let oldest = self.keys.iter().min_by_key(|entry| entry.create_revision)?;
        queue
            .holds_despite(self.bar.as_ref(), oldest)
            .then_some(oldest)
    }

    /// Applies one watch event (a put or a delete) of the line or the bar.
    fn apply(&mut self, queue: &Queue, event: &Value) {
        let kv = &event["kv"];
        let key = kv::decode(&kv["key"]);
        let deleted = event["type"].as_str() == Some("DELETE");
        let entry = kv::Entry {
            key: key.clone(),
            create_revision: kv::number(&kv["create_revision"]),
            value: kv::decode(&kv["value"]),
            lease: kv::number(&kv["lease"]),
        };
        if key == queue.bar_key() {
            self.bar = (!deleted).then_some(entry);
        } else if key.starts_with(&queue.own) {
            self.keys.retain(|seen| seen.key != key);
            if !deleted {
                self.keys.push(entry);
            }
        }
    }
}

/// The leadership changes of one election, in order: a watch of its line
/// from the revision last seen, re-read whole if etcd compacted past it,
/// and every request timeout without a message (a frozen member sends
/// nothing, not even an error).
pub struct Observer {
    what: String,
    /// Locked by the one wait under way: one that was dropped may still
    /// be ending on lockyard's runtime when the next begins.
    watching: Arc<tokio::sync::Mutex<Watching>>,
    /// Changes handed back by [`Observer::unread`]: returned before any
    /// other, without waiting for the lock a dropped wait may still hold.
    handed_back: VecDeque<Term>,
}

struct Watching {
    line: Arc<Queue>,
    /// The line as of the last event applied; None until the first read.
    seen: Option<Line>,
    /// The open watch, the process it was opened in (a forked child cannot
    /// use its parent's: the parent's runtime drives it) and when.
    watch: Option<(u32, Instant, Lines)>,
    /// The term last reported: its key and fencing token.
    leader: Option<(String, u64)>,
    pending: VecDeque<Term>,
}

impl Observer {
    /// Waits until `deadline` (a [`Deadline`], or a timeout: None waits
    /// forever) for the next change; the first call returns the current
    /// state as soon as it is read. Ok(None) when the deadline passed
    /// first: no change is an answer here, not a failure, and no member
    /// answering is waited out until then. [`Error::Interrupted`] once
    /// `interrupted` answers true (asked at least every 50 ms).
    ///
    /// # Errors
    /// [`Error::Backend`] if etcd refuses the read or the watch (a user
    /// without read access to the name's keys and bar, say).
    pub fn next_change(
        &mut self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<Option<Term>> {
        let deadline = deadline.into().check()?;
        if let Some(term) = self.handed_back.pop_front() {
            return Ok(Some(term));
        }
        let watching = self.watching.clone();
        let waiting = async move {
            let mut watching = watching.lock().await;
            watching.wait_for_change(deadline).await?;
            Ok(watching.pending.pop_front())
        };
        match runtime::block_on_interruptibly(waiting, None, interrupted) {
            Ended::Done(done) => done,
            Ended::TimedOut => Ok(None),
            Ended::Interrupted => Err(Error::Interrupted(self.what.clone())),
        }
    }

    /// Hands back `term`, returned by the last call but never delivered
    /// (its reader was cancelled as it came): the next call returns it
    /// again, before any later change.
    pub fn unread(&mut self, term: Term) {
        self.handed_back.push_front(term);
    }

    /// The async twin of [`Observer::next_change`]: the wait runs on
    /// lockyard's runtime and is awaited on any executor. Dropped
    /// meanwhile, it loses no change: a change is taken out only once its
    /// caller has the answer.
    ///
    /// # Errors
    /// Those of [`Observer::next_change`].
    pub async fn next_change_async(
        &mut self,
        deadline: impl Into<Deadline>,
    ) -> Result<Option<Term>> {
        let deadline = deadline.into().check()?;
        if let Some(term) = self.handed_back.pop_front() {
            return Ok(Some(term));
        }
        let watching = self.watching.clone();
        let waiting = async move { watching.lock_owned().await.wait_for_change(deadline).await };
        runtime::on_runtime(&self.what, waiting).await?;
        Ok(self.watching.lock().await.pending.pop_front())
    }
}

impl Watching {
    /// Reads or watches until a change is pending or `deadline` passes
    /// (a zero timeout still makes its one look at the current state,
    /// failing if no member answers it).
    async fn wait_for_change(&mut self, deadline: Deadline) -> Result<()> {
        if !self.pending.is_empty() || deadline.spent() {
            return Ok(());
        }
        if deadline.is_one_attempt() && self.seen.is_none() {
            return self.first_look().await;
        }
        match deadline.at() {
            None => self.changes().await,
            Some(at) => tokio::time::timeout_at(at.into(), self.changes())
                .await
                .unwrap_or(Ok(())),
        }
    }

    /// Reads or watches until there is a change to report.
    async fn changes(&mut self) -> Result<()> {
        while self.pending.is_empty() {
            let step = match &self.seen {
                None => self.first_look().await,
                Some(_) => self.watch_once().await,
            };
            match step {
                // No member answering is waited out, up to the caller's
                // deadline.
                Err(e) if e.is_transient() => tokio::time::sleep(WATCH_RETRY).await,
                step => step?,
            }
        }
        Ok(())
    }

    /// Reads the line and reports who leads now.
    async fn first_look(&mut self) -> Result<()> {
        let line = Line::read(&self.line, 0).await?;
        let term = match line.leader(&self.line) {
            Some(entry) => {
                let token = entry.create_revision as u64;
                self.leader = Some((entry.key.clone(), token));
                Term {
                    value: Some(entry.value.clone()),
                    fencing_token: token,
                }
            }
            None => Term {
                value: None,
                fencing_token: 0,
            },
        };
        self.pending.push_back(term);
        self.seen = Some(line);
        Ok(())
    }

    /// Opens the watch if needed and takes in its next message, or reads
    /// the line again after a request timeout without one.
    async fn watch_once(&mut self) -> Result<()> {
        let pid = crate::pid::current();
        if self.watch.as_ref().is_some_and(|(owner, ..)| *owner != pid) {
            // Dropping it would touch the parent's runtime.
            std::mem::forget(self.watch.take());
        }
        let Some((_, _, watch)) = &mut self.watch else {
            return self.open_watch(pid).await;
        };
        let quiet = self.line.client.request_timeout();
        let message = match tokio::time::timeout(quiet, watch.next()).await {
            Ok(Ok(Some(message))) => message,
            Err(_) => return self.reread().await,
            // Ended by the member, or cut: watch again from the revision
            // last seen, after a pause (a member that ends every watch at
            // once must not make this spin).
            Ok(Ok(None) | Err(Fault::Unanswered(_) | Fault::Unsent(_))) => {
                self.watch = None;
                tokio::time::sleep(WATCH_RETRY).await;
                return Ok(());
            }
            Ok(Err(fault)) if fault.is_compacted() => return self.reread().await,
            Ok(Err(fault)) => {
                self.watch = None;
                return Err(fault.into_error(&self.line.client, "observing the election"));
            }
        };
        let result = &message["result"];
        if result["canceled"].as_bool() == Some(true) {
            self.watch = None;
            if kv::number(&result["compact_revision"]) > 0 {
                return self.reread().await;
            }
            let reason = result["cancel_reason"]
                .as_str()
                .unwrap_or("no reason given");
            return Err(Error::backend(
                self.line.shown(),
                "observing the election",
                format!("etcd cancelled the watch of {}: {reason}", self.line.what()),
            ));
        }
        let events = result["events"].as_array().map_or(&[][..], Vec::as_slice);
        // Revisions up to here are in a read made since the watch opened.
        let applied = self.seen.as_ref().map_or(0, |seen| seen.revision);
        let mut current = applied;
        for event in events {
            let revision = kv::number(&event["kv"]["mod_revision"]);
            if revision <= applied {
                continue;
            }
            // Each revision is one Txn (a key and its bar): report the
            // state between Txns only.
            if revision != current {
                self.settle();
                current = revision;
            }
            let seen = self.seen.as_mut().expect("read before watching");
            seen.apply(&self.line, event);
            seen.revision = revision;
        }
        self.settle();
        Ok(())
    }

    /// Watches the line and the bar, which sorts just before it, from the
    /// revision after the last seen (other names' keys in between are
    /// passed over).
    async fn open_watch(&mut self, pid: u32) -> Result<()> {
        let Some(seen) = &self.seen else {
            return Ok(());
        };
        let create = json!({
            "key": kv::encode(&self.line.bar_key()),
            "range_end": kv::prefix_end(&self.line.own),
            "start_revision": seen.revision + 1,
        });
        let body = json!({"create_request": create});
        let client = &self.line.client;
        match client
            .stream("watch", &body, self.line.request_until())
            .await
        {
            Ok(lines) => self.watch = Some((pid, Instant::now(), lines)),
            Err(fault) if fault.is_compacted() => self.reread().await?,
            Err(fault) => return Err(fault.into_error(client, "observing the election")),
        }
        Ok(())
    }

    /// Reads the whole line again and reports how the leader moved: after
    /// etcd compacted the revisions the watch was to start from, or while
    /// the watch says nothing (its member may be frozen; a read goes to
    /// any member that answers). Terms that came and went in between are
    /// not seen.
    async fn reread(&mut self) -> Result<()> {
        let line = Line::read(&self.line, 0).await?;
        let watched_from = self.seen.as_ref().map_or(0, |seen| seen.revision);
        if line.revision > watched_from {
            self.seen = Some(line);
            self.settle();
        }
        // A watch that said nothing through a change (or fell behind a
        // compaction) is opened again from the read, as is one open for
        // long: its connection may have died without a word.
        let stale = self
            .watch
            .as_ref()
            .is_some_and(|(_, opened, _)| opened.elapsed() > WATCH_RENEWAL);
        if stale || !self.pending.is_empty() {
            self.watch = None;
        }
        Ok(())
    }

    /// Queues the end of the reported term and the start of the next when
    /// the line's leader is no longer the one reported.
    fn settle(&mut self) {
        let Some(seen) = &self.seen else { return };
        let now = seen.leader(&self.line).map(|entry| {
            (
                entry.key.clone(),
                entry.create_revision as u64,
                entry.value.clone(),
            )
        });
        if now.as_ref().map(|(key, ..)| key) == self.leader.as_ref().map(|(key, _)| key) {
            return;
        }
        if let Some((_, token)) = self.leader.take() {
            self.pending.push_back(Term {
                value: None,
                fencing_token: token,
            });
        }
        if let Some((key, token, value)) = now {
            self.pending.push_back(Term {
                value: Some(value),
                fencing_token: token,
            });
            self.leader = Some((key, token));
        }
    }
}

impl Iterator for Observer {
    type Item = Result<Term>;

    /// Blocks until the next change (the first call: the current state).
    fn next(&mut self) -> Option<Result<Term>> {
        self.next_change(None, &|| false).transpose()
    }
}
