//! The engine of the GCS lock, against any [`Store`]: what every hold of
//! one lock object shares, and a hold's life after it was taken (taking it
//! is `acquire.rs`): refreshed in the background by PATCHing `expires_at`
//! with the generation and metageneration preconditions, and released by
//! deleting exactly our version.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::clock::ServerClock;
use super::requests::{Requests, RETRY_FIRST_WAIT, SHORTEST_RETRY};
use super::store::{LockObject, Metadata, Reply, Store, StoreError, Version};
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
    pub(crate) identity: String,
    pub(crate) generation: i64,
    pub(crate) health: Arc<Health>,
    /// Locked by the refresher for the length of a PATCH, so stopping it
    /// never leaves a write in flight whose new metageneration we miss.
    version: Arc<tokio::sync::Mutex<Version>>,
    refresher: JoinHandle<()>,
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

    pub(crate) fn metadata(&self, identity: &str) -> Metadata {
        Metadata {
            identity: identity.to_owned(),
            expires_at: self.clock.at_most_now() + self.lease.ttl.as_secs_f64(),
        }
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
    /// longer ours (taken over after going stale, or deleted). Transient
    /// failures are retried until the lease runs out (at least
    /// [`SHORTEST_RETRY`]): until then nobody else can have it.
    pub(crate) fn release(&self, hold: Hold, interrupted: Interrupt<'_>) -> Result<bool> {
        let requests = self.requests();
        let identity = hold.identity.clone();
        let was_healthy = hold.health.is_healthy();
        let until = Some(limits::from_now(
            hold.health.valid_until().left().max(SHORTEST_RETRY),
        ));
        let mut version = hold.stop();
        let mut delete_may_have_landed = false;
        // Twice at most: a refresh whose reply was lost may have moved the
        // metageneration once.
        for _ in 0..2 {
            let answer =
                requests.call("delete", || self.store.delete(version), until, interrupted)?;
            delete_may_have_landed |= answer.retried;
            if requests.answered("delete", answer)?.is_ok() {
                return Ok(true);
            }
            match self.still_ours(&identity, version, until, interrupted)? {
                Some(current) if current != version => version = current,
                // Gone, or someone else's. If an earlier try of this delete
                // may have landed while the lease was live, nobody could
                // have had the lock before it: that was our release.
                _ => return Ok(delete_may_have_landed && was_healthy),
            }
        }
        Ok(false)
    }

    /// The current version if the object is still the generation we
    /// created under our identity; None if a read shows it is not.
    fn still_ours(
        &self,
        identity: &str,
        version: Version,
        until: Option<Instant>,
        interrupted: Interrupt<'_>,
    ) -> Result<Option<Version>> {
        let requests = self.requests();
        let read = requests.call("read", || self.store.get(), until, interrupted)?;
        Ok(match requests.answered("read", read)? {
            Ok(Reply {
                value: Some(object),
                ..
            }) if object.version.generation == version.generation
                && object.identity.as_deref() == Some(identity) =>
            {
                Some(object.version)
            }
            _ => None,
        })
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
        identity: &str,
        version: Version,
        deadline: Stamp,
    ) -> Hold {
        let health = Arc::new(Health::new(deadline));
        let generation = version.generation;
        let version = Arc::new(tokio::sync::Mutex::new(version));
        let refresher = runtime::spawn(refresh_loop(
            self.clone(),
            identity.to_owned(),
            version.clone(),
            health.clone(),
        ));
        Hold {
            identity: identity.to_owned(),
            generation,
            health,
            version,
            refresher,
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

const TAKEN_OVER: &str =
    "the lock object has an unexpected generation or metageneration: another holder took it over";
const DELETED: &str = "the lock object has been unexpectedly deleted";

/// Keeps one hold alive until aborted: PATCHes `expires_at` with the
/// generation and metageneration preconditions. Lost at once only when the
/// server shows the object gone or someone else's; failures to ask are
/// retried, sooner than the refresh period, until the lease runs out.
/// `max_refresh_fails` of them in a row make the hold unhealthy meanwhile;
/// a refresh that lands afterwards proves it was kept and heals it.
async fn refresh_loop(
    engine: Arc<Engine>,
    identity: String,
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
        match write_if_ours(&engine, &identity, *current).await {
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
            Err(gone @ (StoreError::PreconditionFailed | StoreError::NotFound)) => {
                let reason = match gone {
                    StoreError::NotFound => DELETED,
                    _ => TAKEN_OVER,
                };
                engine.record_refresh_error(reason);
                engine.log(log::Level::Error, || {
                    "Lock refresh failed permanently. Declaring lock as unhealthy".into()
                });
                health.mark_lost(reason);
                return;
            }
            Err(failure) => {
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

/// Writes a fresh `expires_at` if the object is still the one this
/// identity created; the object returned carries the `expires_at` written.
/// Err(PreconditionFailed): a read showed another holder's object;
/// Err(NotFound): the object is gone; other errors: the server could not be
/// asked, and nothing is known.
pub(crate) async fn write_if_ours(
    engine: &Engine,
    identity: &str,
    expected: Version,
) -> Result<Reply<LockObject>, StoreError> {
    let requests = engine.requests();
    let metadata = engine.metadata(identity);
    let written = requests
        .ask(engine.store.update(expected, metadata.clone()))
        .await;
    if !matches!(written, Err(StoreError::PreconditionFailed)) {
        return with_expiry(written, &metadata);
    }
    // A 412 proves only that the metageneration moved: an earlier write of
    // ours may have landed without its reply. Only a read tells.
    let read = requests.ask(engine.store.get()).await?;
    match read.value {
        None => Err(StoreError::NotFound),
        Some(object)
            if object.version.generation == expected.generation
                && object.identity.as_deref() == Some(identity) =>
        {
            let written = requests
                .ask(engine.store.update(object.version, metadata.clone()))
                .await;
            match with_expiry(written, &metadata) {
                // Changed again between our read and write: ask again later.
                Err(StoreError::PreconditionFailed) => Err(StoreError::Transient(
                    "the lock object changed between reading and refreshing it".into(),
                )),
                other => other,
            }
        }
        Some(_) => Err(StoreError::PreconditionFailed),
    }
}

/// A written object as we wrote it, whatever the reply echoed.
fn with_expiry(
    written: Result<Reply<LockObject>, StoreError>,
    metadata: &Metadata,
) -> Result<Reply<LockObject>, StoreError> {
    written.map(|mut reply| {
        reply.value.expires_at = Some(metadata.expires_at);
        reply
    })
}

impl crate::holds::Held for Hold {
    fn health(&self) -> &Health {
        &self.health
    }
}
