//! The holds of one lock object in this process, by holder (thread, or the
//! key a binding set with `as_holder`) or by slot token. After `fork()` the child
//! starts with none: it must neither release nor refresh what its parent
//! holds, and it must not touch the parent's refresher tasks, whose runtime
//! has no thread in the child. It remembers which holders it inherited, so
//! that leaving a block entered before the fork ends quietly instead of
//! releasing (or failing to release) the parent's hold.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::health::{self, Health};
use crate::owners::{self, Holders};
use crate::runtime;
use crate::small_map::SmallMap;
use crate::wait::Deadline;

pub(crate) struct Holds<K, V> {
    inner: Mutex<State<K, V>>,
}

struct State<K, V> {
    pid: u32,
    holds: SmallMap<K, V>,
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
                pid: crate::pid::current(),
                holds: SmallMap::default(),
                inherited: HashSet::new(),
            }),
        }
    }

    /// This process's holds; a child's first look forgets the parent's.
    pub(crate) fn get(&self) -> ProcessHolds<'_, K, V> {
        let mut state = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let pid = crate::pid::current();
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
    type Target = SmallMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.0.holds
    }
}

impl<K, V> DerefMut for ProcessHolds<'_, K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0.holds
    }
}

/// A hold of a per-thread lock, as far as the per-thread face needs it.
pub(crate) trait Held {
    fn health(&self) -> &Health;
}

/// The per-thread face the Redis lock, the GCS lock and the quorum RwLock
/// share: one hold per holder (a thread, or a binding's `as_holder` key),
/// no re-entry, and the errors for holding twice or not at all, worded once.
pub(crate) struct PerHolder<V> {
    table: Arc<Table<V>>,
}

/// A holder's acquire under way, ended when dropped.
struct Acquiring<'a> {
    acquiring: &'a Holds<u64, ()>,
    holder: u64,
}

impl Drop for Acquiring<'_> {
    fn drop(&mut self) {
        self.acquiring.get().remove(&self.holder);
    }
}

/// The holds, shared with `owners`, which releases those of holders whose
/// owner ended.
struct Table<V> {
    holds: Holds<u64, V>,
    /// The holders acquiring now (this process's).
    acquiring: Holds<u64, ()>,
    what: String,
    /// How the lock gives a hold back when nobody waits for it: on drop, in
    /// the background.
    give_back: GiveBack<V>,
    /// The holds belong to the lock object, not to the holder that took
    /// them (the GCS lock's `hold_per_instance`): a holder that ends does
    /// not end them.
    outlive_holders: bool,
}

type GiveBack<V> = Box<dyn Fn(V) -> Result<bool> + Send + Sync>;

impl<V: Held + Send + 'static> PerHolder<V> {
    /// `give_back` releases a hold on drop and in the background (a holder
    /// that ended without releasing, a lock dropped by a garbage collector).
    #[cfg_attr(
        not(any(feature = "redis", feature = "etcd", feature = "quorum")),
        allow(dead_code, reason = "the GCS lock alone builds with_owner")
    )]
    pub(crate) fn new(
        what: String,
        give_back: impl Fn(V) -> Result<bool> + Send + Sync + 'static,
    ) -> Self {
        Self::with_owner(what, give_back, false)
    }

    /// [`PerHolder::new`]; with `outlive_holders`, a hold is the lock
    /// object's: it stays when the thread (or owner) that took it ends,
    /// and only a release, an abandon or the lock's drop ends it.
    pub(crate) fn with_owner(
        what: String,
        give_back: impl Fn(V) -> Result<bool> + Send + Sync + 'static,
        outlive_holders: bool,
    ) -> Self {
        let table = Arc::new(Table {
            holds: Holds::new(),
            acquiring: Holds::new(),
            what,
            give_back: Box::new(give_back),
            outlive_holders,
        });
        let shared: Arc<dyn Holders> = table.clone();
        owners::register(Arc::downgrade(&shared));
        PerHolder { table }
    }

    /// Gives back every hold of this process (a lock object dropped while
    /// held), rather than leaving them to expire.
    pub(crate) fn release_all(&self) {
        for hold in self.table.holds.drain() {
            self.table.give_back_logged(hold);
        }
    }

    /// [`PerHolder::release_all`] on the runtime's blocking threads: returns
    /// at once, for a drop that must not wait on a server (a garbage
    /// collector's finalizer).
    pub(crate) fn release_all_in_background(&self) {
        self.table.give_back_in_background(self.table.holds.drain());
    }
}

impl<V> Table<V> {
    fn warn_if_lost(&self, released: Result<bool>) -> Result<bool> {
        health::warn_if_lost(released, || self.what.clone(), "released", "another holder")
    }
}

impl<V: Held + Send + 'static> Table<V> {
    fn give_back_logged(&self, hold: V) {
        if let Err(e) = self.warn_if_lost((self.give_back)(hold)) {
            log::warn!("releasing {} failed: {e}", self.what);
        }
    }

    fn give_back_in_background(self: &Arc<Self>, holds: Vec<V>) {
        if holds.is_empty() {
            return;
        }
        let table = self.clone();
        runtime::spawn_blocking(move || {
            for hold in holds {
                table.give_back_logged(hold);
            }
        });
    }
}

impl<V: Held + Send + 'static> Holders for Table<V> {
    fn holding(&self, holding: &mut HashSet<u64>) {
        if self.outlive_holders {
            return;
        }
        holding.extend(self.holds.get().keys().copied());
    }

    fn release_in_background(self: Arc<Self>, holders: &HashSet<u64>) -> Option<String> {
        if self.outlive_holders {
            return None;
        }
        let ended: Vec<V> = {
            let mut holds = self.holds.get();
            holders.iter().filter_map(|h| holds.remove(h)).collect()
        };
        if ended.is_empty() {
            return None;
        }
        self.give_back_in_background(ended);
        Some(self.what.clone())
    }
}

impl<V: Held + Send + 'static> PerHolder<V> {
    /// This process's holds, for what only one lock does (the GCS lock's
    /// own queries, a quorum test's simulated crash).
    #[cfg(any(feature = "gcs", all(test, feature = "quorum")))]
    pub(crate) fn get(&self) -> ProcessHolds<'_, u64, V> {
        self.table.holds.get()
    }

    /// Takes a hold for `holder` with `take`, whose Ok(None) means
    /// `deadline` passed (answered with [`Error::Timeout`]). The map is not locked while `take` waits, so other holders of the
    /// same lock object wait in parallel.
    ///
    /// One acquire per holder at a time: a holder that holds the lock, or
    /// is acquiring it already, gets [`Error::AlreadyLocked`]. (Two
    /// acquires of one holder side by side — two tasks of a GCS lock that
    /// is not thread-safe, one identity — would each take the other's
    /// object for an abandoned one of theirs.)
    pub(crate) fn acquire(
        &self,
        holder: u64,
        deadline: Deadline,
        take: impl FnOnce() -> Result<Option<V>>,
    ) -> Result<()> {
        let _acquiring = self.start_acquiring(holder)?;
        let hold = take()?.ok_or_else(|| deadline.ran_out(&self.table.what))?;
        self.table.holds.get().insert(holder, hold);
        Ok(())
    }

    /// [`PerHolder::acquire`] for an async holder: `take` is awaited.
    /// Dropped meanwhile, the holder may acquire again. `take` comes boxed:
    /// a future taken by value is kept twice in the one awaiting it (as
    /// the argument, and where it is awaited), which doubled what every
    /// waiting task costs.
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
    pub(crate) async fn acquire_async(
        &self,
        holder: u64,
        deadline: Deadline,
        take: std::pin::Pin<Box<impl std::future::Future<Output = Result<Option<V>>>>>,
    ) -> Result<()> {
        let _acquiring = self.start_acquiring(holder)?;
        let hold = take
            .await?
            .ok_or_else(|| deadline.ran_out(&self.table.what))?;
        self.table.holds.get().insert(holder, hold);
        Ok(())
    }

    /// Marks `holder` as acquiring until the returned mark is dropped;
    /// [`Error::AlreadyLocked`] if it holds the lock or is acquiring it.
    fn start_acquiring(&self, holder: u64) -> Result<Acquiring<'_>> {
        let holds = self.table.holds.get();
        let mut acquiring = self.table.acquiring.get();
        if holds.contains_key(&holder) || acquiring.insert(holder, ()).is_some() {
            return Err(Error::AlreadyLocked(self.table.what.clone()));
        }
        Ok(Acquiring {
            acquiring: &self.table.acquiring,
            holder,
        })
    }

    /// Takes `holder`'s hold out, to be given back.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if `holder` has none.
    pub(crate) fn take_out(&self, holder: u64) -> Result<V> {
        self.table
            .holds
            .get()
            .remove(&holder)
            .ok_or_else(|| self.not_held())
    }

    /// Takes out the hold of a block `holder` entered, to be given back:
    /// None in a process forked inside the block (the hold is the
    /// parent's, not this one's to end).
    ///
    /// # Errors
    /// [`Error::NotLocked`] if `holder` has none.
    pub(crate) fn leave_out(&self, holder: u64) -> Result<Option<V>> {
        match self.table.holds.leave(&holder) {
            Leaving::Held(hold) => Ok(Some(hold)),
            Leaving::Inherited => Ok(None),
            Leaving::NotHeld => Err(self.not_held()),
        }
    }

    /// Reports a release like [`PerHolder::release`] does (a lost hold is
    /// logged).
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
    pub(crate) fn released(&self, released: Result<bool>) -> Result<bool> {
        self.table.warn_if_lost(released)
    }

    /// Takes `holder`'s hold out and gives it back with `give_back`.
    pub(crate) fn release(
        &self,
        holder: u64,
        give_back: impl FnOnce(V) -> Result<bool>,
    ) -> Result<bool> {
        let hold = self.take_out(holder)?;
        self.table.warn_if_lost(give_back(hold))
    }

    /// Ends a block `holder` entered: releases like [`PerHolder::release`],
    /// except in a process forked inside the block, where the hold is the
    /// parent's and this does nothing (Ok(true)).
    pub(crate) fn leave(
        &self,
        holder: u64,
        give_back: impl FnOnce(V) -> Result<bool>,
    ) -> Result<bool> {
        match self.leave_out(holder)? {
            Some(hold) => self.table.warn_if_lost(give_back(hold)),
            None => Ok(true),
        }
    }

    /// [`PerHolder::leave`] that returns at once: the hold is given back on
    /// the runtime's blocking threads (an async task's guard dropped).
    pub(crate) fn leave_in_background(&self, holder: u64) {
        if let Leaving::Held(hold) = self.table.holds.leave(&holder) {
            self.table.give_back_in_background(vec![hold]);
        }
    }

    /// Reads `holder`'s hold, if it has one.
    pub(crate) fn with<R>(&self, holder: u64, read: impl FnOnce(&V) -> R) -> Option<R> {
        self.table.holds.get().get(&holder).map(read)
    }

    pub(crate) fn healthy(&self, holder: u64) -> bool {
        self.with(holder, |hold| hold.health().is_healthy())
            .unwrap_or(false)
    }

    pub(crate) fn check_health(&self, holder: u64) -> Result<()> {
        self.with(holder, |hold| hold.health().check(&self.table.what))
            .unwrap_or_else(|| Err(self.not_held()))
    }

    fn not_held(&self) -> Error {
        Error::NotLocked(self.table.what.clone())
    }
}

impl<T: Held> Held for std::sync::Arc<T> {
    fn health(&self) -> &Health {
        (**self).health()
    }
}
