//! Operator tools for a GCS lock: what its object says
//! ([`Lock::object_state`]), and the break-glass delete of it
//! ([`Lock::force_release`]), for `lockyard status` and `lockyard release
//! --force`. They use the lock's own options (bucket, credentials,
//! emulator) but not its holds: the caller is usually not the holder.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::lock::Lock;
use super::store::{Reply, StoreError};
use crate::error::{Error, Result};

/// How long an operator's read or delete rides out transient failures.
const PATIENCE: Duration = Duration::from_secs(5);

/// The lock object, from [`Lock::object_state`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ObjectState {
    /// The holder's identity, as it wrote it.
    pub identity: Option<String>,
    /// The object's generation: the holder's fencing token.
    pub generation: i64,
    pub metageneration: i64,
    /// Server time (Unix seconds) after which the hold is stale.
    pub expires_at: Option<f64>,
    /// How long until then by the server's clock (its `Date`, else ours);
    /// zero when the hold is stale already.
    pub expires_in: Option<Duration>,
}

impl Lock {
    /// Reads the lock object: None when nobody holds the lock.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] if the bucket cannot be read (missing, no
    /// permission) or still fails transiently after a few seconds.
    pub fn object_state(&self) -> Result<Option<ObjectState>> {
        let requests = self.engine.requests();
        let until = Some(Instant::now() + PATIENCE);
        let read = requests.call("read", || requests.store.get(), until, &|| false)?;
        match requests.answered("read", read)? {
            Ok(Reply {
                value: Some(object),
                server_time,
            }) => {
                let now = server_time.unwrap_or_else(|| {
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_secs_f64()
                });
                Ok(Some(ObjectState {
                    identity: object.identity,
                    generation: object.version.generation,
                    metageneration: object.version.metageneration,
                    expires_at: object.expires_at,
                    expires_in: object
                        .expires_at
                        .map(|at| Duration::from_secs_f64((at - now).max(0.0))),
                }))
            }
            Ok(_) => Ok(None),
            Err(other) => Err(requests.failed("read", other)),
        }
    }

    /// Deletes the lock object whoever holds it (break-glass). Its holder's
    /// next refresh finds it gone and turns unhealthy; the next holder's
    /// object gets a new, larger generation, so fencing tokens keep
    /// increasing. Ok(false) when there was no object.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] as for [`Lock::object_state`].
    pub fn force_release(&self) -> Result<bool> {
        let requests = self.engine.requests();
        let until = Some(Instant::now() + PATIENCE);
        // The delete names the version it read; a refresh landing in
        // between moves the metageneration, so read again and retry.
        for _ in 0..5 {
            let Some(object) = self.object_state()? else {
                return Ok(false);
            };
            let version = super::store::Version {
                generation: object.generation,
                metageneration: object.metageneration,
            };
            let deleted =
                requests.call("delete", || requests.store.delete(version), until, &|| {
                    false
                })?;
            match requests.answered("delete", deleted)? {
                Ok(_) => return Ok(true),
                Err(StoreError::PreconditionFailed | StoreError::NotFound) => continue,
                Err(other) => return Err(requests.failed("delete", other)),
            }
        }
        Err(Error::backend_transient(
            &requests.store.describe(),
            "delete",
            "the lock object kept changing; try again",
        ))
    }
}
