//! The guard every per-thread lock hands out: proof that the calling
//! thread holds it, released on drop.

use std::marker::PhantomData;

use crate::error::Result;

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
    fn healthy(&self) -> bool;
    #[doc(hidden)]
    fn check_health(&self) -> Result<()>;
    #[doc(hidden)]
    fn fencing_token(&self) -> Option<u64>;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// Proof that the calling thread holds a lock `L`; releases it on drop.
/// Not `Send`: the hold belongs to the thread that acquired it.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct Guard<'a, L: ThreadLock> {
    lock: &'a L,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl<'a, L: ThreadLock> Guard<'a, L> {
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
    pub(crate) fn new(lock: &'a L) -> Self {
        Guard {
            lock,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// The fencing token of this grant: larger than every earlier grant's.
    pub fn fencing_token(&self) -> u64 {
        self.lock
            .fencing_token()
            .expect("a guard's thread holds the lock")
    }

    /// Whether the lease is surely still live (reads a flag and the clock).
    pub fn healthy(&self) -> bool {
        self.lock.healthy()
    }

    /// Ok while healthy.
    ///
    /// # Errors
    /// [`crate::Error::LockUnhealthy`] once the lock may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.lock.check_health()
    }

    /// Releases now and reports whether the server still had the lock.
    pub fn release(mut self) -> Result<bool> {
        self.released = true;
        self.lock.release()
    }
}

impl<L: ThreadLock> Drop for Guard<'_, L> {
    fn drop(&mut self) {
        // A guard dropped in a process forked while it was held must leave
        // the parent's hold alone.
        if !self.released {
            if let Err(e) = self.lock.leave() {
                log::warn!("releasing a lock guard failed: {e}");
            }
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
