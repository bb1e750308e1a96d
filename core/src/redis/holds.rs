//! The holds of one lock object in this process. After `fork()` the child
//! starts with none: it must neither release nor refresh what its parent
//! holds, and it must not touch the parent's refresher tasks, whose runtime
//! has no thread in the child.

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

use super::semaphore::Hold;

pub(crate) struct Holds<K> {
    inner: Mutex<(u32, HashMap<K, Hold>)>,
}

impl<K: Eq + Hash> Holds<K> {
    pub(crate) fn new() -> Self {
        Holds {
            inner: Mutex::new((std::process::id(), HashMap::new())),
        }
    }

    /// This process's holds; a child's first look forgets the parent's.
    pub(crate) fn get(&self) -> ProcessHolds<'_, K> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        if inner.0 != pid {
            let inherited = std::mem::take(&mut inner.1);
            // Dropping would abort tasks on the parent's runtime.
            std::mem::forget(inherited);
            inner.0 = pid;
        }
        ProcessHolds(inner)
    }

    /// Takes every hold of this process, e.g. to release them on drop.
    pub(crate) fn drain(&self) -> Vec<Hold> {
        self.get().drain().map(|(_, hold)| hold).collect()
    }
}

/// The locked map of this process's holds.
pub(crate) struct ProcessHolds<'a, K>(MutexGuard<'a, (u32, HashMap<K, Hold>)>);

impl<K> Deref for ProcessHolds<'_, K> {
    type Target = HashMap<K, Hold>;
    fn deref(&self) -> &Self::Target {
        &self.0 .1
    }
}

impl<K> DerefMut for ProcessHolds<'_, K> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0 .1
    }
}
