//! The holds of one lock object in this process, by holder (thread, or the
//! key a binding set with `as_holder`) or by slot token. After `fork()` the child
//! starts with none: it must neither release nor refresh what its parent
//! holds, and it must not touch the parent's refresher tasks, whose runtime
//! has no thread in the child.

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

pub(crate) struct Holds<K, V> {
    inner: Mutex<(u32, HashMap<K, V>)>,
}

impl<K: Eq + Hash, V> Holds<K, V> {
    pub(crate) fn new() -> Self {
        Holds {
            inner: Mutex::new((std::process::id(), HashMap::new())),
        }
    }

    /// This process's holds; a child's first look forgets the parent's.
    pub(crate) fn get(&self) -> ProcessHolds<'_, K, V> {
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
    pub(crate) fn drain(&self) -> Vec<V> {
        self.get().drain().map(|(_, hold)| hold).collect()
    }
}

/// The locked map of this process's holds.
pub(crate) struct ProcessHolds<'a, K, V>(MutexGuard<'a, (u32, HashMap<K, V>)>);

impl<K, V> Deref for ProcessHolds<'_, K, V> {
    type Target = HashMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.0 .1
    }
}

impl<K, V> DerefMut for ProcessHolds<'_, K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0 .1
    }
}
