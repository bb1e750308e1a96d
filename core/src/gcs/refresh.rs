//! The background refresh of a held GCS lock.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::engine::Engine;
use super::retry::RETRY_FIRST_WAIT;
use super::store::{LockObject, Metadata, Reply, StoreError, Version};
use crate::clock::Stamp;
use crate::health::Health;

const TAKEN_OVER: &str =
    "the lock object has an unexpected generation or metageneration: another holder took it over";
const DELETED: &str = "the lock object has been unexpectedly deleted";

/// Keeps one hold alive until aborted: PATCHes `expires_at` with the
/// generation and metageneration preconditions. Lost at once only when the
/// server shows the object gone or someone else's; failures to ask are
/// retried, sooner than the refresh period, until the lease runs out.
/// `max_refresh_fails` of them in a row make the hold unhealthy meanwhile;
/// a refresh that lands afterwards proves it was kept and heals it.
pub(crate) async fn refresh_loop(
    engine: Arc<Engine>,
    identity: String,
    version: Arc<tokio::sync::Mutex<Version>>,
    health: Arc<Health>,
) {
    let lease = &engine.lease;
    let mut failures = 0;
    let mut wait = lease.refresh_every;
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
                failures = 0;
                wait = lease.refresh_every;
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
                failures += 1;
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
                if failures >= lease.max_refresh_fails {
                    engine.log(log::Level::Error, || {
                        format!("Lock refresh failed {failures} times in succession. Declaring lock as unhealthy until one succeeds")
                    });
                    health.set_failing(Some(format!(
                        "{failures} refreshes in a row failed, the last with: {failure}"
                    )));
                }
                // Again soon, as every caller-side request does, but never
                // later than the next regular refresh.
                wait = (RETRY_FIRST_WAIT * 2u32.saturating_pow(failures - 1))
                    .min(lease.refresh_every)
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
    let metadata = engine.metadata(identity);
    let written = ask(engine, engine.store.update(expected, metadata.clone())).await;
    if !matches!(written, Err(StoreError::PreconditionFailed)) {
        return with_expiry(written, &metadata);
    }
    // A 412 proves only that the metageneration moved: an earlier write of
    // ours may have landed without its reply. Only a read tells.
    let read = ask(engine, engine.store.get()).await?;
    match read.value {
        None => Err(StoreError::NotFound),
        Some(object)
            if object.version.generation == expected.generation
                && object.identity.as_deref() == Some(identity) =>
        {
            let written = ask(
                engine,
                engine.store.update(object.version, metadata.clone()),
            )
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

/// One request with the request timeout; a dated reply teaches the clock.
async fn ask<T>(
    engine: &Engine,
    request: impl Future<Output = Result<Reply<T>, StoreError>>,
) -> Result<Reply<T>, StoreError> {
    let sent = Stamp::now();
    let outcome = with_timeout(engine.request_timeout, request).await;
    if let Ok(reply) = &outcome {
        engine.clock.observe(sent, Stamp::now(), reply.server_time);
    }
    outcome
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

/// A store operation that takes longer than `limit` counts as transient.
pub(crate) async fn with_timeout<T>(
    limit: Duration,
    request: impl Future<Output = Result<Reply<T>, StoreError>>,
) -> Result<Reply<T>, StoreError> {
    match tokio::time::timeout(limit, request).await {
        Ok(outcome) => outcome,
        Err(_) => Err(StoreError::Transient(format!("no reply within {limit:?}"))),
    }
}
