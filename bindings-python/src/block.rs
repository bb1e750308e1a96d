//! The end of a `with` block. When the block raised and giving back what it
//! held fails too (often for the same reason: the server went away), the
//! block's exception is the one its caller must see — error reports,
//! retries keyed on its type and tests all look at it — so the failure is
//! logged and attached to it as a note instead of replacing it. After a
//! block that did not raise, the failure raises as any other call's would.

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::logging;

/// What `__exit__` returns, given the block's exception (`exc`, None or
/// Python's None when it did not raise) and the outcome of giving back.
pub(crate) fn exit(
    py: Python<'_>,
    exc: Option<&Bound<'_, PyAny>>,
    given_back: PyResult<()>,
) -> PyResult<()> {
    let Err(failure) = given_back else {
        return Ok(());
    };
    let Some(raised) = exc.filter(|exc| !exc.is_none()) else {
        return Err(failure);
    };
    let note = format!("lockyard: releasing after the block raised failed too: {failure}");
    log::error!("{note}");
    logging::forward(py);
    // Exceptions have notes from Python 3.11 on.
    if raised.hasattr("add_note")? {
        raised.call_method1("add_note", (note,))?;
    }
    Ok(())
}

/// `end_block(exc, failure)`: the end of an ``async with`` block whose
/// giving back raised `failure` (a ``lockyard.Error``), by the rule above:
/// raises it after a block that did not raise, else notes it on `exc`.
#[pyfunction]
pub(crate) fn end_block(
    py: Python<'_>,
    exc: Option<&Bound<'_, PyAny>>,
    failure: &Bound<'_, PyAny>,
) -> PyResult<()> {
    exit(py, exc, Err(PyErr::from_value(failure.clone())))
}
