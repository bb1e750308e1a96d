//! The background refresh of a held GCS lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::holder::Holder;
use super::store::{Reply, StoreError, StoreFuture, Version};
use crate::health::Health;

/// Keeps one hold alive until aborted: PATCHes `expires_at` with the
/// generation and metageneration preconditions. 412 or 404 means someone
/// else has the object now: unhealthy at once. Transient failures only
/// after `max_refresh_fails` in a row.
pub(crate) async fn refresh_loop(
    holder: Arc<Holder>,
    identity: String,
    version: Arc<tokio::sync::Mutex<Version>>,
    health: Arc<Health>,
) {
    let lease = &holder.lease;
    let mut failures = 0;
    loop {
        tokio::time::sleep(lease.refresh_every).await;
        let mut current = version.lock().await;
        holder.log(log::Level::Info, || "Refreshing lock".into());
        let sent = Instant::now();
        let metadata = holder.metadata(&identity);
        let mut outcome = with_timeout(
            holder.request_timeout,
            holder.store.update(*current, metadata.clone()),
        )
        .await;
        if matches!(outcome, Err(StoreError::PreconditionFailed)) {
            // Our own earlier refresh may have landed without its reply.
            if let Ok(Reply {
                value: Some(object),
                ..
            }) = with_timeout(holder.request_timeout, holder.store.get()).await
            {
                if object.version.generation == current.generation
                    && object.identity.as_deref() == Some(identity.as_str())
                {
                    outcome = with_timeout(
                        holder.request_timeout,
                        holder.store.update(object.version, metadata),
                    )
                    .await;
                }
            }
        }
        match outcome {
            Ok(reply) => {
                holder.clock.observe(reply.server_time);
                *current = reply.value.version;
                failures = 0;
                health.extend(sent + holder.lease_margin());
                holder.log(log::Level::Debug, || {
                    format!(
                        "Done refreshing lock. metageneration={}",
                        current.metageneration
                    )
                });
            }
            Err(permanent @ (StoreError::PreconditionFailed | StoreError::NotFound)) => {
                let reason = match permanent {
                    StoreError::NotFound => "the lock object has been unexpectedly deleted",
                    _ => "the lock object has an unexpected generation or metageneration: another holder took it over",
                };
                holder.record_refresh_error(reason);
                holder.log(log::Level::Error, || {
                    "Lock refresh failed permanently. Declaring lock as unhealthy".into()
                });
                health.mark_lost(reason);
                return;
            }
            Err(transient) => {
                failures += 1;
                holder.record_refresh_error(&transient.to_string());
                if failures >= lease.max_refresh_fails {
                    holder.log(log::Level::Error, || {
                        format!("Lock refresh failed {failures} times in succession. Declaring lock as unhealthy")
                    });
                    health.mark_lost(format!(
                        "{failures} refreshes in a row failed, the last with: {transient}"
                    ));
                    return;
                }
            }
        }
    }
}

/// A store operation that takes longer than `limit` counts as transient.
pub(crate) async fn with_timeout<T>(
    limit: Duration,
    request: StoreFuture<'_, T>,
) -> Result<Reply<T>, StoreError> {
    match tokio::time::timeout(limit, request).await {
        Ok(outcome) => outcome,
        Err(_) => Err(StoreError::Transient(format!("no reply within {limit:?}"))),
    }
}
