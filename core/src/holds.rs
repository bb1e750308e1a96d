//! The holds of one lock object in this process, by holder (thread, or the
//! key a binding set with `as_holder`) or by slot token. After `fork()` the child
//! starts with none: it must neither release nor refresh what its parent
//! holds, and it must not touch the parent's refresher tasks, whose runtime
//! has no thread in the child. It remembers which holders it inherited, so
//! that leaving a block entered before the fork ends quietly instead of
//! releasing (or failing to release) the parent's hold.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

pub(crate) struct Holds<K, V> {
    inner: Mutex<State<K, V>>,
}

struct State<K, V> {
    pid: u32,
    holds: HashMap<K, V>,
    /// What the parent (or an earlier ancestor) held when this process was
    /// forked: blocks this process may still be inside of.
    inherited: HashSet<K>,
}

/// What the end of a block that took a hold finds.
pub(crate) enum Leaving<V> {
    /// This process's own hold, taken out of the map: release it.
    Held(V),
    /// A hold of the process this one was forked from: not ours to end.
    Inherited,
    /// No hold at all (released already, or never taken).
    NotHeld,
}

impl<K: Eq + Hash + Clone, V> Holds<K, V> {
    pub(crate) fn new() -> Self {
        Holds {
            inner: Mutex::new(State {
                pid: std::process::id(),
                holds: HashMap::new(),
                inherited: HashSet::new(),
            }),
        }
    }

    /// This process's holds; a child's first look forgets the parent's.
    pub(crate) fn get(&self) -> ProcessHolds<'_, K, V> {
        let mut state = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let pid = std::process::id();
        if state.pid != pid {
            let inherited = std::mem::take(&mut state.holds);
            state.inherited.extend(inherited.keys().cloned());
            // Dropping would abort tasks on the parent's runtime.
            std::mem::forget(inherited);
            state.pid = pid;
        }
        ProcessHolds(state)
    }

    /// Takes every hold of this process, e.g. to release them on drop.
    pub(crate) fn drain(&self) -> Vec<V> {
        self.get().drain().map(|(_, hold)| hold).collect()
    }

    /// Ends `key`'s block: takes out its hold, or says whose it was.
    pub(crate) fn leave<Q>(&self, key: &Q) -> Leaving<V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let mut holds = self.get();
        if let Some(hold) = holds.remove(key) {
            return Leaving::Held(hold);
        }
        if holds.0.inherited.remove(key) {
            return Leaving::Inherited;
        }
        Leaving::NotHeld
    }
}

/// The locked map of this process's holds.
pub(crate) struct ProcessHolds<'a, K, V>(MutexGuard<'a, State<K, V>>);

impl<K, V> Deref for ProcessHolds<'_, K, V> {
    type Target = HashMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.0.holds
    }
}

impl<K, V> DerefMut for ProcessHolds<'_, K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0.holds
    }
}
