//! The one step of `lockyard.redis.exclusive` and `lockyard.etcd.exclusive`
//! that decides anything: the core's `claim`, which tries a name's lock
//! once under the session. The generator in `lockyard/_exclusive.py` only
//! walks the names and ends each task's block.

use lockyard::exclusive::SessionLock;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::{self, text};
use crate::session::{EtcdSession, RedisSession};
use crate::unlocked::Unlocked;

/// What the walk needs of a core claim of either backend.
trait Leave: Send + Sync {
    fn leave(&self) -> lockyard::Result<bool>;
}

impl<L: SessionLock + Send + Sync> Leave for lockyard::exclusive::Claim<L> {
    fn leave(&self) -> lockyard::Result<bool> {
        lockyard::exclusive::Claim::leave(self)
    }
}

/// A task ``exclusive`` won (on either backend): the task's lock, held by
/// this thread until its block ends with ``__exit__``.
#[pyclass(frozen, module = "lockyard.redis", name = "_Claim")]
pub(crate) struct Claim {
    claim: Unlocked<Box<dyn Leave>>,
}

#[pymethods]
impl Claim {
    /// Releases the task's lock however its block ended; in a process
    /// forked inside the block it leaves the parent's lock alone. Never
    /// replaces the block's exception (see ``block.rs``).
    #[pyo3(signature = (_exc_type, exc, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let left = self.claim.call(py, |claim| claim.leave().map(drop));
        block::exit(py, exc, left)
    }
}

/// Tries the lock ``name`` once under a Redis ``session`` for this thread:
/// the claim if won, None if another worker holds it.
#[pyfunction]
pub(crate) fn redis_claim(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    session: &Bound<'_, PyAny>,
) -> PyResult<Option<Claim>> {
    let session = convert::session::<RedisSession>(session)?;
    claim::<lockyard::redis::Lock>(py, url, name, &session.get().session)
}

/// ``redis_claim`` under an etcd ``session``.
#[pyfunction]
pub(crate) fn etcd_claim(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    session: &Bound<'_, PyAny>,
) -> PyResult<Option<Claim>> {
    let session = convert::session::<EtcdSession>(session)?;
    claim::<lockyard::etcd::Lock>(py, url, name, &session.get().session)
}

fn claim<L>(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    session: &Unlocked<Arc<L::Session>>,
) -> PyResult<Option<Claim>>
where
    L: SessionLock + Send + Sync + 'static,
    L::Session: Send + Sync,
{
    let (url, name) = (text("url", url)?, text("name", name)?);
    // A wait, though of one try: Ctrl-C must end it on a silent network.
    // A claim won as the interpreter exits is given back by its drop.
    let claimed = session.wait(
        py,
        |s, interrupted| lockyard::exclusive::claim::<L>(&url, &name, s, interrupted),
        |_, claimed| drop(claimed),
    )?;
    claimed
        .map(|claim| {
            let claim: Box<dyn Leave> = Box::new(claim);
            Ok(Claim {
                claim: Unlocked::build(py, || Ok(claim))?,
            })
        })
        .transpose()
}
