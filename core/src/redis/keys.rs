//! Key names of one lock or semaphore. Every key carries the name as its
//! hash tag, so all of them live in one Redis Cluster slot and each script
//! touches a single node.

use crate::error::{Error, Result};

/// What follows `lockyard:{name}:` in each key, in the order the scripts
/// take them (see prelude.lua), then the wake-up prefix:
/// - `bound`: grants and waiters under a session (their lock_delay,
///   behavior, value);
/// - `delay`: present while a lost session's lock_delay keeps the name
///   from being granted;
/// - `value`: the value a released holder kept (session behavior
///   "release");
/// - `terms`: the stream of election terms, a grant's (fence, value) and
///   its end (fence, "");
/// - `shape`: what the name is while anyone holds or waits for it, a lock
///   or a WaitGroup of some limit (see `recorded_shape` in the prelude);
/// - `owners`: slots adopted by another process, by token, with the
///   refresher that now keeps each alive (see `adopt.lua`);
/// - `wake:`: a waiter's wake-up list is this prefix followed by its token.
const SUFFIXES: [&str; 13] = [
    "holders", "grants", "queue", "leases", "fence", "watchers", "bound", "delay", "value",
    "terms", "shape", "owners", "wake:",
];
const TERMS: usize = 9;
const WAKE_PREFIX: usize = 12;

/// All of one name's keys, one after the other in one string: a process
/// may hold ten thousand locks, and one allocation costs less than
/// thirteen.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    text: String,
    /// Where each key of [`SUFFIXES`] ends in `text`.
    ends: [u32; 13],
}

impl Keys {
    pub(crate) fn new(name: &str) -> Result<Keys> {
        check_name(name)?;
        let base = format!("lockyard:{{{name}}}:");
        let length: usize = SUFFIXES
            .iter()
            .map(|suffix| base.len() + suffix.len())
            .sum();
        if u32::try_from(length).is_err() {
            return Err(Error::config(format!(
                "the name is too long ({} bytes)",
                name.len()
            )));
        }
        let mut text = String::with_capacity(length);
        let mut ends = [0; 13];
        for (end, suffix) in ends.iter_mut().zip(SUFFIXES) {
            text.push_str(&base);
            text.push_str(suffix);
            *end = text.len() as u32;
        }
        Ok(Keys { text, ends })
    }

    fn key(&self, at: usize) -> &str {
        let start = at.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.text[start as usize..self.ends[at] as usize]
    }

    /// The keys every script takes, in its KEYS order.
    pub(crate) fn all(&self) -> [&str; 12] {
        std::array::from_fn(|at| self.key(at))
    }

    /// The stream of election terms.
    pub(crate) fn terms(&self) -> &str {
        self.key(TERMS)
    }

    /// A waiter's wake-up list is this prefix followed by its token.
    pub(crate) fn wake_prefix(&self) -> &str {
        self.key(WAKE_PREFIX)
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
        for key in keys.all().into_iter().chain([keys.wake_prefix()]) {
            assert!(key.starts_with("lockyard:{deploy}:"), "{key}");
        }
        assert_eq!(keys.all()[0], "lockyard:{deploy}:holders");
        assert_eq!(keys.all()[11], "lockyard:{deploy}:owners");
        assert_eq!(keys.terms(), "lockyard:{deploy}:terms");
        assert_eq!(keys.wake_prefix(), "lockyard:{deploy}:wake:");
    }

    #[test]
    fn names_that_would_break_the_hash_tag_are_rejected() {
        for name in ["", "a{b", "x}"] {
            assert!(matches!(Keys::new(name), Err(Error::Config(_))), "{name:?}");
        }
    }
}
