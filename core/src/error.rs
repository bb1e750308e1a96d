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
    /// [`Error::is_transient`] tells whether asking again may succeed.
    #[error("{operation} on {server} failed: {message}")]
    Backend {
        server: String,
        operation: String,
        message: String,
        /// What the backend's client reported (a `redis::RedisError`, a
        /// GCS `lockyard::gcs::StoreError`), for callers that inspect or
        /// log the chain; `None` when nothing failed underneath, only the
        /// answer was missing or made no sense.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
        /// Whether asking again later may succeed, decided where the
        /// failure was sorted for the crate's own retries.
        transient: bool,
    },
    /// The caller's interrupt check fired during a wait (Ctrl-C,
    /// `Thread#raise`); nothing is held on return.
    #[error("interrupted while waiting for {0}")]
    Interrupted(String),
}

/// Shorthand for `std::result::Result<T, lockyard::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::Config(message.into())
    }

    /// A backend's answer that makes no sense, or a request it can never
    /// grant: asking again gives the same answer.
    #[cfg(any(feature = "redis", feature = "etcd"))]
    pub(crate) fn backend(server: &str, operation: &str, message: impl ToString) -> Self {
        Error::Backend {
            server: server.to_owned(),
            operation: operation.to_owned(),
            message: message.to_string(),
            source: None,
            transient: false,
        }
    }

    /// A failure with nothing underneath that passes on its own: no answer
    /// in time, too few nodes answering, a race with other writers.
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
    pub(crate) fn backend_transient(server: &str, operation: &str, message: impl ToString) -> Self {
        Error::Backend {
            server: server.to_owned(),
            operation: operation.to_owned(),
            message: message.to_string(),
            source: None,
            transient: true,
        }
    }

    /// The backend's client failed with `cause`, whose text becomes the
    /// message; `transient` is the backend's own verdict on it.
    #[cfg(any(feature = "redis", feature = "gcs"))]
    pub(crate) fn backend_failed(
        server: &str,
        operation: &str,
        cause: impl std::error::Error + Send + Sync + 'static,
        transient: bool,
    ) -> Self {
        Error::Backend {
            server: server.to_owned(),
            operation: operation.to_owned(),
            message: cause.to_string(),
            source: Some(Box::new(cause)),
            transient,
        }
    }

    /// True for timeouts of a wait (not of a network call).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// True for a backend failure worth retrying later: the server could
    /// not be reached, the connection broke, no answer came in time, Redis
    /// is loading, failing over or read-only (LOADING, TRYAGAIN,
    /// CLUSTERDOWN, MASTERDOWN, READONLY), or GCS answered 429 or 5xx.
    /// False for every other kind of error and for backend failures that
    /// repeat: rejected credentials or permissions, a missing bucket,
    /// replies that make no sense.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Backend {
                transient: true,
                ..
            }
        )
    }

    /// True when a request got no answer that settles it: the backend
    /// could not be asked for now ([`Error::is_transient`]), or the
    /// caller's deadline came first. The request may still have taken
    /// effect, or reach the server later; only asking again tells.
    #[cfg(feature = "redis")]
    pub(crate) fn went_unanswered(&self) -> bool {
        self.is_transient() || self.is_timeout()
    }
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use std::error::Error as _;

    use super::Error;

    fn redis_error(reply: &str) -> redis::RedisError {
        let kind = match reply.split_once(' ').map_or(reply, |(code, _)| code) {
            "LOADING" => redis::ServerErrorKind::BusyLoading,
            "NOPERM" => redis::ServerErrorKind::NoPerm,
            _ => redis::ServerErrorKind::ResponseError,
        };
        redis::RedisError::from((kind.into(), "server said", reply.to_owned()))
    }

    #[test]
    fn a_backend_error_keeps_its_cause_and_its_message() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = Error::redis("redis://127.0.0.1:1/0", "connect", refused.into());
        assert!(err.is_transient(), "{err}");
        let cause = err.source().expect("the client's error");
        let cause = cause.downcast_ref::<redis::RedisError>().unwrap();
        assert!(cause.is_connection_refusal(), "{cause:?}");
        assert_eq!(
            err.to_string(),
            format!("connect on redis://127.0.0.1:1/0 failed: {cause}")
        );
    }

    #[test]
    fn loading_passes_and_a_missing_permission_does_not() {
        let loading = Error::redis("r", "acquire", redis_error("LOADING dataset"));
        assert!(loading.is_transient(), "{loading}");
        let noperm = Error::redis("r", "acquire", redis_error("NOPERM no rights"));
        assert!(!noperm.is_transient(), "{noperm}");
        assert!(noperm.source().is_some());
    }

    #[test]
    fn an_answer_that_makes_no_sense_has_no_cause_and_repeats() {
        let err = Error::backend("r", "observe", "unexpected reply from the script");
        assert!(!err.is_transient());
        assert!(err.source().is_none());
        let silent = Error::backend_transient("r", "refresh", "no answer in time");
        assert!(silent.is_transient());
        assert!(silent.source().is_none());
        assert!(!Error::Config("bad".into()).is_transient());
    }

    #[test]
    fn a_request_cut_short_or_failing_for_now_went_unanswered() {
        let cut_short = Error::Timeout {
            what: "lock \"deploy\"".into(),
            waited: std::time::Duration::from_millis(100),
        };
        assert!(cut_short.went_unanswered());
        assert!(Error::backend_transient("r", "cancel", "no answer in time").went_unanswered());
        assert!(!Error::backend("r", "cancel", "unexpected reply").went_unanswered());
        assert!(!Error::Interrupted("lock \"deploy\"".into()).went_unanswered());
        assert!(!Error::NotLocked("lock \"deploy\"".into()).went_unanswered());
    }
}
