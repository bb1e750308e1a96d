//! The guards of a quorum `RwLock`: proof that the calling thread holds
//! the read or the write lock, released on drop.

use std::marker::PhantomData;

use crate::error::Result;

/// What a guard asks of the lock it came from; `RwLock` answers with its
/// own methods. A trait, so that this module need not know `RwLock`.
pub(super) trait Guarded {
    fn release(&self) -> Result<bool>;
    fn leave(&self) -> Result<bool>;
    fn healthy(&self) -> bool;
    fn check_health(&self) -> Result<()>;
    fn fencing_token(&self) -> Result<Option<u64>>;
}

/// Releases on drop; not `Send`, the hold belongs to its thread.
pub(super) struct Guard<'a> {
    lock: &'a dyn Guarded,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl<'a> Guard<'a> {
    pub(super) fn new(lock: &'a dyn Guarded) -> Self {
        Guard {
            lock,
            released: false,
            _not_send: PhantomData,
        }
    }

    fn release(mut self) -> Result<bool> {
        self.released = true;
        self.lock.release()
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // In a process forked while it was held, the hold is the parent's.
        if !self.released {
            if let Err(e) = self.lock.leave() {
                log::warn!("releasing a rw lock guard failed: {e}");
            }
        }
    }
}

/// Proof that the calling thread holds the write lock; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct WriteGuard<'a>(pub(super) Guard<'a>);

/// Proof that the calling thread holds a read lock; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ReadGuard<'a>(pub(super) Guard<'a>);

impl WriteGuard<'_> {
    /// See [`RwLock::fencing_token`](super::RwLock::fencing_token).
    pub fn fencing_token(&self) -> Result<u64> {
        Ok(self
            .0
            .lock
            .fencing_token()?
            .expect("a write guard's thread holds the write lock"))
    }
}

macro_rules! guard_methods {
    ($guard:ident) => {
        impl $guard<'_> {
            /// See [`RwLock::healthy`](super::RwLock::healthy).
            pub fn healthy(&self) -> bool {
                self.0.lock.healthy()
            }
            /// See [`RwLock::check_health`](super::RwLock::check_health).
            pub fn check_health(&self) -> Result<()> {
                self.0.lock.check_health()
            }
            /// Releases now and reports whether the lock was still held.
            pub fn release(self) -> Result<bool> {
                self.0.release()
            }
        }
    };
}
guard_methods!(WriteGuard);
guard_methods!(ReadGuard);
