//! Key names of one lock or semaphore. Every key carries the name as its
//! hash tag, so all of them live in one Redis Cluster slot and each script
//! touches a single node.

use crate::error::{Error, Result};

#[derive(Clone, Debug)]
pub(crate) struct Keys {
    pub(crate) holders: String,
    pub(crate) grants: String,
    pub(crate) queue: String,
    pub(crate) leases: String,
    pub(crate) fence: String,
    pub(crate) watchers: String,
    /// Grants and waiters under a session: their lock_delay, behavior, value.
    pub(crate) bound: String,
    /// Present while a lost session's lock_delay keeps the name from being granted.
    pub(crate) delay: String,
    /// The value a released holder kept (session behavior "release").
    pub(crate) value: String,
    /// Stream of election terms: a grant's (fence, value), its end (fence, "").
    pub(crate) terms: String,
    /// What the name is while anyone holds or waits for it: a lock, or a
    /// WaitGroup of some limit (see `recorded_shape` in the prelude).
    pub(crate) shape: String,
    /// Slots adopted by another process, by token: the refresher that now
    /// keeps each alive (see `adopt.lua`).
    pub(crate) owners: String,
    /// A waiter's wake-up list is this prefix followed by its token.
    pub(crate) wake_prefix: String,
}

impl Keys {
    pub(crate) fn new(name: &str) -> Result<Keys> {
        check_name(name)?;
        let base = format!("lockyard:{{{name}}}");
        Ok(Keys {
            holders: format!("{base}:holders"),
            grants: format!("{base}:grants"),
            queue: format!("{base}:queue"),
            leases: format!("{base}:leases"),
            fence: format!("{base}:fence"),
            watchers: format!("{base}:watchers"),
            bound: format!("{base}:bound"),
            delay: format!("{base}:delay"),
            value: format!("{base}:value"),
            terms: format!("{base}:terms"),
            shape: format!("{base}:shape"),
            owners: format!("{base}:owners"),
            wake_prefix: format!("{base}:wake:"),
        })
    }

    pub(crate) fn all(&self) -> [&str; 12] {
        [
            &self.holders,
            &self.grants,
            &self.queue,
            &self.leases,
            &self.fence,
            &self.watchers,
            &self.bound,
            &self.delay,
            &self.value,
            &self.terms,
            &self.shape,
            &self.owners,
        ]
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
        for key in keys.all().into_iter().chain([keys.wake_prefix.as_str()]) {
            assert!(key.starts_with("lockyard:{deploy}:"), "{key}");
        }
    }

    #[test]
    fn names_that_would_break_the_hash_tag_are_rejected() {
        for name in ["", "a{b", "x}"] {
            assert!(matches!(Keys::new(name), Err(Error::Config(_))), "{name:?}");
        }
    }
}
