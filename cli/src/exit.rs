//! Exit statuses of the `lockyard` command, and the one way a subcommand
//! fails: a status with a one-line message.

use std::fmt;

/// Usage or configuration error (sysexits EX_USAGE).
pub const USAGE: i32 = 64;
/// The backend could not be reached (EX_UNAVAILABLE).
pub const UNAVAILABLE: i32 = 69;
/// Not acquired before `--timeout`; COMMAND never started (EX_TEMPFAIL).
pub const NOT_ACQUIRED: i32 = 75;
/// The lock was lost and COMMAND was terminated for it.
pub const LOST: i32 = 76;
/// COMMAND could not be started (as a shell reports it).
pub const CANNOT_RUN: i32 = 127;

/// Why `lockyard` stops: its exit status and what to tell the user.
#[derive(Debug)]
pub struct Failure {
    pub status: i32,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            status: USAGE,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<lockyard::Error> for Failure {
    fn from(error: lockyard::Error) -> Self {
        use lockyard::Error;
        let status = match &error {
            Error::Config(_) => USAGE,
            Error::Timeout { .. } => NOT_ACQUIRED,
            Error::LockUnhealthy { .. } => LOST,
            // Interrupted waits are reported by the signal that ended them
            // (see `crate::signals`); anything else means the backend
            // did not answer as it should.
            _ => UNAVAILABLE,
        };
        Failure {
            status,
            message: error.to_string(),
        }
    }
}
