//! Key names of one lock or semaphore. Every key carries the name as its
//! hash tag, so all of them live in one Redis Cluster slot and each script
//! touches a single node.

use crate::error::{Error, Result};

/// The name's keys are its prefix, `lockyard:{name}:`, followed by one of
/// `holders`, `grants`, `queue`, `leases`, `fence`, `watchers`, `bound`,
/// `delay`, `value`, `terms`, `shape`, `owners` (each described in
/// prelude.lua), or `wake:` and a waiter's token for its wake-up list.
/// The scripts take the prefix and the holders key (see prelude.lua) and
/// name the other keys themselves.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    /// A process may hold ten thousand locks: the holders key, whose
    /// beginning is the prefix, is all it keeps.
    holders: Box<str>,
}

const HOLDERS: &str = "holders";

impl Keys {
    pub(crate) fn new(name: &str) -> Result<Keys> {
        check_name(name)?;
        Ok(Keys {
            holders: format!("lockyard:{{{name}}}:{HOLDERS}").into(),
        })
    }

    /// The keys every script takes: the prefix, then the holders key.
    pub(crate) fn declared(&self) -> [&str; 2] {
        [self.prefix(), &self.holders]
    }

    /// The prefix every key of this lock begins with.
    pub(crate) fn prefix(&self) -> &str {
        &self.holders[..self.holders.len() - HOLDERS.len()]
    }

    /// The stream of election terms.
    pub(crate) fn terms(&self) -> String {
        format!("{}terms", self.prefix())
    }

    /// The wake-up list of the waiter `token`.
    pub(crate) fn wake(&self, token: &str) -> String {
        format!("{}wake:{token}", self.prefix())
    }
}

/// A name must be non-empty and usable as a Redis Cluster hash tag.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::config("the name must not be empty"));
    }
    if name.contains(['{', '}']) {
        return Err(Error::config(format!(
            "the name {name:?} must not contain '{{' or '}}': lockyard wraps it in braces as the Redis Cluster hash tag"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_shares_the_hash_tag() {
        let keys = Keys::new("deploy").unwrap();
        assert_eq!(
            keys.declared(),
            ["lockyard:{deploy}:", "lockyard:{deploy}:holders"]
        );
        assert_eq!(keys.terms(), "lockyard:{deploy}:terms");
        assert_eq!(keys.wake("t1"), "lockyard:{deploy}:wake:t1");
    }

    #[test]
    fn names_that_would_break_the_hash_tag_are_rejected() {
        for name in ["", "a{b", "x}"] {
            assert!(matches!(Keys::new(name), Err(Error::Config(_))), "{name:?}");
        }
    }
}
