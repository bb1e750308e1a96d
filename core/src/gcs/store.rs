//! The narrow interface between the lock algorithm and Cloud Storage: four
//! conditional operations on one object. The HTTP client implements it for
//! the real service; tests implement it with a faithful in-process store
//! that injects faults. As in dsync's `NetLocker`, "the server said no"
//! ([`StoreError::PreconditionFailed`], [`StoreError::NotFound`]) and "the
//! server could not be asked" ([`StoreError::Transient`]) are different
//! outcomes, and the algorithm never mistakes one for the other.

use std::future::Future;
use std::pin::Pin;

/// Which incarnation of the object, and which revision of its metadata:
/// the preconditions of every write. A deleted and re-created object gets a
/// new generation but restarts its metageneration at 1, so both are needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    pub generation: i64,
    pub metageneration: i64,
}

/// What the lock object says about its holder.
#[derive(Clone, Debug, PartialEq)]
pub struct LockObject {
    pub version: Version,
    /// The holder's identity (custom metadata `identity`).
    pub identity: Option<String>,
    /// Server time (Unix seconds) after which the hold is stale (custom
    /// metadata `expires_at`, as the Ruby gem writes it).
    pub expires_at: Option<f64>,
    /// Which write made this revision (custom metadata `nonce`): tells a
    /// holder's own writes from anyone else's.
    pub nonce: Option<String>,
}

/// The custom metadata a holder writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    pub identity: String,
    pub expires_at: f64,
    /// Unique to this write (and its retries), so that reading the object
    /// later shows whether the write landed.
    pub nonce: String,
}

/// A successful answer and the server's clock when it gave it (the HTTP
/// `Date` header, Unix seconds), if known.
#[derive(Clone, Debug)]
pub struct Reply<T> {
    pub value: T,
    pub server_time: Option<f64>,
}

/// Why an operation did not succeed.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreError {
    /// HTTP 412: the object exists already (create) or is no longer the
    /// version we named (update, delete).
    PreconditionFailed,
    /// HTTP 404 on update or delete: the object is gone.
    NotFound,
    /// Worth retrying: 429, 5xx, timeouts, connection resets. The write may
    /// or may not have happened.
    Transient(String),
    /// Retrying will not help: bad credentials, a missing bucket, a
    /// request the server rejects.
    Permanent(String),
}

impl std::error::Error for StoreError {}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::PreconditionFailed => f.write_str("HTTP 412 Precondition Failed"),
            StoreError::NotFound => f.write_str("HTTP 404 Not Found"),
            StoreError::Transient(message) | StoreError::Permanent(message) => f.write_str(message),
        }
    }
}

/// An error and its sources, which say what actually went wrong
/// ("connection refused", "invalid peer certificate"): the message of a
/// [`StoreError`] made from a client library's error.
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

/// A store operation in flight.
pub type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<Reply<T>, StoreError>> + Send + 'a>>;

/// One lock object in a bucket, reached by conditional requests.
pub trait Store: Send + Sync + 'static {
    /// `gs://bucket/path`, for messages.
    fn describe(&self) -> String;
    /// Creates the object only if it does not exist (`ifGenerationMatch=0`).
    fn create(&self, metadata: Metadata) -> StoreFuture<'_, LockObject>;
    /// Reads the object's metadata; `None` if there is no object.
    fn get(&self) -> StoreFuture<'_, Option<LockObject>>;
    /// Replaces the custom metadata if the object is still `expected`.
    fn update(&self, expected: Version, metadata: Metadata) -> StoreFuture<'_, LockObject>;
    /// Deletes the object if it is still `expected`.
    fn delete(&self, expected: Version) -> StoreFuture<'_, ()>;
}
