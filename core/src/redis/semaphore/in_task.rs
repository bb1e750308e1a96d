//! The semaphore's waits for async callers: the same scripts, queue and
//! handoff as the blocking waits, run on the caller's own runtime. Such a
//! wait is a future its caller may drop at any await; [`Leaving`] then
//! gives its token up in the background, so that nothing stays held or
//! queued.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{listen_until, Attempt, Semaphore, RECHECK};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::identity::random_hex;
use crate::redis::hold::{Hold, TAKER};
use crate::redis::server::{Ear, Heard, COMMAND_TIMEOUT};
use crate::redis::slots::{HolderState, Slots, WAITER_LEASE};
use crate::runtime;
use crate::wait::Deadline;

/// Gives up a wait's token (a waiter's, or a `wait_idle` watcher's) when
/// its future is dropped before the wait ended: the wait may be queued, may
/// have been handed a slot, or may have an acquire on its way to the server
/// (`in_flight`), which the give-up's tombstone then turns away.
pub(super) struct Leaving<'a> {
    slots: &'a Arc<Slots>,
    token: &'a str,
    in_flight: bool,
    armed: bool,
}

impl<'a> Leaving<'a> {
    pub(super) fn new(slots: &'a Arc<Slots>, token: &'a str) -> Self {
        Leaving {
            slots,
            token,
            in_flight: false,
            armed: true,
        }
    }

    /// The wait ended on its own: nothing to give up on drop.
    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.slots
                .give_up_in_background(self.token.to_owned(), self.in_flight);
        }
    }
}

/// How one wait hears its wake-ups.
pub(super) enum Hearing {
    /// It has not listened yet.
    NotYet,
    /// On a listener shared with other waiters of its runtime.
    Shared(Ear),
    /// On a connection of its own.
    Alone,
}

/// Finishes a release in the background when its future is dropped
/// before the answer came: the slot must not wait for its TTL because its
/// releaser's task was cancelled.
struct Releasing<'a> {
    semaphore: &'a Semaphore,
    token: &'a str,
    armed: bool,
}

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (semaphore, token) = (self.semaphore.clone(), self.token.to_owned());
            runtime::spawn_blocking(move || {
                if let Err(e) = semaphore.release_token(&token) {
                    log::warn!("releasing {} failed: {e}", semaphore.what());
                }
            });
        }
    }
}

impl Semaphore {
    /// [`Semaphore::release_token`] for an async caller, on its runtime;
    /// dropped before the answer, it finishes in the background.
    pub(crate) async fn release_token_async(&self, token: &str) -> Result<bool> {
        let mut releasing = Releasing {
            semaphore: self,
            token,
            armed: true,
        };
        let released = self.slots.release_async(token).await;
        releasing.armed = false;
        released
    }

    /// [`Semaphore::inspect`] for an async caller, on its runtime.
    pub(crate) async fn inspect_async(&self, token: Option<&str>) -> Result<(u32, bool)> {
        self.slots.inspect_async(token).await
    }

    /// [`Semaphore::holder`] for an async caller who gives up at `give_up_at`.
    pub(crate) async fn holder_async(&self, give_up_at: Option<Instant>) -> Result<HolderState> {
        self.slots.holder_async(give_up_at).await
    }

    /// [`Semaphore::adopt`] for an async caller, on its runtime.
    pub(crate) async fn adopt_async(&self, token: &str) -> Result<Option<Hold>> {
        let refresher = random_hex(16);
        let sent = Stamp::now();
        let reply: Vec<i64> = self
            .slots
            .route
            .for_task(None, "adopt", COMMAND_TIMEOUT, true, |mut link| {
                let adopt = self.adopt_script(link.fence_base(), token, &refresher);
                async move { adopt.invoke_async(&mut link).await }
            })
            .await?;
        self.adopted(token, &refresher, sent, &reply)
    }

    /// [`Semaphore::release`] for an async caller, on its runtime.
    pub(crate) async fn release_async(&self, hold: Hold) -> Result<bool> {
        let token = hold.token.clone();
        drop(hold);
        self.release_token_async(&token).await
    }

    /// [`Semaphore::acquire`] for an async caller: the wait ends at
    /// `deadline` or when the future is dropped, and either way leaves
    /// nothing held or queued.
    pub(crate) async fn acquire_async(
        &self,
        token: &str,
        value: &str,
        deadline: Deadline,
    ) -> Result<Option<Hold>> {
        let meta = self.meta(value)?;
        if deadline.check()?.spent() {
            return Ok(None);
        }
        let mut leaving = Leaving::new(&self.slots, token);
        if deadline.is_one_attempt() {
            // One attempt, which no deadline cuts short, and which queues
            // nothing unless granted.
            leaving.in_flight = true;
            let attempt = self.attempt_async(None, token, &meta, Duration::ZERO).await;
            let kept = match attempt {
                Ok(Attempt::Granted(fence, valid_until)) => {
                    self.keep_async(token, fence, valid_until, false).await
                }
                Ok(Attempt::Queued { .. }) => Ok(None),
                Err(e) => Err(e),
            };
            if kept.is_err() {
                // The reply may be what was lost: the script may have
                // granted this request's token, which no later acquire
                // presents again. Best effort, like a wait's give-up.
                let _ = self.slots.give_up_async(token, true).await;
            }
            leaving.disarm();
            return kept;
        }
        let waited = match self
            .wait_in_queue_async(deadline.at(), token, &meta, &mut leaving)
            .await
        {
            // The deadline came while a request was unanswered.
            Err(Error::Timeout { .. }) => Ok(None),
            waited => waited,
        };
        if !matches!(waited, Ok(Some(_))) {
            // Leave the queue, and give back a slot handed over meanwhile.
            let cancelled = self.slots.give_up_async(token, leaving.in_flight).await;
            if let (Ok(None), Err(e)) = (&waited, cancelled) {
                leaving.disarm();
                return Err(e);
            }
        }
        leaving.disarm();
        waited
    }

    /// `leaving.in_flight` stays true after an attempt that went unanswered
    /// (no answer by the deadline, a broken connection): the network may
    /// still deliver it.
    async fn wait_in_queue_async(
        &self,
        give_up_at: Option<Instant>,
        token: &str,
        meta: &str,
        leaving: &mut Leaving<'_>,
    ) -> Result<Option<Hold>> {
        let mut hearing = Hearing::NotYet;
        loop {
            self.check_session()?;
            leaving.in_flight = true;
            let attempt = self
                .attempt_async(give_up_at, token, meta, WAITER_LEASE)
                .await;
            leaving.in_flight = attempt.as_ref().is_err_and(Error::went_unanswered);
            let (clock, earliest_expiry) = match attempt? {
                Attempt::Granted(fence, valid_until) => {
                    return self.keep_async(token, fence, valid_until, false).await;
                }
                Attempt::Queued {
                    clock,
                    earliest_expiry,
                } => (clock, earliest_expiry),
            };
            let until = listen_until(earliest_expiry, give_up_at);
            if let Some(message) = self
                .listen_async(give_up_at, token, until, &mut hearing)
                .await?
            {
                let (fence, valid_until) = self.handed_over(clock, &message)?;
                return self.keep_async(token, fence, valid_until, true).await;
            }
            if give_up_at.is_some_and(|at| Instant::now() >= at) {
                return Ok(None);
            }
        }
    }

    async fn attempt_async(
        &self,
        give_up_at: Option<Instant>,
        token: &str,
        meta: &str,
        waiter_lease: Duration,
    ) -> Result<Attempt> {
        let sent = Stamp::now();
        let route = &self.slots.route;
        let reply: Vec<i64> = route
            .for_task(give_up_at, "acquire", COMMAND_TIMEOUT, true, |mut link| {
                let acquire = self.acquire_script(link.fence_base(), token, meta, waiter_lease);
                async move { acquire.invoke_async(&mut link).await }
            })
            .await?;
        self.answered(sent, &reply)
    }

    /// Waits on the wake-up list of `token` until a message arrives or
    /// `until` passes. No thread waits, and in most waits no connection
    /// of its own either: a listener shared with the runtime's other
    /// waiters does (see [`Ear`]), joined at the first listen of a wait
    /// and left when the wait ends. Where it cannot share, or its
    /// listener failed, a wait listens alone: a BLPOP on a connection of
    /// the caller's runtime, in slices of [`RECHECK`] at most, between
    /// which a session lost meanwhile ends the wait.
    pub(super) async fn listen_async(
        &self,
        give_up_at: Option<Instant>,
        token: &str,
        until: Instant,
        hearing: &mut Hearing,
    ) -> Result<Option<String>> {
        let wake_key = self.slots.keys.wake(token);
        if let Hearing::NotYet = hearing {
            let server = self.slots.route.server();
            *hearing = match server.ear(&wake_key, self.slots.keys.prefix()) {
                Some(ear) => Hearing::Shared(ear),
                None => Hearing::Alone,
            };
        }
        if let Hearing::Shared(ear) = hearing {
            self.check_session()?;
            match ear.hear(until).await {
                Heard::Message(message) => return Ok(Some(message)),
                Heard::Nothing => return Ok(None),
                Heard::Deaf => *hearing = Hearing::Alone,
            }
        }
        loop {
            self.check_session()?;
            let left = until.saturating_duration_since(Instant::now());
            if left < Duration::from_millis(1) {
                return Ok(None);
            }
            let slice = format!("{:.3}", left.min(RECHECK).as_secs_f64());
            let route = &self.slots.route;
            let limit = left.min(RECHECK) + COMMAND_TIMEOUT;
            // A wake-up lost with a dropped connection is still in the
            // grants hash, where the next attempt claims it.
            let message: Option<(String, String)> = route
                .blocking_for_task(give_up_at, "wait", limit, |mut link| {
                    let mut blpop = redis::cmd("BLPOP");
                    blpop.arg(&wake_key).arg(&slice);
                    async move { blpop.query_async(&mut link).await }
                })
                .await?;
            if let Some((_, message)) = message {
                return Ok(Some(message));
            }
        }
    }

    /// The hold of a slot granted (or handed over, `refresh_now`) to
    /// `token`. Under a session, taking it up may ask Redis and wait
    /// between tries: that runs on the caller runtime's blocking pool,
    /// never on its executor.
    async fn keep_async(
        &self,
        token: &str,
        fence: u64,
        valid_until: Stamp,
        refresh_now: bool,
    ) -> Result<Option<Hold>> {
        if self.slots.binding.is_none() {
            return Hold::keep(&self.slots, token, fence, valid_until, refresh_now, TAKER)
                .map(Some);
        }
        let (slots, token) = (self.slots.clone(), token.to_owned());
        let kept = tokio::task::spawn_blocking(move || {
            Hold::keep(&slots, &token, fence, valid_until, refresh_now, TAKER)
        });
        match kept.await {
            Ok(kept) => kept.map(Some),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}
