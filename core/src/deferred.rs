//! Futures started later on lockyard's runtime, at a set time: a held
//! lock's first refresh. Spawning a task wakes the runtime's thread at
//! once, and aborting it wakes it again; for a lock held a few
//! milliseconds and released long before its first refresh is due, those
//! two wakes (and the thread switches they cost on a busy machine) were
//! most of what the refresher added to an acquire + release. Here a
//! future waits in a timetable instead; one dispatcher task per process
//! sleeps until the earliest entry is due and is woken only when an entry
//! due earlier than that arrives. Dropping a [`Deferred`] before its time
//! removes its entry without waking anyone.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::runtime;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A future waiting for its time, and where its handle finds the task
/// once it started.
struct Entry {
    task: Task,
    started: Started,
}

type Started = Arc<Mutex<Option<AbortHandle>>>;

/// This process's entries by due time (and a sequence number, for equal
/// times).
struct Timetable {
    pid: u32,
    next_id: u64,
    pending: BTreeMap<(Instant, u64), Entry>,
    /// When the dispatcher looks next; None while it waits for a notify.
    looks_at: Option<Instant>,
    notify: Arc<Notify>,
}

static TIMETABLE: Mutex<Option<Timetable>> = Mutex::new(None);

fn timetable() -> MutexGuard<'static, Option<Timetable>> {
    TIMETABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The timetable, locked for `fork` (see `runtime::held_across_fork`).
pub(crate) fn lock_for_fork() -> impl std::any::Any {
    timetable()
}

/// A future to be started at a set time; dropping this handle cancels it,
/// before its time or (aborting it) after.
pub(crate) struct Deferred {
    pid: u32,
    key: (Instant, u64),
    started: Started,
}

/// Starts `future` on lockyard's runtime at `at` (at once if `at` has
/// passed).
pub(crate) fn spawn_at<F>(at: Instant, future: F) -> Deferred
where
    F: Future<Output = ()> + Send + 'static,
{
    let pid = std::process::id();
    let mut guard = timetable();
    // A forked child starts a timetable of its own: its parent's entries
    // (and dispatcher) belong to the parent. They are leaked, not
    // dropped: a parent's future must not run its drop code in the child.
    if guard.as_ref().is_some_and(|table| table.pid != pid) {
        std::mem::forget(guard.take());
    }
    let table = guard.get_or_insert_with(|| {
        let notify = Arc::new(Notify::new());
        drop(runtime::spawn(dispatch(notify.clone())));
        Timetable {
            pid,
            next_id: 0,
            pending: BTreeMap::new(),
            looks_at: None,
            notify,
        }
    });
    let key = (at, table.next_id);
    table.next_id += 1;
    let started = Started::default();
    table.pending.insert(
        key,
        Entry {
            task: Box::pin(future),
            started: started.clone(),
        },
    );
    if table.looks_at.is_none_or(|looks_at| at < looks_at) {
        table.looks_at = Some(at);
        table.notify.notify_one();
    }
    Deferred { pid, key, started }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // A parent's handle dropped in a forked child: the entry lives in
        // the parent.
        if self.pid != std::process::id() {
            return;
        }
        let mut guard = timetable();
        if let Some(table) = guard.as_mut().filter(|table| table.pid == self.pid) {
            if table.pending.remove(&self.key).is_some() {
                return;
            }
        }
        // Started already: the dispatcher recorded its task under the
        // timetable's lock, which this drop took after it.
        drop(guard);
        let started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = &*started {
            task.abort();
        }
    }
}

/// Starts entries as they fall due, for as long as the process lives.
async fn dispatch(notify: Arc<Notify>) {
    loop {
        let next = {
            let mut guard = timetable();
            let Some(table) = guard.as_mut() else { return };
            let now = Instant::now();
            while let Some(entry) = table.pending.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let Entry { task, started } = entry.remove();
                let running = tokio::spawn(task).abort_handle();
                *started.lock().unwrap_or_else(|e| e.into_inner()) = Some(running);
            }
            table.looks_at = table.pending.keys().next().map(|key| key.0);
            table.looks_at
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at.into()) => {}
                    () = notify.notified() => {}
                }
            }
            None => notify.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    fn counter() -> (
        Arc<AtomicUsize>,
        impl Fn() -> Pin<Box<dyn Future<Output = ()> + Send>>,
    ) {
        let count = Arc::new(AtomicUsize::new(0));
        let bump = count.clone();
        (count, move || {
            let bump = bump.clone();
            Box::pin(async move {
                bump.fetch_add(1, Ordering::SeqCst);
            })
        })
    }

    #[test]
    fn an_entry_starts_at_its_time_and_not_before() {
        let (count, task) = counter();
        let started = Instant::now();
        let _later = spawn_at(started + Duration::from_millis(300), task());
        let _sooner = spawn_at(started + Duration::from_millis(100), task());
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(count.load(Ordering::SeqCst), 0);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "the sooner one woke the dispatcher"
        );
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_dropped_entry_never_starts() {
        let (count, task) = counter();
        let at = Instant::now() + Duration::from_millis(100);
        drop(spawn_at(at, task()));
        let _kept = spawn_at(at + Duration::from_millis(10), task());
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn dropping_a_started_entry_aborts_it() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = ticks.clone();
        let running = spawn_at(Instant::now(), async move {
            loop {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(running);
        let stopped_at = ticks.load(Ordering::SeqCst);
        assert!(stopped_at > 0, "it had started");
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            ticks.load(Ordering::SeqCst) <= stopped_at + 1,
            "still running"
        );
    }
}
