//! Taking the GCS lock: create the lock object only if absent; on conflict
//! look at it (our own identity → recover at once; stale by the server's
//! clock → delete that exact version and retry; else wait, looking again
//! with reads only). An acquire that gives up removes any object its own
//! create may have left.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::engine::{write_if_ours, Engine, Hold};
use super::requests::{pause_unless_stopped, SHORTEST_RETRY};
use super::store::{Reply, StoreError, Version};
use super::writer::Writer;
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::runtime;
use crate::wait::{Deadline, Interrupt};

/// How long an acquire that gives up keeps trying to remove an object its
/// create may have left, and how long after a create's try that got no
/// answer (or was retried) lockyard watches for that try to land late;
/// past it, such an object blocks others until stale.
const LEFTOVER_CLEANUP: Duration = Duration::from_secs(5);
/// How often the watch for late creates reads the object.
const LEFTOVER_LOOK_AGAIN: Duration = Duration::from_millis(200);
/// Immediate retries (object vanished, stale object removed) before a wait.
const IMMEDIATE_RETRIES: u32 = 3;

enum Look {
    /// No object: try to create it.
    Free,
    /// Someone else holds it; it turns stale in about this long.
    Held(Duration),
}

/// One caller's acquisition: who, until when, and what it may have left.
struct Attempt<'a> {
    /// Writes the objects of this attempt, and of the hold it becomes.
    writer: Writer,
    /// When transient failures stop being retried (None: never).
    retry_until: Option<Instant>,
    /// Ends the wait between requests (never one on its way, which may
    /// still land).
    stop: &'a AtomicBool,
    /// A create was sent and no read since has shown what became of it:
    /// an object of ours may be on the server with nobody refreshing it.
    create_in_doubt: bool,
    /// A try of some create of this attempt was cut off by the request
    /// timeout: it may still be on its way, and land (once the name is
    /// free) until about this instant, whatever a later try or read said.
    late_creates_until: Option<Instant>,
}

/// Never set: for requests that run to their end.
pub(crate) static NO_STOP: AtomicBool = AtomicBool::new(false);

impl Engine {
    /// Waits until `deadline` (a zero timeout: one attempt, which may
    /// still clear a stale object) for the lock as `identity`: the wait of
    /// [`Engine::acquire_async`], on lockyard's runtime, while the calling
    /// thread asks `interrupted` at least every 50 ms. Interrupted, it
    /// returns at once, and the wait cleans up after itself (see
    /// `in_task.rs`).
    pub(crate) fn acquire(
        self: &Arc<Self>,
        identity: &str,
        deadline: Deadline,
        interrupted: Interrupt<'_>,
    ) -> Result<Option<Hold>> {
        let waiting = self.acquire_async(identity, deadline);
        match runtime::block_on_interruptibly(waiting, None, interrupted) {
            runtime::Ended::Done(outcome) => outcome,
            _ => Err(Error::Interrupted(self.what.clone())),
        }
    }

    /// The wait of every acquire, run on lockyard's runtime (see
    /// [`Engine::acquire`] and `in_task.rs`). A waiter only reads:
    /// GCS allows about one write per second per object, and create
    /// attempts would spend it. Transient failures are retried until the
    /// timeout (at least [`SHORTEST_RETRY`]). `stop` ends the wait with
    /// [`Error::Interrupted`] at its next pause or request, never cutting
    /// a request on its way (a create may land after its sender gave up).
    /// An acquire that fails removes first any object its own create may
    /// have left.
    pub(crate) async fn wait(
        self: &Arc<Self>,
        identity: &str,
        deadline: Deadline,
        stop: &AtomicBool,
    ) -> Result<Option<Hold>> {
        let started = Instant::now();
        if deadline.check()?.spent() {
            return Ok(None);
        }
        let give_up_at = deadline.at();
        let mut attempt = Attempt {
            writer: Writer::new(identity),
            retry_until: give_up_at.map(|at| at.max(started + SHORTEST_RETRY)),
            stop,
            create_in_doubt: false,
            late_creates_until: None,
        };
        let outcome = match self.wait_for_lock(&mut attempt, give_up_at).await {
            Ok(Some(mut hold)) => {
                // Watched for once the hold is given back: until then its
                // object stands in the way of any late try.
                hold.late_creates_until = attempt.late_creates_until;
                return Ok(Some(hold));
            }
            Err(error) if attempt.create_in_doubt => {
                let removed = self.remove_leftover(&attempt.writer, &error).await;
                Err(self.leftover_error(removed, error))
            }
            other => other,
        };
        if let Some(until) = attempt.late_creates_until {
            self.watch_for_late_creates(attempt.writer, until);
        }
        outcome
    }

    async fn wait_for_lock(
        self: &Arc<Self>,
        attempt: &mut Attempt<'_>,
        give_up_at: Option<Instant>,
    ) -> Result<Option<Hold>> {
        let mut steps = self.backoff.steps();
        let mut immediate = 0;
        let mut may_create = true;
        loop {
            self.go_on(attempt)?;
            if may_create {
                self.log(log::Level::Debug, || "Acquiring lock".into());
                if let Some(hold) = self.try_create(attempt).await? {
                    self.log(log::Level::Debug, || "Successfully acquired lock".into());
                    return Ok(Some(hold));
                }
                self.log(log::Level::Debug, || {
                    "Error acquiring lock. Investigating why...".into()
                });
            }
            self.go_on(attempt)?;
            let look = self.look(attempt, may_create).await?;
            // The read saw the object: whatever a create of ours did is known.
            attempt.create_in_doubt = false;
            may_create = matches!(look, Look::Free);
            if may_create && immediate < IMMEDIATE_RETRIES {
                immediate += 1;
                continue;
            }
            let now = Instant::now();
            if give_up_at.is_some_and(|at| now >= at) {
                return Ok(None);
            }
            let mut wait = steps.next_wait();
            if let Look::Held(stale_in) = look {
                // Look again just after it would turn stale, not a backoff later.
                wait = wait.min(stale_in + Duration::from_millis(20));
            }
            if let Some(at) = give_up_at {
                wait = wait.min(at - now);
            }
            self.log(log::Level::Info, || {
                format!(
                    "Unable to acquire lock. Will try again in {:.1} seconds",
                    wait.as_secs_f64()
                )
            });
            pause_unless_stopped(wait, attempt.stop, &self.what).await?;
            immediate = 0;
        }
    }

    /// One create; None if the object exists.
    async fn try_create(self: &Arc<Self>, attempt: &mut Attempt<'_>) -> Result<Option<Hold>> {
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
                attempt.stop,
            )
            .await;
        // A try cut off by the request timeout may land later, whatever a
        // later try says (one the server answered, 503 included, cannot);
        // so may one before a stop between tries.
        let unsure = created.as_ref().map_or(true, |created| created.cut_off);
        if unsure {
            attempt.late_creates_until = Some(Instant::now() + LEFTOVER_CLEANUP);
        }
        let created = created?;
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
            // Stopped, the correction is not sent: the clean-up gives the
            // object back (`create_in_doubt` is still set).
            self.go_on(attempt)?;
            let sent = Stamp::now();
            let corrected = requests
                .call_async(
                    "refresh",
                    || async move { Ok(write_if_ours(self, writer, version).await?) },
                    attempt.retry_until,
                    attempt.stop,
                )
                .await?;
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

    /// Ok unless the wait was stopped. Checked before each request: a
    /// stopped wait sends nothing more (its caller gone, the same thread may
    /// acquire again as the same identity, and a delete of "an abandoned
    /// object of ours" would take that new hold).
    fn go_on(&self, attempt: &Attempt<'_>) -> Result<()> {
        if attempt.stop.load(Ordering::Acquire) {
            return Err(Error::Interrupted(self.what.clone()));
        }
        Ok(())
    }

    /// Reads the object after a failed create and clears it if it is ours
    /// from before or stale.
    async fn look(&self, attempt: &Attempt<'_>, after_create: bool) -> Result<Look> {
        let requests = self.requests();
        let read = requests
            .call_async(
                "read",
                || self.store.get(),
                attempt.retry_until,
                attempt.stop,
            )
            .await?;
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
            self.go_on(attempt)?;
            self.delete_version(object.version, attempt.retry_until, attempt.stop)
                .await?;
            return Ok(Look::Free);
        }
        let server_now = reply
            .server_time
            .unwrap_or_else(|| self.clock.at_least_now());
        let expires_at = object.expires_at.unwrap_or(f64::NEG_INFINITY);
        if server_now > expires_at {
            self.log(log::Level::Warn, || "Lock is stale. Resetting lock".into());
            self.go_on(attempt)?;
            self.delete_version(object.version, attempt.retry_until, attempt.stop)
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
    async fn delete_version(
        &self,
        version: Version,
        until: Option<Instant>,
        stop: &AtomicBool,
    ) -> Result<bool> {
        let requests = self.requests();
        let answer = requests
            .call_async("delete", || self.store.delete(version), until, stop)
            .await?;
        Ok(requests.answered("delete", answer)?.is_ok())
    }

    /// After an acquire failed with `error` while a create of ours may
    /// have landed: reads the object and deletes it if this attempt wrote
    /// it (not merely someone with the same identity), so it does not
    /// block everyone until it goes stale. A delete that finds the object
    /// changed reads it again: a write of ours (the clock's correction) may
    /// have landed late. Up to [`LEFTOVER_CLEANUP`]; a try that may land
    /// later yet is left to [`Engine::watch_for_late_creates`].
    async fn remove_leftover(&self, writer: &Writer, error: &Error) -> Result<()> {
        let until = Instant::now() + LEFTOVER_CLEANUP;
        loop {
            match self.remove_if_made(writer, until).await? {
                None => return Ok(()),
                Some(true) => {
                    self.log(log::Level::Warn, || {
                        format!("Gave back the lock object this attempt had created: {error}")
                    });
                    return Ok(());
                }
                Some(false) if Instant::now() >= until => {
                    return Err(self.requests().failed(
                        "delete",
                        StoreError::Transient("the object kept changing".into()),
                    ));
                }
                Some(false) => {}
            }
        }
    }

    /// Reads the object and deletes it if `writer` made it, trying until
    /// `until`: None if there is nothing of `writer`'s, else whether the
    /// delete took (false: the object changed under it).
    async fn remove_if_made(&self, writer: &Writer, until: Instant) -> Result<Option<bool>> {
        let requests = self.requests();
        let read = requests
            .call_async("read", || self.store.get(), Some(until), &NO_STOP)
            .await?;
        match requests.answered("read", read)? {
            Ok(Reply {
                value: Some(object),
                ..
            }) if writer.made(&object) => Ok(Some(
                self.delete_version(object.version, Some(until), &NO_STOP)
                    .await?,
            )),
            _ => Ok(None),
        }
    }

    /// Watches, in the background, until `until`, for an object that a
    /// create of `writer` sent earlier lands late: no hold of `writer` is
    /// live any more (its wait gave up, or its hold was given back), so
    /// such an object is a leftover nobody refreshes, and is deleted. An
    /// exiting process waits for the watch.
    pub(crate) fn watch_for_late_creates(self: &Arc<Self>, writer: Writer, until: Instant) {
        if Instant::now() >= until {
            return;
        }
        let engine = self.clone();
        runtime::spawn_awaited(async move {
            loop {
                if let Ok(Some(true)) = engine.remove_if_made(&writer, until).await {
                    engine.log(log::Level::Warn, || {
                        "Deleted a lock object that a create of ours, sent earlier, left when it landed late".into()
                    });
                }
                if Instant::now() + LEFTOVER_LOOK_AGAIN >= until {
                    return;
                }
                tokio::time::sleep(LEFTOVER_LOOK_AGAIN).await;
            }
        });
    }

    /// The error an acquire that failed with `error` reports once its
    /// leftover was `removed` (or not).
    fn leftover_error(&self, removed: Result<()>, error: Error) -> Error {
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
