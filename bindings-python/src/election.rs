//! `lockyard.redis.Election`, its `Observer` iterator and the `Term`s it
//! yields.

use std::sync::Mutex;
use std::time::Duration;

use lockyard::wait::InTime;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::convert::{optional_seconds, text};
use crate::session::RedisSession;
use crate::unlocked::Unlocked;

/// Leader election under a session: the leader holds the lock ``name``
/// with its value; every term carries a fencing token.
///
/// >>> election = Election(url, "scheduler", session=s)
/// >>> if election.campaign("node-a", timeout=10.0):
/// ...     election.check_health()
/// >>> election.leader()
/// 'node-a'
#[pyclass(frozen, module = "lockyard.redis", name = "Election")]
pub(crate) struct RedisElection {
    election: Unlocked<lockyard::redis::Election>,
    name: String,
}

#[pymethods]
impl RedisElection {
    #[new]
    #[pyo3(signature = (url, name, session))]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        session: &Bound<'_, RedisSession>,
    ) -> PyResult<Self> {
        let (url, name) = (text("url", url)?, text("name", name)?);
        let election = session
            .get()
            .session
            .call(py, |s| lockyard::redis::Election::new(&url, &name, s))?;
        Ok(RedisElection {
            election: Unlocked::build(py, || Ok(election))?,
            name,
        })
    }

    /// Waits up to ``timeout`` seconds (None: forever, 0: one attempt) to
    /// lead with ``value``. True once leader, False if the timeout ran out.
    #[pyo3(signature = (value, timeout=None))]
    fn campaign(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let value = text("value", value)?;
        let timeout = optional_seconds("timeout", timeout)?;
        self.election.wait(
            py,
            |election, interrupted| {
                election
                    .campaign_interruptibly(&value, timeout, interrupted)
                    .in_time()
            },
            |election, won| {
                if won {
                    let _ = election.resign();
                }
            },
        )
    }

    /// Steps down (``lockyard.NotLockedError`` if not leading); the next
    /// campaigner takes over at once. Logs a warning if leadership had
    /// already been lost.
    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        self.election
            .call(py, |election| election.resign().map(drop))
    }

    /// The current leader's value, or None when nobody leads. Asks Redis.
    fn leader(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.election.call(py, |election| election.leader())
    }

    /// Whether this election leads and its session is surely live.
    #[getter]
    fn is_leader(&self, py: Python<'_>) -> PyResult<bool> {
        self.election.call(py, |election| Ok(election.is_leader()))
    }

    /// ``lockyard.NotLockedError`` if not leading,
    /// ``lockyard.LockUnhealthyError`` if leadership may be lost.
    fn check_health(&self, py: Python<'_>) -> PyResult<()> {
        self.election.call(py, |election| election.check_health())
    }

    /// The fencing token of this election's term, None when not leading.
    #[getter]
    fn fencing_token(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.election
            .call(py, |election| Ok(election.fencing_token()))
    }

    /// Same as ``fencing_token``.
    #[getter]
    fn term(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.fencing_token(py)
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// An iterator of ``Term``s: first the current state, then every change
    /// of leadership in order. It ends after ``timeout`` seconds without a
    /// change (None: never).
    #[pyo3(signature = (timeout=None))]
    fn observe(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Observer> {
        let timeout = optional_seconds("timeout", timeout)?;
        let observer = self.election.call(py, |election| Ok(election.observe()))?;
        Ok(Observer {
            observer: Unlocked::build(py, || Ok(Mutex::new(observer)))?,
            timeout,
        })
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let token = self.fencing_token(py)?;
        let leading = match token {
            Some(token) => format!(" leading term={token}"),
            None => String::new(),
        };
        Ok(format!(
            "<lockyard.redis.Election name={:?}{leading}>",
            self.name
        ))
    }
}

/// The changes of leadership of one election, in order.
#[pyclass(frozen, module = "lockyard.redis")]
pub(crate) struct Observer {
    observer: Unlocked<Mutex<lockyard::redis::Observer>>,
    timeout: Option<Duration>,
}

#[pymethods]
impl Observer {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Term>> {
        let timeout = self.timeout;
        let next = self.observer.wait(
            py,
            |observer, interrupted| {
                let mut observer = observer.lock().unwrap_or_else(|e| e.into_inner());
                observer.next_change(timeout, interrupted)
            },
            |_, _| {},
        )?;
        Ok(next.map(|term| Term {
            value: term.value,
            fencing_token: term.fencing_token,
        }))
    }
}

/// One change of leadership: a term begins (``value`` is the new leader's)
/// or ends (``value`` is None). ``fencing_token`` is the term's, strictly
/// increasing across terms.
#[pyclass(frozen, eq, module = "lockyard.redis")]
#[derive(PartialEq)]
pub(crate) struct Term {
    #[pyo3(get)]
    value: Option<String>,
    #[pyo3(get)]
    fencing_token: u64,
}

#[pymethods]
impl Term {
    fn __repr__(&self) -> String {
        let value = match &self.value {
            Some(value) => format!("{value:?}"),
            None => "None".into(),
        };
        format!("Term(value={value}, fencing_token={})", self.fencing_token)
    }
}
