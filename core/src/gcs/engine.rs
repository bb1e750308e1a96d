//! The engine of the GCS lock, against any [`Store`]: what every hold of
//! one lock object shares, and a hold's life after it was taken (taking it
//! is `acquire.rs`): refreshed in the background by PATCHing `expires_at`
//! with the generation and metageneration preconditions, and released by
//! deleting exactly our version. After a 412, a read decides whether the
//! object is still ours, by the nonce of our writes (`writer.rs`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::clock::ServerClock;
use super::requests::{Requests, RETRY_FIRST_WAIT, SHORTEST_RETRY};
use super::store::{LockObject, Reply, Store, StoreError, Version};
use super::writer::Writer;
use crate::clock::Stamp;
use crate::error::Result;
use crate::health::Health;
use crate::lease::{KeepAlive, Lease, Verdict};
use crate::limits;
use crate::runtime;
use crate::wait::Interrupt;

/// Receives the lock's log records with the gem's levels (debug: each
/// step; info: waits and refreshes; warn: recoveries; error: failed
/// refreshes). Called from the runtime thread too: it must not block.
pub type LogSink = Arc<dyn Fn(log::Level, &str) + Send + Sync>;

/// One lock object's algorithm: its store, lease, clock and log.
pub(crate) struct Engine {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) lease: Lease,
    pub(crate) backoff: Backoff,
    pub(crate) request_timeout: Duration,
    /// "lock gs://bucket/path", for messages.
    pub(crate) what: String,
    pub(crate) log: LogSink,
    pub(crate) clock: ServerClock,
    /// The last refresh failure of any hold, kept after it heals.
    pub(crate) last_refresh_error: Mutex<Option<String>>,
}

/// One thread's hold: its object version, shared with its refresher.
pub(crate) struct Hold {
    pub(crate) writer: Writer,
    pub(crate) generation: i64,
    pub(crate) health: Arc<Health>,
    /// Locked by the refresher for the length of a PATCH, so stopping it
    /// never leaves a write in flight whose new metageneration we miss.
    version: Arc<tokio::sync::Mutex<Version>>,
    refresher: JoinHandle<()>,
    /// Until when a create try of the wait that took this hold may still
    /// land late: watched for once the hold is given back.
    pub(crate) late_creates_until: Option<Instant>,
}

impl Hold {
    /// Stops refreshing (waiting out a refresh in flight) and returns the
    /// version last written.
    pub(crate) fn stop(self) -> Version {
        let version = self.version.clone();
        runtime::block_on(async move {
            let version = version.lock().await;
            self.refresher.abort();
            *version
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.refresher.abort();
    }
}

impl Engine {
    pub(crate) fn log(&self, level: log::Level, message: impl FnOnce() -> String) {
        (self.log)(level, &message());
    }

    /// The `expires_at` a write sent now sets.
    pub(crate) fn expires_at(&self) -> f64 {
        self.clock.at_most_now() + self.lease.ttl.as_secs_f64()
    }

    /// The store as this lock asks it.
    pub(crate) fn requests(&self) -> Requests<'_> {
        Requests {
            store: &*self.store,
            clock: &self.clock,
            timeout: self.request_timeout,
            what: &self.what,
            log: &*self.log,
        }
    }

    /// Releases a hold: deletes our version. Ok(false) if the object was no
    /// longer ours (taken over after going stale, deleted, or its metadata
    /// changed by someone else: then it is left alone). Transient
    /// failures are retried until the lease runs out (at least
    /// [`SHORTEST_RETRY`]): until then nobody else can have it.
    pub(crate) fn release(
        self: &Arc<Self>,
        hold: Hold,
        interrupted: Interrupt<'_>,
    ) -> Result<bool> {
        let (writer, late_creates_until) = (hold.writer.clone(), hold.late_creates_until);
        let released = self.give_back(hold, interrupted);
        if let Some(until) = late_creates_until {
            self.watch_for_late_creates(writer, until);
        }
        released
    }

    fn give_back(&self, hold: Hold, interrupted: Interrupt<'_>) -> Result<bool> {
        let requests = self.requests();
        let writer = hold.writer.clone();
        let was_healthy = hold.health.is_healthy();
        let until = Some(limits::from_now(
            hold.health.valid_until().left().max(SHORTEST_RETRY),
        ));
        let mut version = hold.stop();
        let mut delete_may_have_landed = false;
        // Each revision of our generation that we wrote is provably ours,
        // and a write of ours that timed out may still land after a read:
        // the delete follows them until the lease deadline (`until` ends
        // the calls), not a fixed number of times.
        loop {
            let answer =
                requests.call("delete", || self.store.delete(version), until, interrupted)?;
            delete_may_have_landed |= answer.retried;
            match requests.answered("delete", answer)? {
                Ok(_) => return Ok(true),
                Err(StoreError::PreconditionFailed | StoreError::NotFound) => {}
                // Refused for good (no permission, an object hold): the
                // object stays, and that is an error, not a lost lock.
                Err(refusal) => return Err(requests.failed("delete", refusal)),
            }
            match self.read(until, interrupted)? {
                Some(object)
                    if object.version.generation == version.generation
                        && writer.made(&object)
                        && object.version != version =>
                {
                    version = object.version
                }
                // Our generation, changed by someone else: our delete did
                // not land, and the object is no longer provably ours.
                Some(object) if object.version.generation == version.generation => {
                    return Ok(false)
                }
                // Gone, or re-created. If an earlier try of this delete may
                // have landed while the lease was live, nobody could have
                // had the lock before it: that was our release.
                _ => return Ok(delete_may_have_landed && was_healthy),
            }
            if until.is_some_and(|until| Instant::now() >= until) {
                return Ok(false);
            }
        }
    }

    /// The object as a read shows it; None if it is gone (or the read was
    /// refused).
    fn read(
        &self,
        until: Option<Instant>,
        interrupted: Interrupt<'_>,
    ) -> Result<Option<LockObject>> {
        let requests = self.requests();
        let read = requests.call("read", || self.store.get(), until, interrupted)?;
        Ok(requests
            .answered("read", read)?
            .ok()
            .and_then(|reply| reply.value))
    }

    /// Whether the object exists, and whether `identity` holds it.
    pub(crate) fn inspect(&self, identity: &str) -> Result<(bool, bool)> {
        let requests = self.requests();
        let until = Some(Instant::now() + SHORTEST_RETRY);
        let read = requests.call("read", || self.store.get(), until, &|| false)?;
        match requests.answered("read", read)? {
            Ok(Reply {
                value: Some(object),
                ..
            }) => Ok((true, object.identity.as_deref() == Some(identity))),
            Ok(_) => Ok((false, false)),
            Err(other) => Err(requests.failed("read", other)),
        }
    }

    /// A hold of `version`, kept alive from now on by its own refresher.
    pub(crate) fn hold(
        self: &Arc<Self>,
        writer: Writer,
        version: Version,
        deadline: Stamp,
    ) -> Hold {
        let health = Arc::new(Health::new(deadline));
        let generation = version.generation;
        let version = Arc::new(tokio::sync::Mutex::new(version));
        let refresher = runtime::spawn(refresh_loop(
            self.clone(),
            writer.clone(),
            version.clone(),
            health.clone(),
        ));
        Hold {
            writer,
            generation,
            health,
            version,
            refresher,
            late_creates_until: None,
        }
    }

    /// Until when a write sent at `sent` that set `expires_at` to `written`
    /// (server time) surely keeps the object ours: until the server's
    /// clock, at its fastest by the replies seen, reaches `written`. Without
    /// any dated reply (a server sending no `Date`), the TTL from the send
    /// less a margin for clocks that nearly agree.
    pub(crate) fn deadline(&self, written: f64, sent: Stamp) -> Stamp {
        self.clock.deadline(written).unwrap_or_else(|| {
            let ttl = self.lease.ttl;
            sent + (ttl - (ttl / 10).min(Duration::from_millis(500)))
        })
    }

    fn record_refresh_error(&self, message: &str) {
        *self
            .last_refresh_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(message.to_owned());
        self.log(log::Level::Error, || {
            format!("Error refreshing lock: {message}")
        });
    }
}

// Each starts with the gem's own words, which its users grep their logs for.
const TAKEN_OVER: &str =
    "Lock object has an unexpected generation number: another holder took it over";
const CHANGED: &str = "Lock object has an unexpected metageneration number: its metadata was changed by someone else (no write of ours made it), so it is no longer provably ours";
const DELETED: &str = "Lock object has been unexpectedly deleted";

/// Why a refresh did not land.
pub(crate) enum RefreshError {
    /// A reply or a read showed that the object is not ours: why.
    NotOurs(&'static str),
    /// The server could not be asked, or refused the request: nothing is
    /// known.
    Failed(StoreError),
}

impl From<StoreError> for RefreshError {
    fn from(error: StoreError) -> Self {
        RefreshError::Failed(error)
    }
}

impl From<RefreshError> for StoreError {
    /// As a store answer: "not ours" is the 412 that started it.
    fn from(error: RefreshError) -> Self {
        match error {
            RefreshError::NotOurs(_) => StoreError::PreconditionFailed,
            RefreshError::Failed(error) => error,
        }
    }
}

/// Keeps one hold alive until aborted: PATCHes `expires_at` with the
/// generation and metageneration preconditions. Lost at once only when the
/// server shows the object gone, someone else's, or changed by anyone but
/// us (so `release` leaves it alone); failures to ask are
/// retried, sooner than the refresh period, until the lease runs out.
/// `max_refresh_fails` of them in a row make the hold unhealthy meanwhile;
/// a refresh that lands afterwards proves it was kept and heals it.
async fn refresh_loop(
    engine: Arc<Engine>,
    writer: Writer,
    version: Arc<tokio::sync::Mutex<Version>>,
    health: Arc<Health>,
) {
    let lease = &engine.lease;
    let mut keep = KeepAlive::new(lease);
    let mut wait = keep.next_try(None);
    loop {
        tokio::time::sleep(wait).await;
        // Held only for the requests, so stopping the hold never waits out
        // the pauses between retries.
        let mut current = version.lock().await;
        engine.log(log::Level::Info, || "Refreshing lock".into());
        let sent = Stamp::now();
        match write_if_ours(&engine, &writer, *current).await {
            Ok(reply) => {
                *current = reply.value.version;
                keep.succeeded();
                wait = keep.next_try(None);
                let written = reply.value.expires_at.unwrap_or(0.0);
                health.extend(engine.deadline(written, sent));
                health.set_failing(None);
                engine.log(log::Level::Debug, || {
                    format!(
                        "Done refreshing lock. metageneration={}",
                        current.metageneration
                    )
                });
            }
            Err(RefreshError::NotOurs(reason)) => {
                engine.record_refresh_error(reason);
                engine.log(log::Level::Error, || {
                    "Lock refresh failed permanently. Declaring lock as unhealthy".into()
                });
                health.mark_lost(reason);
                return;
            }
            Err(RefreshError::Failed(failure)) => {
                let verdict = keep.failed(&failure);
                let failures = keep.failures();
                engine.record_refresh_error(&failure.to_string());
                if health.valid_until().has_passed() {
                    engine.log(log::Level::Error, || {
                        format!("Lock refresh failed {failures} times, until its lease ran out. Declaring lock as unhealthy")
                    });
                    health.mark_lost(format!(
                        "its lease ran out while {failures} refreshes in a row failed, the last with: {failure}"
                    ));
                    return;
                }
                if let Verdict::Exhausted(reason) = verdict {
                    engine.log(log::Level::Error, || {
                        format!("Lock refresh failed {failures} times in succession. Declaring lock as unhealthy until one succeeds")
                    });
                    health.set_failing(Some(reason));
                }
                // Again soon, as every caller-side request does, but never
                // later than the next regular refresh.
                wait = keep
                    .next_try(Some(RETRY_FIRST_WAIT))
                    .min(health.valid_until().left());
            }
        }
    }
}

/// Writes a fresh `expires_at` if the object is still the revision of
/// ours we last knew (`expected`) or one a later write of ours made; the
/// object returned carries the `expires_at` written.
pub(crate) async fn write_if_ours(
    engine: &Engine,
    writer: &Writer,
    mut expected: Version,
) -> Result<Reply<LockObject>, RefreshError> {
    let requests = engine.requests();
    // Twice at most: once more after a read found that an earlier write of
    // ours landed without its reply, for an `expires_at` from now.
    for _ in 0..2 {
        let metadata = writer.metadata(expected.metageneration + 1, engine.expires_at());
        let written = requests
            .ask(engine.store.update(expected, metadata.clone()))
            .await;
        match written {
            Err(StoreError::PreconditionFailed) => {}
            Err(StoreError::NotFound) => return Err(RefreshError::NotOurs(DELETED)),
            other => return Ok(with_expiry(other, metadata.expires_at)?),
        }
        // A 412 proves only that the metageneration moved: an earlier write
        // of ours may have landed without its reply, or someone else wrote.
        // Only our nonce on the revision now there tells which.
        let read = requests.ask(engine.store.get()).await?;
        match read.value {
            None => return Err(RefreshError::NotOurs(DELETED)),
            Some(object) if object.version.generation != expected.generation => {
                return Err(RefreshError::NotOurs(TAKEN_OVER))
            }
            Some(object) if !writer.made(&object) => return Err(RefreshError::NotOurs(CHANGED)),
            Some(object) => expected = object.version,
        }
    }
    // The second write met a 412 although the revision it named was ours:
    // something wrote in between. The next try's read says what.
    Err(RefreshError::Failed(StoreError::Transient(
        "the lock object changed between reading and refreshing it".into(),
    )))
}

/// A written object as we wrote it, whatever the reply echoed.
fn with_expiry(
    written: Result<Reply<LockObject>, StoreError>,
    expires_at: f64,
) -> Result<Reply<LockObject>, StoreError> {
    written.map(|mut reply| {
        reply.value.expires_at = Some(expires_at);
        reply
    })
}

impl crate::holds::Held for Hold {
    fn health(&self) -> &Health {
        &self.health
    }
}
