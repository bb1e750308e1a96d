//! `lockyard.redis.Election` and `lockyard.etcd.Election`, the `Observer`
//! iterator they return and the `Term`s it yields.

use std::sync::Mutex;
use std::time::Duration;

use lockyard::redis::Term as CoreTerm;
use lockyard::wait::{lock_within, InTime};
use lockyard::{Deadline, Interrupt};
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::convert::{self, optional_seconds, text};
use crate::session::{EtcdSession, RedisSession};
use crate::unlocked::Unlocked;

/// The Python face of a core election: the same class for every backend,
/// whose core elections share every method's name and meaning.
macro_rules! election_class {
    ($(#[$doc:meta])* $class:ident, $core:ty, $session:ty, $module:literal, $repr:literal) => {
        $(#[$doc])*
        #[pyclass(frozen, module = $module, name = "Election")]
        pub(crate) struct $class {
            election: Unlocked<$core>,
            name: String,
        }

        #[pymethods]
        impl $class {
            #[new]
            #[pyo3(signature = (url, name, session))]
            fn new(
                py: Python<'_>,
                url: &Bound<'_, PyAny>,
                name: &Bound<'_, PyAny>,
                session: &Bound<'_, PyAny>,
            ) -> PyResult<Self> {
                let (url, name) = (text("url", url)?, text("name", name)?);
                let election = convert::session::<$session>(session)?
                    .get()
                    .session
                    .call(py, |s| <$core>::new(&url, &name, s))?;
                Ok($class {
                    election: Unlocked::build(py, || Ok(election))?,
                    name,
                })
            }

            /// Waits up to ``timeout`` seconds (None: forever, 0: one attempt) to lead
            /// with ``value``. True once leader, False if the timeout ran out.
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
            /// campaigner takes over at once. Logs a warning if leadership had already
            /// been lost.
            fn resign(&self, py: Python<'_>) -> PyResult<()> {
                self.election
                    .call(py, |election| election.resign().map(drop))
            }

            /// The current leader's value, or None when nobody leads. Asks the server.
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

            /// An iterator of ``Term``s: first the current state, then every change of
            /// leadership in order. It ends after ``timeout`` seconds without a change
            /// (None: never).
            #[pyo3(signature = (timeout=None))]
            fn observe(
                &self,
                py: Python<'_>,
                timeout: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Observer> {
                let timeout = optional_seconds("timeout", timeout)?;
                let mut observer = self.election.call(py, |election| Ok(election.observe()))?;
                Observer::new(
                    py,
                    Box::new(move |deadline, interrupted| {
                        observer.next_change(deadline, interrupted)
                    }),
                    timeout,
                )
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                let token = self.fencing_token(py)?;
                let leading = match token {
                    Some(token) => format!(" leading term={token}"),
                    None => String::new(),
                };
                Ok(format!(concat!("<", $repr, " name={:?}{}>"), self.name, leading))
            }
        }
    };
}

election_class!(
    /// Leader election under a session: the leader holds the lock ``name``
    /// with its value; every term carries a fencing token.
    ///
    /// >>> election = Election(url, "scheduler", session=s)
    /// >>> if election.campaign("node-a", timeout=10.0):
    /// ...     election.check_health()
    /// >>> election.leader()
    /// 'node-a'
    RedisElection,
    lockyard::redis::Election,
    RedisSession,
    "lockyard.redis",
    "lockyard.redis.Election"
);

election_class!(
    /// Leader election on etcd under a session: a campaign is a key in the
    /// line of the lock ``name`` on the session's lease, storing its value;
    /// the leader is the line's oldest key, whose create revision is the
    /// term's fencing token. Campaigners are served in arrival order.
    ///
    /// >>> election = Election("etcd://127.0.0.1:2379", "scheduler", session=s)
    /// >>> if election.campaign("node-a", timeout=10.0):
    /// ...     election.check_health()
    /// >>> election.leader()
    /// 'node-a'
    EtcdElection,
    lockyard::etcd::Election,
    EtcdSession,
    "lockyard.etcd",
    "lockyard.etcd.Election"
);

/// A core observer's `next_change`: the backends' observers share that
/// method, not a type.
type NextChange =
    Box<dyn FnMut(Deadline, Interrupt<'_>) -> lockyard::Result<Option<CoreTerm>> + Send>;

/// The changes of leadership of one election (of either backend), in order.
#[pyclass(frozen, module = "lockyard.redis")]
pub(crate) struct Observer {
    next_change: Unlocked<Mutex<NextChange>>,
    timeout: Option<Duration>,
}

impl Observer {
    fn new(py: Python<'_>, next_change: NextChange, timeout: Option<Duration>) -> PyResult<Self> {
        Ok(Observer {
            next_change: Unlocked::build(py, || Ok(Mutex::new(next_change)))?,
            timeout,
        })
    }
}

#[pymethods]
impl Observer {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Term>> {
        let timeout = self.timeout;
        let next = self.next_change.wait(
            py,
            |next_change, interrupted| {
                // Another thread may be reading this observer: wait for it
                // within the same deadline, interruptibly.
                let deadline = Deadline::after(timeout);
                match lock_within(next_change, deadline, interrupted, "an election's observer")? {
                    Some(mut next_change) => next_change(deadline, interrupted),
                    None => Ok(None),
                }
            },
            |_, _| {},
        )?;
        Ok(next.map(Term::from))
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

impl From<CoreTerm> for Term {
    fn from(term: CoreTerm) -> Self {
        Term {
            value: term.value,
            fencing_token: term.fencing_token,
        }
    }
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
