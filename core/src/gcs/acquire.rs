//! Taking the GCS lock: create the lock object only if absent; on conflict
//! look at it (our own identity → recover at once; stale by the server's
//! clock → delete that exact version and retry; else wait, looking again
//! with reads only). An acquire that gives up removes any object its own
//! create may have left.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::backoff::Steps;
use super::engine::{write_if_ours, Engine, Hold};
use super::requests::{sleep_interruptibly, SHORTEST_RETRY};
use super::store::{Reply, StoreError, Version};
use super::writer::Writer;
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::runtime::{self, Ended};
use crate::wait::{Deadline, Interrupt};

/// How long an acquire that gives up keeps trying to remove an object its
/// create may have left; past it, the object blocks others until stale.
const LEFTOVER_CLEANUP: Duration = Duration::from_secs(5);
/// Immediate retries (object vanished, stale object removed) before a wait.
const IMMEDIATE_RETRIES: u32 = 3;

enum Look {
    /// No object: try to create it.
    Free,
    /// Someone else holds it; it turns stale in about this long.
    Held(Duration),
}

/// One caller's acquisition: who, until when, what it may have left, and
/// where its wait is.
pub(crate) struct Attempt {
    /// Writes the objects of this attempt, and of the hold it becomes.
    writer: Writer,
    /// When the wait ends (None: never).
    give_up_at: Option<Instant>,
    /// When transient failures stop being retried (None: never).
    retry_until: Option<Instant>,
    /// A create was sent and no read since has shown what became of it:
    /// an object of ours may be on the server with nobody refreshing it.
    create_in_doubt: bool,
    steps: Steps,
    /// Creates retried at once since the last pause.
    immediate: u32,
    /// The last look found no object (or this is the first step).
    may_create: bool,
}

impl Attempt {
    /// Whether a create of this attempt may have landed unseen.
    pub(crate) fn create_in_doubt(&self) -> bool {
        self.create_in_doubt
    }

    pub(crate) fn writer(&self) -> &Writer {
        &self.writer
    }
}

/// Where a step of the wait left it.
pub(crate) enum Step {
    Held(Hold),
    /// The deadline passed.
    GaveUp,
    /// Someone else holds it: look again after this pause.
    Pause(Duration),
}

impl Engine {
    /// Waits until `deadline` (a zero timeout: one attempt, which may
    /// still clear a stale object) for the lock as `identity`. A waiter
    /// only reads: GCS allows about one write per second per object, and
    /// create attempts would spend it. Transient failures are retried until
    /// the timeout (at least [`SHORTEST_RETRY`]); an acquire that fails
    /// anyway first removes any object its own create may have left.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        identity: &str,
        deadline: Deadline,
        interrupted: Interrupt<'_>,
    ) -> Result<Option<Hold>> {
        let Some(mut attempt) = self.start_attempt(identity, deadline)? else {
            return Ok(None);
        };
        loop {
            let step =
                match runtime::block_on_interruptibly(self.step(&mut attempt), None, interrupted) {
                    Ended::Done(step) => step,
                    _ => Err(Error::Interrupted(self.what.clone())),
                };
            match self.after_step(&attempt, step)? {
                Step::Held(hold) => return Ok(Some(hold)),
                Step::GaveUp => return Ok(None),
                // A pause follows a look, which leaves no create in doubt.
                Step::Pause(wait) => sleep_interruptibly(wait, interrupted, &self.what)?,
            }
        }
    }

    /// An acquisition as `identity` until `deadline`; None if the deadline
    /// passed already.
    pub(crate) fn start_attempt(
        &self,
        identity: &str,
        deadline: Deadline,
    ) -> Result<Option<Attempt>> {
        let started = Instant::now();
        if deadline.check()?.spent() {
            return Ok(None);
        }
        let give_up_at = deadline.at();
        Ok(Some(Attempt {
            writer: Writer::new(identity),
            give_up_at,
            retry_until: give_up_at.map(|at| at.max(started + SHORTEST_RETRY)),
            create_in_doubt: false,
            steps: self.backoff.steps(),
            immediate: 0,
            may_create: true,
        }))
    }

    /// What a step's outcome means for the acquisition: an acquire that
    /// fails while a create of its own may have landed first removes what
    /// it left.
    pub(crate) fn after_step(&self, attempt: &Attempt, step: Result<Step>) -> Result<Step> {
        match step {
            Err(error) if attempt.create_in_doubt => {
                Err(self.remove_leftover(&attempt.writer, error))
            }
            other => other,
        }
    }

    /// The next step of the wait: a create (unless the last look found the
    /// object held) and, if it failed, a look; then a hold, the deadline
    /// passed, or the pause before looking again. Requests only: the pause
    /// is the caller's, a thread's sleep or a task's. Dropped at any await,
    /// `attempt` tells whether a create of its own may have landed.
    pub(crate) async fn step(self: &Arc<Self>, attempt: &mut Attempt) -> Result<Step> {
        loop {
            if attempt.may_create {
                self.log(log::Level::Debug, || "Acquiring lock".into());
                if let Some(hold) = self.try_create(attempt).await? {
                    self.log(log::Level::Debug, || "Successfully acquired lock".into());
                    return Ok(Step::Held(hold));
                }
                self.log(log::Level::Debug, || {
                    "Error acquiring lock. Investigating why...".into()
                });
            }
            let look = self.look(attempt, attempt.may_create).await?;
            // The read saw the object: whatever a create of ours did is known.
            attempt.create_in_doubt = false;
            attempt.may_create = matches!(look, Look::Free);
            if attempt.may_create && attempt.immediate < IMMEDIATE_RETRIES {
                attempt.immediate += 1;
                continue;
            }
            let now = Instant::now();
            if attempt.give_up_at.is_some_and(|at| now >= at) {
                return Ok(Step::GaveUp);
            }
            let mut wait = attempt.steps.next_wait();
            if let Look::Held(stale_in) = look {
                // Look again just after it would turn stale, not a backoff later.
                wait = wait.min(stale_in + Duration::from_millis(20));
            }
            if let Some(at) = attempt.give_up_at {
                wait = wait.min(at - now);
            }
            self.log(log::Level::Info, || {
                format!(
                    "Unable to acquire lock. Will try again in {:.1} seconds",
                    wait.as_secs_f64()
                )
            });
            attempt.immediate = 0;
            return Ok(Step::Pause(wait));
        }
    }

    /// One create; None if the object exists.
    async fn try_create(self: &Arc<Self>, attempt: &mut Attempt) -> Result<Option<Hold>> {
        let requests = self.requests();
        let writer = &attempt.writer;
        let clock_was_known = self.clock.is_known();
        // Each try writes an `expires_at` from when it is sent, so that
        // retries do not eat into the lease; the last try is the one that
        // landed.
        let last_try = Mutex::new((Stamp::now(), 0.0));
        // Interrupted in a pause after a failed try, it may have landed.
        attempt.create_in_doubt = true;
        let created = requests
            .call_async(
                "create",
                || {
                    let metadata = writer.metadata(1, self.expires_at());
                    *last_try.lock().unwrap_or_else(|e| e.into_inner()) =
                        (Stamp::now(), metadata.expires_at);
                    self.store.create(metadata)
                },
                attempt.retry_until,
            )
            .await;
        let (sent, written) = *last_try.lock().unwrap_or_else(|e| e.into_inner());
        // A request that failed for good after none failed transiently
        // created nothing.
        attempt.create_in_doubt = created.retried || created.result.is_ok();
        let reply = match requests.answered("create", created)? {
            Ok(reply) => reply,
            Err(StoreError::PreconditionFailed) => return Ok(None),
            Err(other) => return Err(requests.failed("create", other)),
        };
        let mut version = reply.value.version;
        let mut deadline = self.deadline(written, sent);
        // The first request of this lock wrote `expires_at` by the local
        // wall clock. If the server's differs, others may find the object
        // stale already (or wait for it too long): correct it before
        // counting it as ours. Whichever of this write and a waiter's delete
        // lands first makes the other fail. If the correction cannot be
        // made, the object is given back (by the caller's clean-up, as
        // `create_in_doubt` stays set), never kept unrefreshed until its TTL.
        let off = deadline.as_secs_f64() - (sent + self.lease.ttl).as_secs_f64();
        if !clock_was_known && off.abs() > 1.0 {
            let sent = Stamp::now();
            let corrected = requests
                .call_async(
                    "refresh",
                    || async move { Ok(write_if_ours(self, writer, version).await?) },
                    attempt.retry_until,
                )
                .await;
            match requests.answered("refresh", corrected)? {
                Ok(reply) => {
                    version = reply.value.version;
                    deadline = self.deadline(reply.value.expires_at.unwrap_or(0.0), sent);
                }
                // A read showed it gone or someone else's: nothing of ours is left.
                Err(_) => {
                    attempt.create_in_doubt = false;
                    return Ok(None);
                }
            }
        }
        attempt.create_in_doubt = false;
        Ok(Some(self.hold(attempt.writer.clone(), version, deadline)))
    }

    /// Reads the object after a failed create and clears it if it is ours
    /// from before or stale.
    async fn look(&self, attempt: &Attempt, after_create: bool) -> Result<Look> {
        let requests = self.requests();
        let read = requests
            .call_async("read", || self.store.get(), attempt.retry_until)
            .await;
        let reply = match requests.answered("read", read)? {
            Ok(reply) => reply,
            Err(other) => return Err(requests.failed("read", other)),
        };
        let Some(object) = reply.value else {
            if after_create {
                self.log(log::Level::Warn, || {
                    "Lock was deleted right after having created it. Retrying.".into()
                });
            } else {
                self.log(log::Level::Debug, || "Lock was released. Acquiring".into());
            }
            return Ok(Look::Free);
        };
        if object.identity.as_deref() == Some(attempt.writer.identity.as_str()) {
            self.log(log::Level::Warn, || {
                "Lock was already owned by this instance, but was abandoned. Resetting lock".into()
            });
            self.delete_version(object.version, attempt.retry_until)
                .await?;
            return Ok(Look::Free);
        }
        let server_now = reply
            .server_time
            .unwrap_or_else(|| self.clock.at_least_now());
        let expires_at = object.expires_at.unwrap_or(f64::NEG_INFINITY);
        if server_now > expires_at {
            self.log(log::Level::Warn, || "Lock is stale. Resetting lock".into());
            self.delete_version(object.version, attempt.retry_until)
                .await?;
            return Ok(Look::Free);
        }
        self.log(log::Level::Debug, || {
            "Lock was already acquired, and is not stale".into()
        });
        Ok(Look::Held(Duration::from_secs_f64(
            (expires_at - server_now).min(1e9),
        )))
    }

    /// Deletes exactly `version`: Ok(false) if it had changed or gone.
    async fn delete_version(&self, version: Version, until: Option<Instant>) -> Result<bool> {
        let requests = self.requests();
        let answer = requests
            .call_async("delete", || self.store.delete(version), until)
            .await;
        Ok(requests.answered("delete", answer)?.is_ok())
    }

    /// After an acquire failed with `error` while a create of ours may
    /// have landed: reads the object and deletes it if this attempt wrote
    /// it (not merely someone with the same identity), so it
    /// does not block everyone until it goes stale. Returns the error to
    /// report, saying so if the object could not be removed.
    pub(crate) fn remove_leftover(&self, writer: &Writer, error: Error) -> Error {
        let removed = runtime::block_on(self.remove_leftover_async(writer, &error));
        self.leftover_error(removed, error)
    }

    /// Reads the object and deletes it if `writer` made it (see
    /// [`Engine::remove_leftover`]), `error` being why the acquire failed.
    pub(crate) async fn remove_leftover_async(&self, writer: &Writer, error: &Error) -> Result<()> {
        let requests = self.requests();
        let until = Some(Instant::now() + LEFTOVER_CLEANUP);
        let read = requests
            .call_async("read", || self.store.get(), until)
            .await;
        match requests.answered("read", read)? {
            Ok(Reply {
                value: Some(object),
                ..
            }) if writer.made(&object) => {
                self.delete_version(object.version, until).await?;
                self.log(log::Level::Warn, || {
                    format!("Gave back the lock object this attempt had created: {error}")
                });
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The error an acquire that failed with `error` reports once its
    /// leftover was `removed` (or not).
    pub(crate) fn leftover_error(&self, removed: Result<()>, error: Error) -> Error {
        match (removed, error) {
            (Ok(()), error) => error,
            (Err(cleanup), Error::Backend {
                server,
                operation,
                message,
                source,
                transient,
            }) => Error::Backend {
                server,
                operation,
                message: format!(
                    "{message}; a lock object this attempt may have created could not be removed ({cleanup}) and blocks others until it goes stale"
                ),
                source,
                transient,
            },
            (Err(cleanup), error) => {
                self.log(log::Level::Error, || {
                    format!("A lock object this attempt may have created could not be removed and blocks others until it goes stale: {cleanup}")
                });
                error
            }
        }
    }
}
