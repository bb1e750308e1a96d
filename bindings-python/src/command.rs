//! The wheel's `lockyard` executable: the `lockyard` command line
//! (the `lockyard-cli` crate, the same code as the Rust binary), run detached
//! from the interpreter on the main thread.

use std::ffi::OsString;

use pyo3::prelude::*;

use crate::unlocked;

/// Runs the `lockyard` command line ``args`` (without the program's name)
/// to its end and returns its exit status. For ``lockyard._command.main``.
#[pyfunction]
pub(crate) fn run_command(py: Python<'_>, args: Vec<OsString>) -> PyResult<u8> {
    // The core's warnings go nowhere, as from the binary: the command says
    // what happened in its own one-line messages, and forwarding them
    // would add Python logging's last-resort lines (and its import time).
    crate::logging::silence();
    unlocked::detached(py, || Ok(lockyard_cli::main(args)))
}
