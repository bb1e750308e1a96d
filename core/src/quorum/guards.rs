//! The guards of a quorum `RwLock`: proof that a holder (the thread, or
//! the async task, that acquired it) holds the read or the write lock,
//! released on drop.

use crate::error::Result;
use crate::identity::{as_holder_number, holder_number};

/// What a guard asks of the lock it came from; `RwLock` answers with its
/// own methods, for the calling holder. A trait, so that this module need
/// not know `RwLock`.
pub(super) trait Guarded {
    fn release(&self) -> Result<bool>;
    fn leave(&self) -> Result<bool>;
    fn leave_in_background(&self);
    fn healthy(&self) -> bool;
    fn check_health(&self) -> Result<()>;
    fn fencing_token(&self) -> Result<Option<u64>>;
}

/// Releases on drop. It speaks for its holder wherever it is used or
/// dropped (an async task's guard moves between threads with the task).
pub(super) struct Guard<'a, L: Guarded> {
    lock: &'a L,
    holder: u64,
    /// Taken by an async task: dropped, it gives the lock back in the
    /// background rather than block the task's executor.
    in_task: bool,
    released: bool,
}

impl<'a, L: Guarded> Guard<'a, L> {
    /// The guard of the calling thread's hold.
    pub(super) fn new(lock: &'a L) -> Self {
        Self::of(lock, holder_number(), false)
    }

    /// The guard of an async task's hold, `holder` being its number.
    pub(super) fn for_task(lock: &'a L, holder: u64) -> Self {
        Self::of(lock, holder, true)
    }

    fn of(lock: &'a L, holder: u64, in_task: bool) -> Self {
        Guard {
            lock,
            holder,
            in_task,
            released: false,
        }
    }

    /// Runs `f` as this guard's holder.
    fn as_holder<R>(&self, f: impl FnOnce(&L) -> R) -> R {
        as_holder_number(self.holder, || f(self.lock))
    }

    fn release(mut self) -> Result<bool> {
        self.released = true;
        self.as_holder(L::release)
    }

    /// Marks the guard released and returns its holder, for a release done
    /// elsewhere (an async one).
    fn disarm(mut self) -> (&'a L, u64) {
        self.released = true;
        (self.lock, self.holder)
    }
}

impl<L: Guarded> Drop for Guard<'_, L> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // In a process forked while it was held, the hold is the parent's
        // (both kinds of leave see to it).
        if self.in_task {
            self.as_holder(L::leave_in_background);
        } else if let Err(e) = self.as_holder(L::leave) {
            log::warn!("releasing a rw lock guard failed: {e}");
        }
    }
}

/// Proof that a holder holds the write lock; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct WriteGuard<'a>(pub(super) Guard<'a, super::RwLock>);

/// Proof that a holder holds a read lock; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ReadGuard<'a>(pub(super) Guard<'a, super::RwLock>);

impl WriteGuard<'_> {
    /// See [`RwLock::fencing_token`](super::RwLock::fencing_token).
    pub fn fencing_token(&self) -> Result<u64> {
        Ok(self
            .0
            .as_holder(Guarded::fencing_token)?
            .expect("a write guard's holder holds the write lock"))
    }

    /// The async twin of [`WriteGuard::fencing_token`].
    pub async fn fencing_token_async(&self) -> Result<u64> {
        Ok(self
            .0
            .lock
            .fencing_token_of(self.0.holder)
            .await?
            .expect("a write guard's holder holds the write lock"))
    }
}

macro_rules! guard_methods {
    ($guard:ident) => {
        impl $guard<'_> {
            /// See [`RwLock::healthy`](super::RwLock::healthy).
            pub fn healthy(&self) -> bool {
                self.0.as_holder(Guarded::healthy)
            }
            /// See [`RwLock::check_health`](super::RwLock::check_health).
            pub fn check_health(&self) -> Result<()> {
                self.0.as_holder(Guarded::check_health)
            }
            /// Releases now and reports whether the lock was still held.
            pub fn release(self) -> Result<bool> {
                self.0.release()
            }
            /// The async twin of `release`: dropped before the answer, the
            /// release finishes in the background.
            pub async fn release_async(self) -> Result<bool> {
                // Off tokio, the guard is dropped: it gives back in the background.
                self.0.lock.on_tokio()?;
                let (lock, holder) = self.0.disarm();
                lock.release_holder_async(holder).await
            }
        }
    };
}
guard_methods!(WriteGuard);
guard_methods!(ReadGuard);
