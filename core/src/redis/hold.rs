//! A granted slot and what keeps it alive: a refresher task of its own,
//! or the session it lives under, whose renewal refreshes it and whose
//! health is its health.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::keepalive::{Member, Membership};
use super::slots::{Renewal, Slots, WAITER_LEASE};
use crate::clock::Stamp;
use crate::deferred::{self, Deferred};
use crate::error::{Error, Result};
use crate::health::Health;
use crate::lease::{KeepAlive, Lease, Verdict};
use crate::runtime;

/// The refresher id of the process that took a slot (see `refresh.lua`);
/// a process that adopts a slot refreshes it under an id of its own.
pub(crate) const TAKER: &str = "";

/// One granted slot. Dropping it stops keeping it alive; the slot itself
/// is given back by `Semaphore::release` or runs out by TTL.
pub(crate) struct Hold {
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) health: Arc<Health>,
    _keeper: Keeper,
}

impl Hold {
    /// A granted slot, kept alive from now on by this process's refresher
    /// `refresher` (or by the session it was taken under).
    pub(crate) fn keep(
        slots: &Arc<Slots>,
        token: &str,
        fence: u64,
        valid_until: Stamp,
        refresh_now: bool,
        refresher: &str,
    ) -> Result<Hold> {
        let Some(binding) = &slots.binding else {
            let health = Arc::new(Health::new(valid_until));
            let refresh = refresh_loop(
                slots.clone(),
                token.to_owned(),
                refresher.to_owned(),
                health.clone(),
                refresh_now,
            );
            let keeper = if refresh_now {
                Keeper::Refresher(runtime::spawn(refresh))
            } else {
                // Most holds end before their first refresh is due: those
                // never start a task (see `deferred`).
                Keeper::Deferred {
                    _refresher: deferred::spawn_at(
                        on_the_grid(Instant::now() + slots.lease.refresh_every, &slots.lease),
                        refresh,
                    ),
                }
            };
            return Ok(Hold {
                token: token.to_owned(),
                fence,
                health,
                _keeper: keeper,
            });
        };
        if refresh_now {
            // A handed-over grant lasts only the handoff window; the
            // session's next renewal may come too late for it.
            take_up(slots, token, refresher, valid_until)?;
        }
        if let Err(lost) = binding.confirm() {
            // Given back as a clean release: no lock_delay for a grant its
            // session never used.
            slots.release_as(token, true)?;
            return Err(lost);
        }
        let member = Arc::new(SessionGrant {
            slots: slots.clone(),
            token: token.to_owned(),
        });
        Ok(Hold {
            token: token.to_owned(),
            fence,
            health: binding.health(),
            _keeper: Keeper::Session {
                _membership: binding.join(member)?,
            },
        })
    }
}

/// The first refresh of a slot handed over under a session, sent at once
/// from the caller's thread: its tries, `max_refresh_fails` at most, all
/// fit in the handoff window.
fn take_up(s: &Slots, token: &str, refresher: &str, valid_until: Stamp) -> Result<()> {
    let mut keep = KeepAlive::new(&s.lease);
    let renewed: Vec<i64> = loop {
        // No try can succeed after the handoff window: none may
        // outlast it.
        let window = valid_until.left().max(Duration::from_millis(100));
        let outcome = s.route.run("refresh", window, |conn| {
            s.refresh_script(conn.fence_base(), token, refresher)
                .invoke(conn)
        });
        match outcome {
            Err(e) => {
                let exhausted = matches!(keep.failed(&e), Verdict::Exhausted(_));
                if exhausted || valid_until.has_passed() {
                    return Err(e);
                }
                std::thread::sleep(first_refresh_retry(&s.lease));
            }
            Ok(renewed) => break renewed,
        }
    };
    if renewed.first() != Some(&1) {
        return Err(Error::LockUnhealthy {
            what: s.what.clone(),
            reason: "the handed-over grant ran out before it could be taken up".into(),
        });
    }
    Ok(())
}

/// What keeps a grant alive: its own refresher, or the session it lives
/// under (whose renewal refreshes it and whose health is its health).
enum Keeper {
    Refresher(JoinHandle<()>),
    /// A refresher that starts when the first refresh is due; dropped, it
    /// never starts or is aborted.
    Deferred {
        _refresher: Deferred,
    },
    Session {
        _membership: Membership,
    },
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Keeper::Refresher(refresher) = self {
            refresher.abort();
        }
    }
}

/// A grant kept alive by a session's renewal loop.
struct SessionGrant {
    slots: Arc<Slots>,
    token: String,
}

impl Member for SessionGrant {
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<bool>> + Send + '_>> {
        Box::pin(
            async move { Ok(self.slots.refresh(&self.token, TAKER).await? == Renewal::Extended) },
        )
    }

    fn release(&self) -> Result<bool> {
        self.slots.release_as(&self.token, true)
    }
}

/// Keeps one slot alive until aborted, refreshing it first when it starts
/// (it is started when that refresh is due). A refresh that finds the slot
/// gone marks it lost at once; transient failures only after
/// `max_refresh_fails` in a row.
async fn refresh_loop(
    slots: Arc<Slots>,
    token: String,
    refresher: String,
    health: Arc<Health>,
    handed_over: bool,
) {
    let lease = &slots.lease;
    let mut keep = KeepAlive::new(lease);
    // A handed-over grant lasts only the handoff window until its first
    // refresh: retries of that one come quickly enough to fit them all in.
    let mut taken_up = !handed_over;
    loop {
        let sent = Stamp::now();
        // Boxed: the refresh's state is large, and a held lock's refresher
        // spends nearly all its life between refreshes.
        let outcome = Box::pin(slots.refresh(&token, &refresher)).await;
        match outcome {
            Ok(Renewal::Extended) => {
                taken_up = true;
                keep.succeeded();
                health.extend(sent + lease.ttl);
            }
            Ok(Renewal::Adopted) => {
                // Not lost: kept alive elsewhere now, and no longer ours.
                log::debug!("a slot of {} was adopted by another process", slots.what);
                health.mark_lost("the slot was adopted by another process");
                return;
            }
            Ok(Renewal::Lost) => {
                let reason =
                    "the lease ran out or the slot was taken over before it could be refreshed";
                log::warn!("{} lost: {reason}", slots.what);
                health.mark_lost(reason);
                return;
            }
            Err(e) => {
                let verdict = keep.failed(&e);
                log::warn!("refreshing {} failed ({}): {e}", slots.what, keep.tally());
                if let Verdict::Exhausted(reason) = verdict {
                    health.mark_lost(reason);
                    return;
                }
            }
        }
        let next = if taken_up {
            on_the_grid(Instant::now() + keep.next_try(None), lease)
        } else {
            Instant::now() + first_refresh_retry(lease)
        };
        tokio::time::sleep_until(next.into()).await;
    }
}

/// When a refresh due at `due` is sent: at the last point at or before it
/// of a grid a quarter of the refresh period apart, shared by the whole
/// process. Locks taken moments apart then fall due at the same instant,
/// and their refreshes go out in one pipeline (see `refresh_batch`); once
/// on the grid, a hold stays on it. A refresh comes at most a quarter
/// period early, never late.
fn on_the_grid(due: Instant, lease: &Lease) -> Instant {
    static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);
    let step = (lease.refresh_every / 4).as_nanos();
    let origin = *ORIGIN;
    if step == 0 || due <= origin {
        return due;
    }
    let since = (due - origin).as_nanos();
    let on_grid = u64::try_from(since - since % step).unwrap_or(u64::MAX);
    origin + Duration::from_nanos(on_grid)
}

/// The pause between tries of a handed-over grant's first refresh: every
/// one of `max_refresh_fails` tries fits in the handoff window.
fn first_refresh_retry(lease: &Lease) -> Duration {
    WAITER_LEASE / (lease.max_refresh_fails + 1)
}

impl crate::holds::Held for Hold {
    fn health(&self) -> &Health {
        &self.health
    }
}
