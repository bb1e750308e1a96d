//! The one error type of lockyard. Its kinds describe the lock's situation,
//! not the backend's, so every binding can map them in one place.

use std::time::Duration;

/// Everything that can go wrong with a lock, semaphore slot or session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The wait ran out before the lock or slot was granted.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout { what: String, waited: Duration },
    /// This thread already holds the lock (locks are not re-entrant).
    #[error("{0} is already held by this thread")]
    AlreadyLocked(String),
    /// Release or health check of something the caller does not hold
    /// (a lock: this thread; a wait group slot: this process).
    #[error("{0} is not held by the caller")]
    NotLocked(String),
    /// The lock may have been lost: its lease ran out, it was taken over, or
    /// refreshing it failed too often. Stop touching what it protects.
    #[error("{what} is unhealthy: {reason}")]
    LockUnhealthy { what: String, reason: String },
    /// A bad argument, rejected before anything touched the backend.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The backend could not be asked: connection, protocol, auth, HTTP.
    #[error("{operation} on {server} failed: {message}")]
    Backend {
        server: String,
        operation: String,
        message: String,
    },
    /// The caller's interrupt check fired during a wait (Ctrl-C,
    /// `Thread#raise`); nothing is held on return.
    #[error("interrupted while waiting for {0}")]
    Interrupted(String),
}

/// Shorthand for `std::result::Result<T, lockyard::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    #[cfg(any(feature = "redis", feature = "gcs"))]
    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::Config(message.into())
    }

    #[cfg(any(feature = "redis", feature = "gcs"))]
    pub(crate) fn backend(server: &str, operation: &str, message: impl ToString) -> Self {
        Error::Backend {
            server: server.to_owned(),
            operation: operation.to_owned(),
            message: message.to_string(),
        }
    }

    /// True for timeouts of a wait (not of a network call).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }
}
