//! The one step of `lockyard.redis.exclusive` that decides anything: the
//! core's `claim`, which tries a name's lock once under the session. The
//! generator in `lockyard/redis.py` only walks the names and ends each
//! task's block.

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::block;
use crate::convert::text;
use crate::session::RedisSession;
use crate::unlocked::Unlocked;

/// A task ``exclusive`` won: the task's lock, held by this thread until
/// its block ends with ``__exit__``.
#[pyclass(frozen, module = "lockyard.redis", name = "_Claim")]
pub(crate) struct RedisClaim {
    claim: Unlocked<lockyard::redis::Claim>,
}

#[pymethods]
impl RedisClaim {
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

/// Tries the lock ``name`` once under ``session`` for this thread: the
/// claim if won, None if another worker holds it.
#[pyfunction]
pub(crate) fn redis_claim(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    session: &Bound<'_, RedisSession>,
) -> PyResult<Option<RedisClaim>> {
    let (url, name) = (text("url", url)?, text("name", name)?);
    // A wait, though of one try: Ctrl-C must end it on a silent network.
    // A claim won as the interpreter exits is given back by its drop.
    let claimed = session.get().session.wait(
        py,
        |s, interrupted| lockyard::redis::claim(&url, &name, s, interrupted),
        |_, claimed| drop(claimed),
    )?;
    claimed
        .map(|claim| {
            Ok(RedisClaim {
                claim: Unlocked::build(py, || Ok(claim))?,
            })
        })
        .transpose()
}
