//! How a request to one Redis node failed, sorted by what may be done
//! next: follow a redirect, wait out a Cluster migration, resend, or give
//! up. The server reports these; the route decides on them.

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::Error;

/// What to do when a signal cuts a request short.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnSignal {
    /// Send it again: the request's repetition changes nothing.
    Repeat,
    /// Let the caller decide (it may have taken effect).
    Report,
}

/// Why a request did not produce a value.
pub(crate) enum Failure {
    /// A Cluster node said the slot lives elsewhere (MOVED or ASK).
    Redirect(RedisError),
    /// TRYAGAIN or CLUSTERDOWN: the slot is mid-migration or its master is
    /// being replaced; the same request may succeed shortly.
    Unsettled(Error),
    /// A signal cut it short, with [`OnSignal::Report`].
    Signal,
    /// A signal cut it short and the caller's interrupt check fired.
    Interrupted,
    /// No answer before the caller's deadline, to a request that may
    /// have been sent.
    Late,
    /// Never sent: the server could not be connected to.
    Unreachable(Error),
    /// Sent, but the connection failed or went silent before the answer.
    Broken(Error),
    /// READONLY: the node is a replica now (a master that failed over and
    /// came back). Nothing was written: the request may go elsewhere.
    ReadOnly(Error),
    Fatal(Error),
}

impl Failure {
    /// Sorts the error of a request `operation` on `server` (its name).
    pub(crate) fn of(server: &str, operation: &str, e: RedisError) -> Failure {
        if e.redirect_node().is_some() {
            Failure::Redirect(e)
        } else if is_cluster_reply(&e) {
            Failure::Unsettled(Error::redis(server, operation, e))
        } else if is_broken_connection(&e) {
            Failure::Broken(Error::redis(server, operation, e))
        } else if e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
            Failure::ReadOnly(Error::redis(server, operation, e))
        } else {
            Failure::Fatal(Error::redis(server, operation, e))
        }
    }
}

impl Error {
    /// The error for a request `operation` on `server` that failed with `e`.
    pub(crate) fn redis(server: &str, operation: &str, e: RedisError) -> Error {
        let transient = is_transient(&e);
        Error::backend_failed(server, operation, e, transient)
    }
}

/// Whether the same request may succeed later: what [`Failure::of`] sends
/// to a retry (the Cluster in flux, a broken connection), plus the server
/// states that pass on their own (LOADING after a restart, MASTERDOWN and
/// READONLY during a failover), which no retry here waits out.
fn is_transient(e: &RedisError) -> bool {
    is_cluster_reply(e)
        || is_broken_connection(e)
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
}

/// The connection failed or went silent (this includes never connecting).
fn is_broken_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout()
}

/// A Cluster node's answer about the slot rather than the request: it
/// lives elsewhere (MOVED, ASK), its keys are mid-migration (TRYAGAIN), or
/// a failed master's slots wait for a replica to take over (CLUSTERDOWN).
pub(crate) fn is_cluster_reply(e: &RedisError) -> bool {
    e.redirect_node().is_some()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown)
        )
}

/// EINTR: a signal handler ran mid-call (Ruby and Python install them);
/// the request itself did not fail.
pub(crate) fn interrupted_by_signal(e: &RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        // redis-rs keeps its cause behind an Arc, which is what source() gives.
        let io = cause.downcast_ref::<std::io::Error>().or_else(|| {
            cause
                .downcast_ref::<Shared>()
                .and_then(|inner| inner.downcast_ref())
        });
        if let Some(io) = io {
            return io.kind() == std::io::ErrorKind::Interrupted;
        }
        source = cause.source();
    }
    false
}
