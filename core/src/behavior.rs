//! What ending a session does to its locks' values, as the bindings and
//! the command line spell it.

use crate::error::{Error, Result};

/// What ending a session (destroyed, or lost) does to its locks' values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Behavior {
    /// The locks are freed; each one's value stays readable through
    /// `holder` until the name is granted again: on Redis kept at most an
    /// hour, on etcd while the name is barred (its `lock_delay`).
    #[default]
    Release,
    /// The locks are freed and their values deleted with them.
    Delete,
}

impl Behavior {
    /// The behavior's name, as [`FromStr`](std::str::FromStr) reads it:
    /// `"release"` or `"delete"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Release => "release",
            Behavior::Delete => "delete",
        }
    }
}

impl std::str::FromStr for Behavior {
    type Err = Error;

    fn from_str(text: &str) -> Result<Behavior> {
        match text {
            "release" => Ok(Behavior::Release),
            "delete" => Ok(Behavior::Delete),
            other => Err(Error::config(format!(
                "behavior must be \"release\" or \"delete\", got {other:?}"
            ))),
        }
    }
}
