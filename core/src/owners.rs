//! Holders that end without releasing. A binding whose holders are not OS
//! threads (Ruby holds a lock per Fiber, see [`as_holder`](crate::as_holder))
//! ties each holder to an owner it can watch die (the Fiber's Thread), and
//! reports the owners that died: what their holders still hold is given
//! back, as Ruby unlocks a dead Thread's `Mutex`es, instead of being kept
//! and refreshed for as long as the lock object lives.
//!
//! ```no_run
//! // A binding, after a grant to the fiber `fiber` of the thread `thread`:
//! # let (fiber, thread) = (1, 2);
//! lockyard::owners::note_owner(fiber, thread);
//! // A watcher, now and then:
//! # let live_threads = [2];
//! for owner in lockyard::owners::owners_holding() {
//!     if !live_threads.contains(&owner) {
//!         for what in lockyard::owners::owner_ended(owner) {
//!             eprintln!("released {what}: its thread died holding it");
//!         }
//!     }
//! }
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::identity::binding_holder;

/// The holds of one lock object, as this module reaches them.
pub(crate) trait Holders: Send + Sync {
    /// Adds the holders that hold it in this process to `holding`.
    fn holding(&self, holding: &mut HashSet<u64>);

    /// Takes out the holds of `holders` and gives them back in the
    /// background; what was held (`lock "deploy"`), if any was.
    fn release_in_background(self: Arc<Self>, holders: &HashSet<u64>) -> Option<String>;
}

/// Every per-holder lock object alive in this process.
static TABLES: Mutex<Tables> = Mutex::new(Tables {
    all: Vec::new(),
    live_at_last_sweep: 0,
});

/// The tables, and how many lived when dead ones were last swept out:
/// sweeping at every registration would make building n lock objects cost
/// n² steps, so it waits until the list has doubled since.
struct Tables {
    all: Vec<Weak<dyn Holders>>,
    live_at_last_sweep: usize,
}

/// The owner of each holder noted since it last held nothing.
static OWNER_OF: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);

/// The process whose watcher runs (0: none), so that a forked child, where
/// the parent's watcher does not exist, starts its own.
static WATCHER: AtomicU32 = AtomicU32::new(0);

/// Whether the caller, having just noted an owner, must start a watcher:
/// true when none runs in this process, and then not again until
/// [`owners_holding`] finds nothing to watch (or [`watcher_failed`]). An
/// atomic, not a lock: a binding may be called where it cannot take one
/// (a Ruby trap handler).
pub fn watcher_needed() -> bool {
    let pid = crate::pid::current();
    WATCHER.swap(pid, Ordering::SeqCst) != pid
}

/// The watcher that [`watcher_needed`] asked for could not be started:
/// the next grant asks again.
pub fn watcher_failed() {
    let _ = WATCHER.compare_exchange(crate::pid::current(), 0, Ordering::SeqCst, Ordering::SeqCst);
}

/// Lets owners' ends reach `table`'s holds while it lives.
pub(crate) fn register(table: Weak<dyn Holders>) {
    let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    if tables.all.len() >= 2 * tables.live_at_last_sweep.max(8) {
        tables.all.retain(|table| table.strong_count() > 0);
        tables.live_at_last_sweep = tables.all.len();
    }
    tables.all.push(table);
}

fn live_tables() -> Vec<Arc<dyn Holders>> {
    let tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    tables.all.iter().filter_map(Weak::upgrade).collect()
}

fn owner_of() -> MutexGuard<'static, Option<HashMap<u64, u64>>> {
    OWNER_OF.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ties the holder `key` (a key given to [`as_holder`](crate::as_holder),
/// which has just been granted a hold) to `owner`: once
/// [`owner_ended`] reports `owner`, what `key` still holds is released.
pub fn note_owner(key: u64, owner: u64) {
    owner_of()
        .get_or_insert_with(HashMap::new)
        .insert(binding_holder(key), owner);
}

/// The owners whose holders hold something in this process: the ones to
/// watch. Empty when there is nothing to watch: the watcher must then stop,
/// and the next [`note_owner`]'s [`watcher_needed`] starts another (decided
/// under the same lock as `note_owner`, so no owner is left unwatched).
/// Forgets holders that hold nothing any more.
pub fn owners_holding() -> Vec<u64> {
    let mut holding = HashSet::new();
    for table in live_tables() {
        table.holding(&mut holding);
    }
    let mut owner_of = owner_of();
    let owners = owner_of.get_or_insert_with(HashMap::new);
    owners.retain(|holder, _| holding.contains(holder));
    let distinct: HashSet<u64> = owners.values().copied().collect();
    if distinct.is_empty() {
        watcher_failed();
    }
    distinct.into_iter().collect()
}

/// `owner` has ended: every hold its holders still have in this process
/// is given back in the background (this returns at once, never waiting on
/// a server) and logged as a warning. Returns what was held, one entry per
/// lock object (`lock "deploy"`), for the binding to tell its user.
pub fn owner_ended(owner: u64) -> Vec<String> {
    let holders: HashSet<u64> = match owner_of().as_mut() {
        Some(owners) => {
            let ended = owners
                .iter()
                .filter(|(_, of)| **of == owner)
                .map(|(holder, _)| *holder)
                .collect();
            owners.retain(|_, of| *of != owner);
            ended
        }
        None => return Vec::new(),
    };
    if holders.is_empty() {
        return Vec::new();
    }
    let released: Vec<String> = live_tables()
        .into_iter()
        .filter_map(|table| table.release_in_background(&holders))
        .collect();
    for what in &released {
        log::warn!("releasing {what}: its holder's thread ended without releasing it");
    }
    released
}
