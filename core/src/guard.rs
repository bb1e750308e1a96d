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
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
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
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
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

/// The `_async` twins of a lock held per thread or task, inside its
/// `impl`: its `take_async(holder, deadline)` and
/// `release_holder_async(holder)` do the work, and each task is a holder.
/// [`async_guard!`] gives its guard `release_async`.
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
macro_rules! async_twins {
    () => {
        /// The async twin of [`Lock::acquire`]: waits up to `timeout`
        /// (None: forever) on the calling task's runtime, holding no
        /// thread, and returns a guard of the task's hold. Each task is a
        /// holder, as each thread is for [`Lock::acquire`]. Dropping the
        /// future before it completes leaves nothing held or queued (what
        /// is left to undo finishes in the background); dropping the guard
        /// gives the lock back in the background, never blocking the
        /// executor ([`LockGuard::release_async`] waits for the answer
        /// instead).
        ///
        /// # Errors
        /// Those of [`Lock::acquire`]; [`Error::AlreadyLocked`] if the
        /// calling task holds it already; [`Error::Config`] when awaited
        /// outside a tokio runtime by a lock whose connections run on the
        /// caller's runtime (Redis; the GCS and etcd locks' waits run on
        /// lockyard's runtime, and any executor may await them).
        pub async fn acquire_async(&self, timeout: Option<Duration>) -> Result<LockGuard<'_>> {
            let holder = $crate::identity::task_holder_number();
            self.take_async(holder, Deadline::after(timeout)).await?;
            Ok(LockGuard::for_task(self, holder))
        }

        /// The async twin of [`Lock::try_acquire`]: one attempt.
        pub async fn try_acquire_async(&self) -> Result<Option<LockGuard<'_>>> {
            let holder = $crate::identity::task_holder_number();
            let acquired = self
                .take_async(holder, Deadline::after(Some(Duration::ZERO)))
                .await
                .in_time()?;
            Ok(acquired.then(|| LockGuard::for_task(self, holder)))
        }

        /// The async twin of [`Lock::lock`]: waits with the builder's `timeout`.
        pub async fn lock_async(&self) -> Result<LockGuard<'_>> {
            self.acquire_async(self.default_timeout).await
        }

        /// The async twin of [`Lock::release`], for the calling task's hold.
        ///
        /// # Errors
        /// [`Error::NotLocked`] if the calling task does not hold it.
        pub async fn release_async(&self) -> Result<bool> {
            self.release_holder_async($crate::identity::task_holder_number())
                .await
        }

        /// [`Lock::acquire_async`] for the holder `key` (as
        /// [`crate::as_holder`] takes): for a binding whose holders are not
        /// tokio tasks (asyncio Tasks), which reads the hold with
        /// `as_holder(key, ...)` and ends it with
        /// [`Lock::release_for_async`] or [`Lock::leave_for_async`].
        ///
        /// # Errors
        /// Those of [`Lock::acquire_async`].
        pub async fn acquire_for_async(&self, key: u64, deadline: Deadline) -> Result<()> {
            self.take_async($crate::identity::binding_holder(key), deadline)
                .await
        }

        /// [`Lock::release_async`] for the holder `key`.
        ///
        /// # Errors
        /// [`Error::NotLocked`] if `key` holds nothing.
        pub async fn release_for_async(&self, key: u64) -> Result<bool> {
            self.release_holder_async($crate::identity::binding_holder(key))
                .await
        }
    };
}
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) use async_twins;

/// `release_async` for the guard of a lock with [`async_twins!`].
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
macro_rules! async_guard {
    ($lock:ty) => {
        impl $crate::guard::Guard<'_, $lock> {
            /// The async twin of
            /// [`Guard::release`](crate::guard::Guard::release): releases
            /// now and reports whether the server still had the lock.
            /// Dropped before the answer, the release finishes in the
            /// background.
            pub async fn release_async(self) -> $crate::Result<bool> {
                let (lock, holder) = self.disarm();
                lock.release_holder_async(holder).await
            }
        }
    };
}
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) use async_guard;
