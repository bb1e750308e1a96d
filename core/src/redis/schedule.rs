//! The refresh schedule: every granted slot this process keeps alive on
//! its own (outside a session) waits here, as a small record and not as a
//! task of its own, until its next refresh falls due. One dispatcher task
//! per process sleeps until the earliest is due, takes every record due
//! by then and sends their refreshes in pipelines, one node at a time
//! (see `refresh_batch`). Due times fall on a grid shared by the whole
//! process, so locks taken moments apart are refreshed together: a
//! process holding ten thousand locks sends a handful of pipelines per
//! refresh period, and keeps a couple of hundred bytes per lock.
//!
//! A record handed to a refresh is out of the schedule until the answer
//! comes; dropping its [`Scheduled`] handle meanwhile means the answer is
//! dropped with it, and the record never comes back.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::refresh_batch::{self, by_node, ByNode, Refresh, MOST_IN_ONE};
use super::server::Server;
use super::slots::{Renewal, Slots, WAITER_LEASE};
use crate::clock::Stamp;
use crate::error::Result;
use crate::health::Health;
use crate::lease::{KeepAlive, Lease, Verdict};
use crate::runtime;

/// One granted slot kept alive by the schedule.
pub(crate) struct Kept {
    pub(crate) slots: Arc<Slots>,
    pub(crate) token: Arc<str>,
    pub(crate) refresher: Box<str>,
    pub(crate) health: Arc<Health>,
    keep: KeepAlive,
    /// False for a handed-over grant until its first refresh lands: it
    /// lasts only the handoff window, so its tries come quickly, off the
    /// grid.
    taken_up: bool,
}

impl Refresh for Record {
    fn slots(&self) -> &Slots {
        &self.1.slots
    }
    fn token(&self) -> &str {
        &self.1.token
    }
    fn refresher(&self) -> &str {
        &self.1.refresher
    }
}

/// This process's records: `waiting` by id (None while its refresh is
/// under way), `due` in the order they fall due.
struct Schedule {
    pid: u32,
    next_id: u64,
    waiting: HashMap<u64, Option<(Instant, Kept)>>,
    due: BTreeSet<(Instant, u64)>,
    /// When the dispatcher looks next; None while it waits for a notify.
    looks_at: Option<Instant>,
    notify: Arc<Notify>,
}

static SCHEDULE: Mutex<Option<Schedule>> = Mutex::new(None);

fn schedule() -> MutexGuard<'static, Option<Schedule>> {
    SCHEDULE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `change` applied to this process's schedule, if it has one (a forked
/// child's inherited schedule is its parent's).
fn in_own_schedule<R>(change: impl FnOnce(&mut Schedule) -> R) -> Option<R> {
    let pid = crate::pid::current();
    schedule().as_mut().filter(|s| s.pid == pid).map(change)
}

/// The schedule, locked for `fork` (see `runtime::held_across_fork`).
pub(crate) fn lock_for_fork() -> impl std::any::Any {
    schedule()
}

/// A slot's place in the schedule; dropping it stops keeping the slot
/// alive (the slot itself is given back by its release, or runs out).
pub(crate) struct Scheduled {
    pid: u32,
    id: u64,
}

impl Kept {
    /// Keeps `token`'s slot alive from now on as `refresher`, first
    /// refreshing it at once when `handed_over` (a grant handed to a
    /// waiter lasts only the handoff window), else when a refresh period
    /// has passed.
    pub(crate) fn start(
        slots: Arc<Slots>,
        token: Arc<str>,
        refresher: &str,
        health: Arc<Health>,
        handed_over: bool,
    ) -> Scheduled {
        let first = match handed_over {
            true => Instant::now(),
            false => on_the_grid(slots.lease.refresh_every, &slots.lease),
        };
        let kept = Kept {
            keep: KeepAlive::new(&slots.lease),
            slots,
            token,
            refresher: refresher.into(),
            health,
            taken_up: !handed_over,
        };
        let pid = crate::pid::current();
        let mut guard = schedule();
        // A forked child keeps its own slots alive: its parent's records
        // (and dispatcher) belong to the parent. Leaked, not dropped: their
        // drops belong to the parent too.
        if guard.as_ref().is_some_and(|schedule| schedule.pid != pid) {
            std::mem::forget(guard.take());
        }
        let schedule = guard.get_or_insert_with(|| {
            let notify = Arc::new(Notify::new());
            drop(runtime::spawn(dispatch(notify.clone())));
            Schedule {
                pid,
                next_id: 0,
                waiting: HashMap::new(),
                due: BTreeSet::new(),
                looks_at: None,
                notify,
            }
        });
        let id = schedule.next_id;
        schedule.next_id += 1;
        schedule.waiting.insert(id, None);
        schedule.put_back(id, first, kept);
        Scheduled { pid, id }
    }
}

impl Schedule {
    /// `kept` falls due at `at`, unless its handle was dropped meanwhile.
    fn put_back(&mut self, id: u64, at: Instant, kept: Kept) {
        let Some(place) = self.waiting.get_mut(&id) else {
            return;
        };
        *place = Some((at, kept));
        self.due.insert((at, id));
        if self.looks_at.is_none_or(|looks_at| at < looks_at) {
            self.looks_at = Some(at);
            self.notify.notify_one();
        }
    }

    /// Takes out every record due by `now`: the handed-over grants, and
    /// the others already grouped by the node their route leads to now
    /// (so that ten thousand records due at once are moved only once).
    fn take_due(&mut self, now: Instant) -> (Vec<Record>, ByNode<Record>) {
        let Schedule { due, waiting, .. } = self;
        let taken = std::iter::from_fn(|| loop {
            let &(at, id) = due.first()?;
            if at > now {
                return None;
            }
            due.pop_first();
            if let Some((_, kept)) = waiting.get_mut(&id).and_then(Option::take) {
                return Some((id, kept));
            }
        });
        let mut handed_over = Vec::new();
        let taken_up = taken.filter_map(|(id, kept)| match kept.taken_up {
            true => Some((id, kept)),
            false => {
                handed_over.push((id, kept));
                None
            }
        });
        let nodes = by_node(taken_up);
        (handed_over, nodes)
    }
}

impl Drop for Scheduled {
    fn drop(&mut self) {
        // A parent's handle dropped in a forked child: the record lives
        // in the parent.
        if self.pid != crate::pid::current() {
            return;
        }
        in_own_schedule(|schedule| {
            if let Some(Some((at, _))) = schedule.waiting.remove(&self.id) {
                schedule.due.remove(&(at, self.id));
            }
        });
    }
}

/// Refreshes records as they fall due, for as long as the process lives.
async fn dispatch(notify: Arc<Notify>) {
    loop {
        let (handed_over, nodes, next) = {
            let mut guard = schedule();
            let Some(schedule) = guard.as_mut() else {
                return;
            };
            let now = Instant::now();
            let (handed_over, nodes) = schedule.take_due(now);
            // A look still ahead stays when releases emptied the schedule
            // since it was set: put_back notifies only for an earlier look,
            // so locks taken and released before their first refresh never
            // wake this thread, which would cost each acquire a thread hop.
            let ahead = schedule.looks_at.filter(|&at| at > now);
            schedule.looks_at = schedule.due.first().map(|&(at, _)| at).or(ahead);
            (handed_over, nodes, schedule.looks_at)
        };
        // A handed-over grant goes alone, each try within its share of the
        // handoff window: a pipeline on a connection gone silent would wait
        // out the whole background timeout, longer than the window lasts.
        for (id, kept) in handed_over {
            drop(tokio::spawn(refresh_alone(id, kept)));
        }
        for (server, records) in nodes {
            drop(tokio::spawn(refresh_on(server, records)));
        }
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

/// A record taken out of the schedule for its refresh, with its id.
type Record = (u64, Kept);

/// Refreshes `records` on `server` in pipelines, one after another; a
/// refresh the pipeline did not settle goes alone along its route.
async fn refresh_on(server: Arc<Server>, mut records: Vec<Record>) {
    // Pipelines are cut from the tail, so that only each pipeline's own
    // records move; reversed first, so that the earliest due (a refresh
    // already late, say) still go first.
    records.reverse();
    while !records.is_empty() {
        let batch = records.split_off(records.len().saturating_sub(MOST_IN_ONE));
        let sent = Stamp::now();
        let replies = refresh_batch::pipelined(&server, &batch).await;
        for ((id, kept), reply) in batch.into_iter().zip(replies) {
            match reply {
                Some(renewed) => settle(id, kept, sent, Ok(renewed)),
                None => drop(tokio::spawn(refresh_alone(id, kept))),
            }
        }
    }
}

/// Refreshes `kept` on its own along its route. A handed-over grant's try
/// is given up after a quarter of the handoff window (or its share of the
/// window, if longer): long enough for a slow link, short enough that a
/// try stuck on a connection gone silent leaves time for another on a new
/// one.
async fn refresh_alone(id: u64, kept: Kept) {
    let lease = &kept.slots.lease;
    let limit = match kept.taken_up {
        true => lease.background_timeout(),
        false => first_refresh_retry(lease)
            .max(WAITER_LEASE / 4)
            .min(lease.background_timeout()),
    };
    let sent = Stamp::now();
    let renewed = kept
        .slots
        .refresh_alone(&kept.token, &kept.refresher, limit)
        .await;
    settle(id, kept, sent, renewed);
}

/// What a refresh sent at `sent` came to for `kept`: its health, and when
/// it is refreshed next, if ever. A refresh that finds the slot gone marks
/// it lost at once; failures only after `max_refresh_fails` in a row.
fn settle(id: u64, mut kept: Kept, sent: Stamp, renewed: Result<Vec<i64>>) {
    // Released while the refresh was under way (a handed-over grant is
    // refreshed at once, and often released first): the answer, likely
    // "gone", is nobody's, and no warning is due.
    if !still_kept(id) {
        return;
    }
    let what = &kept.slots.what;
    match renewed.map(|renewed| Renewal::of(&renewed)) {
        Ok(Renewal::Extended) => {
            kept.taken_up = true;
            kept.keep.succeeded();
            kept.health.extend(sent + kept.slots.lease.ttl);
        }
        Ok(Renewal::Adopted) => {
            // Not lost: kept alive elsewhere now, and no longer ours.
            log::debug!("a slot of {what} was adopted by another process");
            kept.health
                .mark_lost("the slot was adopted by another process");
            return;
        }
        Ok(Renewal::Lost) => {
            let reason =
                "the lease ran out or the slot was taken over before it could be refreshed";
            log::warn!("{what} lost: {reason}");
            kept.health.mark_lost(reason);
            return;
        }
        Err(e) => {
            let verdict = kept.keep.failed(&e);
            log::warn!("refreshing {what} failed ({}): {e}", kept.keep.tally());
            if let Verdict::Exhausted(reason) = verdict {
                kept.health.mark_lost(reason);
                return;
            }
        }
    }
    let next = match kept.taken_up {
        true => on_the_grid(kept.keep.next_try(None), &kept.slots.lease),
        false => Instant::now() + first_refresh_retry(&kept.slots.lease),
    };
    in_own_schedule(|schedule| schedule.put_back(id, next, kept));
}

/// Whether record `id`'s handle is still held in this process.
fn still_kept(id: u64) -> bool {
    in_own_schedule(|schedule| schedule.waiting.contains_key(&id)).unwrap_or(false)
}

/// When a refresh due `after` from now is sent: at the last point at or
/// before it of a grid a quarter of the refresh period apart, shared by
/// the whole process. Locks taken moments apart then fall due at the same
/// instant, and go out in one pipeline; once on the grid, a hold stays on
/// it. A refresh comes at most a quarter period early, never late.
fn on_the_grid(after: Duration, lease: &Lease) -> Instant {
    static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);
    // The origin first: the very first due time is then past it too.
    let origin = *ORIGIN;
    let due = Instant::now() + after;
    let step = (lease.refresh_every / 4).as_nanos();
    if step == 0 {
        return due;
    }
    let since = (due - origin).as_nanos();
    let on_grid = u64::try_from(since - since % step).unwrap_or(u64::MAX);
    origin + Duration::from_nanos(on_grid)
}

/// The pause between tries of a handed-over grant's first refresh: every
/// one of `max_refresh_fails` tries fits in the handoff window.
pub(crate) fn first_refresh_retry(lease: &Lease) -> Duration {
    WAITER_LEASE / (lease.max_refresh_fails + 1)
}
