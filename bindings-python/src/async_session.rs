//! The native side of `lockyard.asyncio.redis`'s Session and Election: a
//! session is created and destroyed by core `_async` futures and is then a
//! `lockyard.redis.Session` (locks of either API live under it); an
//! election campaigns, resigns and observes by awaiting (see `asyncio.rs`).

use std::sync::Arc;

use lockyard::redis::{Election, Observer, Session};
use lockyard::Deadline;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::asyncio::{boolean, none, settle, Completions, Pending};
use crate::convert::{self, optional_seconds, text};
use crate::election::Term;
use crate::error;
use crate::session::RedisSession;

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
        session,
        |created| created.destroy_in_background(),
    ))
}

fn session(py: Python<'_>, created: Session) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, RedisSession::of(py, created)?)?.into_any())
}

/// Destroys `session` (a ``lockyard.redis.Session``) by awaiting.
#[pyfunction]
pub(crate) fn redis_session_destroy(
    py: Python<'_>,
    inbox: &Bound<'_, Completions>,
    future: &Bound<'_, PyAny>,
    session: &Bound<'_, PyAny>,
) -> PyResult<Pending> {
    let session = shared_session(py, session)?;
    Ok(settle(
        inbox,
        future,
        async move { session.destroy_async().await },
        none,
        drop,
    ))
}

fn shared_session(py: Python<'_>, session: &Bound<'_, PyAny>) -> PyResult<Arc<Session>> {
    convert::session::<RedisSession>(session)?
        .get()
        .session
        .call(py, |s| Ok(s.clone()))
}

/// A core election shared with the futures that use it. The last one
/// dropped resigns in the background, never on the loop's thread or the
/// runtime's.
struct Shared(Election);

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.resign_in_background();
    }
}

#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncRedisElection")]
pub(crate) struct AsyncRedisElection {
    election: Arc<Shared>,
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl AsyncRedisElection {
    /// The election `name` under `session` (a ``lockyard.redis.Session``);
    /// touches no server.
    #[new]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        session: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let (url, name) = (text("url", url)?, text("name", name)?);
        let session = shared_session(py, session)?;
        let election = Election::new(&url, &name, &session).map_err(|e| error::to_py(py, e))?;
        Ok(AsyncRedisElection {
            election: Arc::new(Shared(election)),
            name,
        })
    }

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

    /// The current leader's value, or None; asked of Redis.
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
    fn observe(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<AsyncRedisObserver> {
        Ok(AsyncRedisObserver {
            observer: Arc::new(tokio::sync::Mutex::new(self.election.0.observe())),
            timeout: optional_seconds("timeout", timeout)?,
        })
    }
}

/// An election's observer, read by one awaiting task at a time (a second
/// one waits its turn within its own timeout).
#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncRedisObserver")]
pub(crate) struct AsyncRedisObserver {
    observer: Arc<tokio::sync::Mutex<Observer>>,
    timeout: Option<std::time::Duration>,
}

#[pymethods]
impl AsyncRedisObserver {
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
    Option<lockyard::redis::Term>,
    Option<tokio::sync::OwnedMutexGuard<Observer>>,
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
