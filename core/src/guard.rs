//! The guard every per-thread lock hands out: proof that its holder (the
//! thread, or the async task, that acquired it) holds the lock, released
//! on drop.

use crate::error::Result;
use crate::identity::{as_holder_number, holder_number};

/// A lock held per thread, as `lockyard::redis::Lock`,
/// `lockyard::gcs::Lock` and `lockyard::etcd::Lock` are. Sealed: only
/// lockyard's locks implement it. Its methods are the locks' own inherent
/// ones, gathered here so that a binding can wrap every such lock with one
/// generic set of calls.
pub trait ThreadLock: sealed::Sealed {
    #[doc(hidden)]
    fn acquire_interruptibly(
        &self,
        deadline: crate::wait::Deadline,
        interrupted: crate::wait::Interrupt<'_>,
    ) -> Result<()>;
    #[doc(hidden)]
    fn default_timeout(&self) -> Option<std::time::Duration>;
    #[doc(hidden)]
    fn owned(&self) -> Result<bool>;
    #[doc(hidden)]
    fn locked(&self) -> Result<bool>;
    #[doc(hidden)]
    fn identity(&self) -> String;
    #[doc(hidden)]
    fn release(&self) -> Result<bool>;
    #[doc(hidden)]
    fn leave(&self) -> Result<bool>;
    #[doc(hidden)]
    fn leave_in_background(&self);
    #[doc(hidden)]
    fn healthy(&self) -> bool;
    #[doc(hidden)]
    fn check_health(&self) -> Result<()>;
    #[doc(hidden)]
    fn fencing_token(&self) -> Option<u64>;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// Proof that a holder holds a lock `L`; releases it on drop. The holder
/// is the thread that acquired it, or the task for the `_async` acquires;
/// the guard speaks for that holder wherever it is used or dropped.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct Guard<'a, L: ThreadLock> {
    lock: &'a L,
    holder: u64,
    /// Taken by an async task: dropped, it gives the lock back in the
    /// background rather than block the task's executor.
    in_task: bool,
    released: bool,
}

impl<'a, L: ThreadLock> Guard<'a, L> {
    /// The guard of the calling thread's hold.
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
    pub(crate) fn new(lock: &'a L) -> Self {
        Guard {
            lock,
            holder: holder_number(),
            in_task: false,
            released: false,
        }
    }

    /// The guard of an async task's hold, `holder` being its number.
    #[cfg(any(feature = "redis", feature = "gcs"))]
    pub(crate) fn for_task(lock: &'a L, holder: u64) -> Self {
        Guard {
            lock,
            holder,
            in_task: true,
            released: false,
        }
    }

    /// Runs `f` as this guard's holder.
    fn as_holder<R>(&self, f: impl FnOnce(&L) -> R) -> R {
        as_holder_number(self.holder, || f(self.lock))
    }

    /// The fencing token of this grant: larger than every earlier grant's.
    pub fn fencing_token(&self) -> u64 {
        self.as_holder(L::fencing_token)
            .expect("a guard's holder holds the lock")
    }

    /// Whether the lease is surely still live (reads a flag and the clock).
    pub fn healthy(&self) -> bool {
        self.as_holder(L::healthy)
    }

    /// Ok while healthy.
    ///
    /// # Errors
    /// [`crate::Error::LockUnhealthy`] once the lock may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.as_holder(L::check_health)
    }

    /// Releases now and reports whether the server still had the lock.
    pub fn release(mut self) -> Result<bool> {
        self.released = true;
        self.as_holder(L::release)
    }

    /// Marks the guard released and returns its holder, for a release done
    /// elsewhere (an async one).
    #[cfg(any(feature = "redis", feature = "gcs"))]
    pub(crate) fn disarm(mut self) -> (&'a L, u64) {
        self.released = true;
        (self.lock, self.holder)
    }
}

impl<L: ThreadLock> Drop for Guard<'_, L> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // A guard dropped in a process forked while it was held leaves the
        // parent's hold alone (both kinds of leave see to it).
        if self.in_task {
            self.as_holder(L::leave_in_background);
        } else if let Err(e) = self.as_holder(L::leave) {
            log::warn!("releasing a lock guard failed: {e}");
        }
    }
}

/// Implements [`ThreadLock`] by the lock's own inherent methods.
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
macro_rules! thread_lock {
    ($lock:ty) => {
        impl $crate::guard::sealed::Sealed for $lock {}
        impl $crate::guard::ThreadLock for $lock {
            fn acquire_interruptibly(
                &self,
                deadline: $crate::wait::Deadline,
                interrupted: $crate::wait::Interrupt<'_>,
            ) -> $crate::Result<()> {
                <$lock>::acquire_interruptibly(self, deadline, interrupted)
            }
            fn default_timeout(&self) -> Option<std::time::Duration> {
                <$lock>::default_timeout(self)
            }
            fn owned(&self) -> $crate::Result<bool> {
                <$lock>::owned(self)
            }
            fn locked(&self) -> $crate::Result<bool> {
                <$lock>::locked(self)
            }
            fn identity(&self) -> String {
                <$lock>::identity(self)
            }
            fn release(&self) -> $crate::Result<bool> {
                <$lock>::release(self)
            }
            fn leave(&self) -> $crate::Result<bool> {
                <$lock>::leave(self)
            }
            fn leave_in_background(&self) {
                <$lock>::leave_in_background(self)
            }
            fn healthy(&self) -> bool {
                <$lock>::healthy(self)
            }
            fn check_health(&self) -> $crate::Result<()> {
                <$lock>::check_health(self)
            }
            fn fencing_token(&self) -> Option<u64> {
                <$lock>::fencing_token(self)
            }
        }
    };
}
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) use thread_lock;
