//! Leader election under a session: the leader is the holder of the lock
//! `name`, its value says who it is, and every term (a grant and its end)
//! is recorded in order on the stream `lockyard:{name}:terms`, so
//! observers see each change, however quick, in fencing-token order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::caller::Caller;
use super::hold::Hold;
use super::keys::Keys;
use super::route::Route;
use super::semaphore::Semaphore;
use super::server::{server, COMMAND_TIMEOUT};
use super::session::{Binding, Session, SessionState};
use super::slots::{HolderState, Shape};
use crate::error::{Error, Result};
use crate::health;
use crate::holds::{Holds, ProcessHolds};
use crate::identity::{random_hex, request_token};
use crate::lease::DEFAULT_CONNECT_TIMEOUT;
pub use crate::state::Term;
use crate::wait::{Deadline, InTime, Interrupt, NEVER};

mod in_task;

/// How often an observer with nothing to read asks whether the leader's
/// lease ran out (nobody else may notice, and so record, its end).
const RECHECK: Duration = Duration::from_millis(500);
/// Longest single blocking read; bounds how late an interrupt is noticed.
const READ_SLICE: Duration = Duration::from_millis(50);

/// How long an observer's next read may block: [`READ_SLICE`], cut to
/// the caller's deadline; None once that passed.
fn read_slice(give_up_at: Option<Instant>) -> Option<Duration> {
    match give_up_at {
        None => Some(READ_SLICE),
        Some(at) => match at.saturating_duration_since(Instant::now()) {
            left if left.is_zero() => None,
            left => Some(left.min(READ_SLICE)),
        },
    }
}

/// Campaigning for and observing the leadership of `name`.
///
/// ```no_run
/// use lockyard::redis::{Election, Session};
///
/// let url = "redis://127.0.0.1:6379/0";
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
    semaphore: Semaphore,
    session: Arc<SessionState>,
    /// `<session id>-<pid>/<random>` and a nonce per campaign: the pid
    /// keeps a forked child's campaign from passing for its parent's term,
    /// the nonce keeps two threads' campaigns apart (one giving up must not
    /// cancel the term the other won).
    suffix: String,
    /// This process's term, if it leads: a forked child does not, and its
    /// exit must not end its parent's term.
    term: Holds<(), Hold>,
}

impl Election {
    /// The election `name` on the Redis server at `url`, campaigning under
    /// `session`. Touches no server.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad name or URL or a destroyed session.
    pub fn new(url: &str, name: &str, session: &Session) -> Result<Election> {
        let state = session.state().clone();
        state.usable()?;
        let semaphore = Semaphore::new(
            Route::new(server(url, DEFAULT_CONNECT_TIMEOUT)?),
            Keys::new(name)?,
            Shape::Lock,
            state.lease().clone(),
            format!("election {name:?}"),
            Some(Binding::new(state.clone(), true)),
        );
        Ok(Election {
            session: state.clone(),
            suffix: random_hex(4),
            semaphore,
            term: Holds::new(),
        })
    }

    /// Waits up to `timeout` (None: forever; zero: one attempt) to become
    /// the leader with `value`. Ok(false) when the timeout ran out.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty value or a timeout over 100 years,
    /// [`Error::AlreadyLocked`] when
    /// this election leads already, [`Error::LockUnhealthy`] when the
    /// session is lost, [`Error::Backend`] if Redis cannot be reached.
    pub fn campaign(&self, value: &str, timeout: Option<Duration>) -> Result<bool> {
        self.campaign_interruptibly(value, timeout, NEVER).in_time()
    }

    /// [`Election::campaign`] until `deadline`, with an interrupt check
    /// asked at least every 50 ms (see `Lock::acquire_interruptibly`).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes, and those of
    /// [`Election::campaign`].
    pub fn campaign_interruptibly(
        &self,
        value: &str,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        let deadline = deadline.into();
        let token = self.ballot(value)?;
        let hold = self
            .semaphore
            .acquire(&token, value, deadline, interrupted)?;
        self.take_office(hold, deadline)
    }

    /// Checks that a campaign for `value` may start; its request token.
    fn ballot(&self, value: &str) -> Result<String> {
        if value.is_empty() {
            return Err(Error::config("a campaign's value must not be empty"));
        }
        // A lost session is the news, not the term it took with it.
        self.session.usable()?;
        if self.term().contains_key(&()) {
            return Err(Error::AlreadyLocked(self.semaphore.what().to_owned()));
        }
        let identity = format!(
            "{}-{}/{}",
            self.session.id(),
            crate::pid::current(),
            self.suffix
        );
        Ok(request_token(&identity))
    }

    /// Records the term a campaign won; a timeout if it won none.
    fn take_office(&self, hold: Option<Hold>, deadline: Deadline) -> Result<()> {
        let hold = hold
            .ok_or_else(|| deadline.ran_out(format!("leadership of {}", self.semaphore.what())))?;
        self.term().insert((), hold);
        Ok(())
    }

    /// Steps down; the next campaigner takes over at once. Ok(false) when
    /// leadership had already been lost.
    ///
    /// # Errors
    /// [`Error::NotLocked`] when this election does not lead.
    pub fn resign(&self) -> Result<bool> {
        let hold = self.leave_office()?;
        self.report_resigned(self.semaphore.release(hold))
    }

    /// This process's term, taken out of the election.
    fn leave_office(&self) -> Result<Hold> {
        self.term()
            .remove(&())
            .ok_or_else(|| Error::NotLocked(self.semaphore.what().to_owned()))
    }

    fn report_resigned(&self, released: Result<bool>) -> Result<bool> {
        health::warn_if_lost(
            released,
            || format!("leadership of {}", self.semaphore.what()),
            "resigned",
            "another leader",
        )
    }

    /// The current leader's value, None when nobody leads. Asks Redis.
    pub fn leader(&self) -> Result<Option<String>> {
        let now = self.semaphore.holder(&Caller::patient())?;
        Ok(now.value.filter(|_| now.held))
    }

    /// Whether this election leads and its session is surely live. Reads a
    /// flag and the clock; never touches Redis.
    pub fn is_leader(&self) -> bool {
        self.term()
            .get(&())
            .is_some_and(|hold| hold.health.is_healthy())
    }

    /// # Errors
    /// [`Error::NotLocked`] when not leading, [`Error::LockUnhealthy`] when
    /// leadership may be lost.
    pub fn check_health(&self) -> Result<()> {
        match self.term().get(&()) {
            None => Err(Error::NotLocked(self.semaphore.what().to_owned())),
            Some(hold) => hold.health.check(self.semaphore.what()),
        }
    }

    /// The fencing token of this election's current term, if it leads.
    pub fn fencing_token(&self) -> Option<u64> {
        self.term().get(&()).map(|hold| hold.fence)
    }

    /// The changes of leadership from now on, starting with the current
    /// state: an endless iterator (see [`Observer::next_change`] for one
    /// with a timeout and an interrupt check).
    pub fn observe(&self) -> Observer {
        Observer {
            semaphore: self.semaphore.clone(),
            last_id: None,
            pending: VecDeque::new(),
            next_recheck: Instant::now(),
        }
    }

    fn term(&self) -> ProcessHolds<'_, (), Hold> {
        self.term.get()
    }
}

impl Election {
    /// Resigns as a drop does, on the runtime's blocking threads, and
    /// returns at once: for an election about to be dropped where blocking
    /// is not allowed (a garbage collector's finalizer).
    pub fn resign_in_background(&self) {
        self.semaphore.release_in_background(self.term.drain());
    }
}

impl Drop for Election {
    /// A dropped leader resigns rather than leaving its term to the
    /// session; a forked child has no term to resign.
    fn drop(&mut self) {
        for hold in self.term.drain() {
            if let Err(e) = self.semaphore.release(hold) {
                log::warn!("resigning {} on drop failed: {e}", self.semaphore.what());
            }
        }
    }
}

/// The leadership changes of one election, read in order from its terms
/// stream (which keeps the last ~1000; an observer further behind misses
/// the oldest).
pub struct Observer {
    semaphore: Semaphore,
    /// The last stream entry seen; None until the current state was read.
    last_id: Option<String>,
    pending: VecDeque<Term>,
    next_recheck: Instant,
}

impl Observer {
    /// Waits until `deadline` (a [`Deadline`], or a timeout: None waits
    /// forever) for the next change; the first call returns the current
    /// state at once. Ok(None) when the deadline passed first: no change is
    /// an answer here, not a failure. [`Error::Interrupted`] once
    /// `interrupted` answers true (asked at least every 50 ms).
    pub fn next_change(
        &mut self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<Option<Term>> {
        let deadline = deadline.into();
        if deadline.check()?.spent() {
            return Ok(None);
        }
        let give_up_at = deadline.at();
        let caller = Caller::new(give_up_at, interrupted);
        loop {
            if let Some(term) = self.pending.pop_front() {
                return Ok(Some(term));
            }
            if interrupted() {
                return Err(Error::Interrupted(self.semaphore.what().to_owned()));
            }
            let Some(last_id) = self.last_id.clone() else {
                let now = match self.semaphore.holder(&caller) {
                    Err(Error::Timeout { .. }) => return Ok(None),
                    now => now?,
                };
                self.start_from(now);
                continue;
            };
            if Instant::now() >= self.next_recheck {
                // Purges a leader whose lease ran out, which records its end.
                match self.semaphore.holder(&caller) {
                    Err(Error::Timeout { .. }) => return Ok(None),
                    checked => checked?,
                };
                self.next_recheck = Instant::now() + RECHECK;
            }
            let Some(slice) = read_slice(give_up_at) else {
                return Ok(None);
            };
            match self.read(&caller, &last_id, slice) {
                // The deadline came while the read was unanswered.
                Err(Error::Timeout { .. }) => return Ok(None),
                read => read?,
            }
        }
    }

    /// Queues the current state, the first thing an observer reports.
    fn start_from(&mut self, now: HolderState) {
        self.pending.push_back(Term {
            value: now.value.filter(|_| now.held),
            fencing_token: now.fence,
        });
        self.last_id = Some(now.last_term);
    }

    /// One blocking XREAD of the terms after `after`, into `pending`.
    fn read(&mut self, caller: &Caller, after: &str, slice: Duration) -> Result<()> {
        let reply =
            self.semaphore
                .route()
                .run_for(caller, "observe", slice + COMMAND_TIMEOUT, |conn| {
                    self.read_command(after, slice).query(conn)
                })?;
        self.take_entries(reply)
    }

    /// XREAD of the terms after `after`, blocking up to `slice`.
    fn read_command(&self, after: &str, slice: Duration) -> redis::Cmd {
        let mut read = redis::cmd("XREAD");
        read.arg("COUNT")
            .arg(100)
            .arg("BLOCK")
            .arg(slice.as_millis().max(1) as u64)
            .arg("STREAMS")
            .arg(self.semaphore.keys().terms())
            .arg(after);
        read
    }

    /// Queues the terms of an XREAD `reply`.
    fn take_entries(&mut self, reply: redis::Value) -> Result<()> {
        for (id, fields) in stream_entries(reply) {
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .and_then(|pair| pair.get(1).cloned())
            };
            let fencing_token = field("fence").and_then(|f| f.parse().ok()).ok_or_else(|| {
                Error::backend(
                    &self.semaphore.route().server().name,
                    "observe",
                    "a term without a fencing token",
                )
            })?;
            let value = field("value").filter(|v| !v.is_empty());
            self.pending.push_back(Term {
                value,
                fencing_token,
            });
            self.last_id = Some(id);
        }
        Ok(())
    }
}

/// The (id, [field, value, ...]) entries of an XREAD reply of one stream.
fn stream_entries(reply: redis::Value) -> Vec<(String, Vec<String>)> {
    use redis::Value;
    let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
    let streams = match reply {
        Value::Array(streams) => streams,
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| Value::Array(vec![k, v]))
            .collect(),
        _ => return Vec::new(),
    };
    let mut entries = Vec::new();
    for stream in streams {
        let Value::Array(mut parts) = stream else {
            continue;
        };
        let Some(Value::Array(items)) = parts.pop() else {
            continue;
        };
        for item in items {
            let Value::Array(item) = item else { continue };
            let (Some(id), Some(Value::Array(fields))) = (item.first().and_then(text), item.get(1))
            else {
                continue;
            };
            entries.push((id, fields.iter().filter_map(text).collect()));
        }
    }
    entries
}

impl Iterator for Observer {
    type Item = Result<Term>;

    /// Blocks until the next change (the first call: the current state).
    fn next(&mut self) -> Option<Result<Term>> {
        self.next_change(None, &|| false).transpose()
    }
}
