//! A granted slot and what keeps it alive: this process's refresh
//! schedule, or the session it lives under, whose renewal refreshes it and
//! whose health is its health.

use std::sync::Arc;
use std::time::Duration;

use super::keepalive::{Member, Membership};
use super::schedule::{first_refresh_retry, Kept, Scheduled};
use super::slots::Slots;
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::lease::{KeepAlive, Verdict};

/// The refresher id of the process that took a slot (see `refresh.lua`);
/// a process that adopts a slot refreshes it under an id of its own.
pub(crate) const TAKER: &str = "";

/// One granted slot. Dropping it stops keeping it alive; the slot itself
/// is given back by `Semaphore::release` or runs out by TTL.
pub(crate) struct Hold {
    /// Shared with its record in the refresh schedule.
    pub(crate) token: Arc<str>,
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
            let token: Arc<str> = token.into();
            let scheduled = Kept::start(
                slots.clone(),
                token.clone(),
                refresher,
                health.clone(),
                refresh_now,
            );
            return Ok(Hold {
                token,
                fence,
                health,
                _keeper: Keeper::Schedule {
                    _scheduled: scheduled,
                },
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
            token: token.into(),
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

/// What keeps a grant alive: this process's refresh schedule, or the
/// session it lives under (whose renewal refreshes it and whose health is
/// its health).
enum Keeper {
    Schedule { _scheduled: Scheduled },
    Session { _membership: Membership },
}

/// A grant kept alive by a session's renewal loop.
struct SessionGrant {
    slots: Arc<Slots>,
    token: String,
}

impl Member for SessionGrant {
    fn grant(&self) -> (&Slots, &str) {
        (&self.slots, &self.token)
    }

    fn release(&self) -> Result<bool> {
        self.slots.release_as(&self.token, true)
    }
}

impl crate::holds::Held for Hold {
    fn health(&self) -> &Health {
        &self.health
    }
}
