//! The native side of `lockyard.asyncio`'s Session and Election (Redis and
//! etcd): a session is created and destroyed by core `_async` futures and
//! is then the backend's sync `Session` (locks of either API live under
//! it); an election campaigns, resigns and observes by awaiting (see
//! `asyncio.rs`). One election class and one observer class for both
//! backends: their core types share these methods ([`CoreElection`],
//! [`CoreObserver`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lockyard::redis::Term as CoreTerm;
use lockyard::Deadline;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::asyncio::{boolean, none, settle, Completions, Pending};
use crate::convert::{self, optional_seconds, text};
use crate::election::Term;
use crate::error;
use crate::session::{EtcdSession, RedisSession};

type Boxed<'a, T> = Pin<Box<dyn Future<Output = lockyard::Result<T>> + Send + 'a>>;

/// Creates a Redis session with the options of ``lockyard.redis.Session``
/// (validated here, before anything is sent) and settles `future` with it.
#[pyfunction]
#[pyo3(signature = (inbox, future, url, ttl=None, behavior=None, lock_delay=None, *, connect_timeout=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn redis_session_create(
    py: Python<'_>,
    inbox: &Bound<'_, Completions>,
    future: &Bound<'_, PyAny>,
    url: &Bound<'_, PyAny>,
    ttl: Option<&Bound<'_, PyAny>>,
    behavior: Option<&Bound<'_, PyAny>>,
    lock_delay: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Pending> {
    let builder = RedisSession::builder(py, url, ttl, behavior, lock_delay, connect_timeout)?;
    Ok(settle(
        inbox,
        future,
        builder.build_async(),
        |py, created| Ok(Py::new(py, RedisSession::of(py, created)?)?.into_any()),
        |created| created.destroy_in_background(),
    ))
}

/// ``redis_session_create`` for an etcd session.
#[pyfunction]
#[pyo3(signature = (inbox, future, url, ttl=None, behavior=None, lock_delay=None, *, connect_timeout=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn etcd_session_create(
    py: Python<'_>,
    inbox: &Bound<'_, Completions>,
    future: &Bound<'_, PyAny>,
    url: &Bound<'_, PyAny>,
    ttl: Option<&Bound<'_, PyAny>>,
    behavior: Option<&Bound<'_, PyAny>>,
    lock_delay: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<Pending> {
    let builder = EtcdSession::builder(py, url, ttl, behavior, lock_delay, connect_timeout)?;
    Ok(settle(
        inbox,
        future,
        builder.build_async(),
        |py, created| Ok(Py::new(py, EtcdSession::of(py, created)?)?.into_any()),
        |created| created.destroy_in_background(),
    ))
}

/// Destroys `session` (a ``lockyard.redis.Session`` or a
/// ``lockyard.etcd.Session``) by awaiting.
#[pyfunction]
pub(crate) fn session_destroy(
    py: Python<'_>,
    inbox: &Bound<'_, Completions>,
    future: &Bound<'_, PyAny>,
    session: &Bound<'_, PyAny>,
) -> PyResult<Pending> {
    let destroying: Boxed<'static, ()> = if session.is_instance_of::<EtcdSession>() {
        let session = etcd_session(py, session)?;
        Box::pin(async move { session.destroy_async().await })
    } else {
        let session = redis_session(py, session)?;
        Box::pin(async move { session.destroy_async().await })
    };
    Ok(settle(inbox, future, destroying, none, drop))
}

fn redis_session(
    py: Python<'_>,
    session: &Bound<'_, PyAny>,
) -> PyResult<Arc<lockyard::redis::Session>> {
    convert::session::<RedisSession>(session)?
        .get()
        .session
        .call(py, |s| Ok(s.clone()))
}

fn etcd_session(
    py: Python<'_>,
    session: &Bound<'_, PyAny>,
) -> PyResult<Arc<lockyard::etcd::Session>> {
    convert::session::<EtcdSession>(session)?
        .get()
        .session
        .call(py, |s| Ok(s.clone()))
}

/// What `AsyncElection` asks of a core election.
trait CoreElection: Send + Sync + 'static {
    fn campaign_async<'a>(&'a self, value: &'a str, timeout: Option<Duration>) -> Boxed<'a, bool>;
    fn resign_async(&self) -> Boxed<'_, bool>;
    fn leader_async(&self) -> Boxed<'_, Option<String>>;
    fn resign_in_background(&self);
    fn is_leader(&self) -> bool;
    fn check_health(&self) -> lockyard::Result<()>;
    fn fencing_token(&self) -> Option<u64>;
    fn observe(&self) -> Box<dyn CoreObserver>;
}

/// What `AsyncObserver` asks of a core observer.
trait CoreObserver: Send + 'static {
    fn next_change_async(&mut self, deadline: Deadline) -> Boxed<'_, Option<CoreTerm>>;
    fn unread(&mut self, term: CoreTerm);
}

macro_rules! core_election {
    ($election:ty, $observer:ty) => {
        impl CoreElection for $election {
            fn campaign_async<'a>(
                &'a self,
                value: &'a str,
                timeout: Option<Duration>,
            ) -> Boxed<'a, bool> {
                Box::pin(<$election>::campaign_async(self, value, timeout))
            }
            fn resign_async(&self) -> Boxed<'_, bool> {
                Box::pin(<$election>::resign_async(self))
            }
            fn leader_async(&self) -> Boxed<'_, Option<String>> {
                Box::pin(<$election>::leader_async(self))
            }
            fn resign_in_background(&self) {
                <$election>::resign_in_background(self);
            }
            fn is_leader(&self) -> bool {
                <$election>::is_leader(self)
            }
            fn check_health(&self) -> lockyard::Result<()> {
                <$election>::check_health(self)
            }
            fn fencing_token(&self) -> Option<u64> {
                <$election>::fencing_token(self)
            }
            fn observe(&self) -> Box<dyn CoreObserver> {
                Box::new(<$election>::observe(self))
            }
        }

        impl CoreObserver for $observer {
            fn next_change_async(&mut self, deadline: Deadline) -> Boxed<'_, Option<CoreTerm>> {
                Box::pin(<$observer>::next_change_async(self, deadline))
            }
            fn unread(&mut self, term: CoreTerm) {
                <$observer>::unread(self, term);
            }
        }
    };
}

core_election!(lockyard::redis::Election, lockyard::redis::Observer);
core_election!(lockyard::etcd::Election, lockyard::etcd::Observer);

/// A core election shared with the futures that use it. The last one
/// dropped resigns in the background, never on the loop's thread or the
/// runtime's.
struct Shared(Box<dyn CoreElection>);

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.resign_in_background();
    }
}

#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncElection")]
pub(crate) struct AsyncElection {
    election: Arc<Shared>,
    #[pyo3(get)]
    name: String,
}

impl AsyncElection {
    fn new(election: impl CoreElection, name: String) -> Self {
        AsyncElection {
            election: Arc::new(Shared(Box::new(election))),
            name,
        }
    }
}

/// The election `name` under `session` (a ``lockyard.redis.Session``);
/// touches no server.
#[pyfunction]
pub(crate) fn async_redis_election(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    session: &Bound<'_, PyAny>,
) -> PyResult<AsyncElection> {
    let (url, name) = (text("url", url)?, text("name", name)?);
    let session = redis_session(py, session)?;
    let election =
        lockyard::redis::Election::new(&url, &name, &session).map_err(|e| error::to_py(py, e))?;
    Ok(AsyncElection::new(election, name))
}

/// The election `name` under `session` (a ``lockyard.etcd.Session``);
/// touches no server.
#[pyfunction]
pub(crate) fn async_etcd_election(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    session: &Bound<'_, PyAny>,
) -> PyResult<AsyncElection> {
    let (url, name) = (text("url", url)?, text("name", name)?);
    let session = etcd_session(py, session)?;
    let election =
        lockyard::etcd::Election::new(&url, &name, &session).map_err(|e| error::to_py(py, e))?;
    Ok(AsyncElection::new(election, name))
}

#[pymethods]
impl AsyncElection {
    /// Campaigns with `value` up to `timeout` seconds (None: forever, 0: one
    /// attempt); True once leader, False if the timeout ran out.
    fn campaign(
        &self,
        inbox: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pending> {
        let value = text("value", value)?;
        let timeout = optional_seconds("timeout", timeout)?;
        let (election, kept) = (self.election.clone(), self.election.clone());
        Ok(settle(
            inbox,
            future,
            async move { election.0.campaign_async(&value, timeout).await },
            boolean,
            move |won| {
                if won {
                    kept.0.resign_in_background();
                }
            },
        ))
    }

    /// Steps down (``lockyard.NotLockedError`` if not leading).
    fn resign(&self, inbox: &Bound<'_, Completions>, future: &Bound<'_, PyAny>) -> Pending {
        let election = self.election.clone();
        settle(
            inbox,
            future,
            async move { election.0.resign_async().await.map(drop) },
            none,
            drop,
        )
    }

    /// Steps down in the background, at once (a campaign won for a task
    /// that was cancelled meanwhile).
    fn resign_in_background(&self) {
        self.election.0.resign_in_background();
    }

    /// The current leader's value, or None; asked of the server.
    fn leader(&self, inbox: &Bound<'_, Completions>, future: &Bound<'_, PyAny>) -> Pending {
        let election = self.election.clone();
        settle(
            inbox,
            future,
            async move { election.0.leader_async().await },
            optional_text,
            drop,
        )
    }

    fn is_leader(&self) -> bool {
        self.election.0.is_leader()
    }

    fn check_health(&self, py: Python<'_>) -> PyResult<()> {
        self.election
            .0
            .check_health()
            .map_err(|e| error::to_py(py, e))
    }

    fn fencing_token(&self) -> Option<u64> {
        self.election.0.fencing_token()
    }

    /// The changes of leadership from now on; each ``next`` waits up to
    /// `timeout` seconds (None: forever) for one.
    #[pyo3(signature = (timeout=None))]
    fn observe(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<AsyncObserver> {
        Ok(AsyncObserver {
            observer: Arc::new(tokio::sync::Mutex::new(self.election.0.observe())),
            timeout: optional_seconds("timeout", timeout)?,
        })
    }
}

/// An election's observer, read by one awaiting task at a time (a second
/// one waits its turn within its own timeout).
#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncObserver")]
pub(crate) struct AsyncObserver {
    observer: Arc<tokio::sync::Mutex<Box<dyn CoreObserver>>>,
    timeout: Option<Duration>,
}

#[pymethods]
impl AsyncObserver {
    /// The next change as a ``lockyard.redis.Term``; None once the
    /// observer's timeout passed without one. A change read for a task
    /// cancelled meanwhile is handed back to the observer, not lost.
    fn next(&self, inbox: &Bound<'_, Completions>, future: &Bound<'_, PyAny>) -> Pending {
        let (observer, deadline) = (self.observer.clone(), Deadline::after(self.timeout));
        settle(
            inbox,
            future,
            async move {
                // Held until the change is delivered or handed back, so a
                // second reader cannot read past it meanwhile.
                let mut observer = match deadline.at() {
                    None => observer.lock_owned().await,
                    Some(at) => {
                        match tokio::time::timeout_at(at.into(), observer.lock_owned()).await {
                            Ok(observer) => observer,
                            Err(_) => return Ok((None, None)),
                        }
                    }
                };
                let term = observer.next_change_async(deadline).await?;
                Ok((term, Some(observer)))
            },
            term,
            |(term, observer)| {
                if let (Some(term), Some(mut observer)) = (term, observer) {
                    observer.unread(term);
                }
            },
        )
    }
}

type Read = (
    Option<CoreTerm>,
    Option<tokio::sync::OwnedMutexGuard<Box<dyn CoreObserver>>>,
);

fn term(py: Python<'_>, (term, _observer): Read) -> PyResult<Py<PyAny>> {
    match term {
        Some(term) => Ok(Py::new(py, Term::from(term))?.into_any()),
        None => Ok(py.None()),
    }
}

fn optional_text(py: Python<'_>, value: Option<String>) -> PyResult<Py<PyAny>> {
    match value {
        Some(value) => Ok(pyo3::types::PyString::new(py, &value).into_any().unbind()),
        None => Ok(py.None()),
    }
}
