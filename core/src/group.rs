//! What every wait group shares (`lockyard::redis::WaitGroup`,
//! `lockyard::etcd::WaitGroup`): the [`SlotGroup`] calls a binding wraps
//! once for all of them, and the [`Slot`] guard their `acquire` returns.

use crate::error::Result;
use crate::wait::{Deadline, Interrupt};

/// A counting semaphore with Go's WaitGroup shape, as lockyard's wait
/// groups are. Sealed: only lockyard's groups implement it. Its methods
/// are the groups' own inherent ones, gathered here so that a binding can
/// wrap every group with one set of calls.
pub trait SlotGroup: crate::guard::sealed::Sealed + Send + Sync {
    #[doc(hidden)]
    fn add(&self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<String>;
    #[doc(hidden)]
    fn enter(&self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<String>;
    #[doc(hidden)]
    fn done(&self, token: &str) -> Result<bool>;
    #[doc(hidden)]
    fn adopt(&self, token: &str) -> Result<bool>;
    #[doc(hidden)]
    fn leave(&self, token: &str) -> Result<bool>;
    #[doc(hidden)]
    fn leave_in_background(&self, token: &str);
    #[doc(hidden)]
    fn wait_interruptibly(&self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<()>;
    #[doc(hidden)]
    fn count(&self) -> Result<u32>;
    #[doc(hidden)]
    fn fencing_token(&self, token: &str) -> Option<u64>;
    #[doc(hidden)]
    fn healthy(&self, token: &str) -> bool;
    #[doc(hidden)]
    fn check_health(&self, token: &str) -> Result<()>;
    #[doc(hidden)]
    fn release_blocks_in_background(&self);
}

/// One held slot of a wait group `G`; freed on drop.
#[must_use = "the slot is freed as soon as the guard is dropped"]
pub struct Slot<'a, G: SlotGroup> {
    group: &'a G,
    token: String,
    /// Taken by an async task: dropped, it frees the slot in the
    /// background rather than block the task's executor.
    in_task: bool,
    released: bool,
}

impl<'a, G: SlotGroup> Slot<'a, G> {
    pub(crate) fn new(group: &'a G, token: String) -> Self {
        Slot {
            group,
            token,
            in_task: false,
            released: false,
        }
    }

    /// The slot of an async task.
    #[cfg(any(feature = "redis", feature = "etcd"))]
    pub(crate) fn for_task(group: &'a G, token: String) -> Self {
        Slot {
            group,
            token,
            in_task: true,
            released: false,
        }
    }

    /// Marks the slot freed and returns its group and token, for a release
    /// done elsewhere (an async one).
    #[cfg(any(feature = "redis", feature = "etcd"))]
    pub(crate) fn disarm(mut self) -> (&'a G, String) {
        self.released = true;
        (self.group, std::mem::take(&mut self.token))
    }

    /// The slot's token (what the group's `done` takes).
    pub fn token(&self) -> &str {
        &self.token
    }
    /// The slot's fencing token: larger than every earlier grant's.
    pub fn fencing_token(&self) -> u64 {
        self.group
            .fencing_token(&self.token)
            .expect("a guard's slot is held")
    }
    /// Whether the slot is surely still live (reads a flag).
    pub fn healthy(&self) -> bool {
        self.group.healthy(&self.token)
    }
    /// Ok while healthy.
    ///
    /// # Errors
    /// [`crate::Error::LockUnhealthy`] once the slot may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.group.check_health(&self.token)
    }
}

impl<G: SlotGroup> Drop for Slot<'_, G> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.in_task {
            self.group.leave_in_background(&self.token);
        } else if let Err(e) = self.group.leave(&self.token) {
            log::warn!("freeing a slot failed: {e}");
        }
    }
}

/// Implements [`SlotGroup`] by the group's own inherent methods.
macro_rules! slot_group {
    ($group:ty) => {
        impl $crate::guard::sealed::Sealed for $group {}
        impl $crate::group::SlotGroup for $group {
            fn add(
                &self,
                deadline: $crate::wait::Deadline,
                interrupted: $crate::wait::Interrupt<'_>,
            ) -> $crate::Result<String> {
                <$group>::add(self, deadline, interrupted)
            }
            fn enter(
                &self,
                deadline: $crate::wait::Deadline,
                interrupted: $crate::wait::Interrupt<'_>,
            ) -> $crate::Result<String> {
                <$group>::enter(self, deadline, interrupted)
            }
            fn done(&self, token: &str) -> $crate::Result<bool> {
                <$group>::done(self, token)
            }
            fn adopt(&self, token: &str) -> $crate::Result<bool> {
                <$group>::adopt(self, token)
            }
            fn leave(&self, token: &str) -> $crate::Result<bool> {
                <$group>::leave(self, token)
            }
            fn leave_in_background(&self, token: &str) {
                <$group>::leave_in_background(self, token)
            }
            fn wait_interruptibly(
                &self,
                deadline: $crate::wait::Deadline,
                interrupted: $crate::wait::Interrupt<'_>,
            ) -> $crate::Result<()> {
                <$group>::wait_interruptibly(self, deadline, interrupted)
            }
            fn count(&self) -> $crate::Result<u32> {
                <$group>::count(self)
            }
            fn fencing_token(&self, token: &str) -> Option<u64> {
                <$group>::fencing_token(self, token)
            }
            fn healthy(&self, token: &str) -> bool {
                <$group>::healthy(self, token)
            }
            fn check_health(&self, token: &str) -> $crate::Result<()> {
                <$group>::check_health(self, token)
            }
            fn release_blocks_in_background(&self) {
                <$group>::release_blocks_in_background(self)
            }
        }
    };
}
pub(crate) use slot_group;
