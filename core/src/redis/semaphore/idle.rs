//! Waiting until no slot of a name is held (Go's `WaitGroup.Wait`): the
//! waiter watches the name like a queued acquirer, but takes nothing.

use std::time::Instant;

use super::super::caller::Caller;
use super::super::scripts::{prepare, SCRIPTS};
use super::super::server::COMMAND_TIMEOUT;
use super::super::slots::WAITER_LEASE;
use super::{Semaphore, RECHECK};
use crate::error::{Error, Result};
use crate::identity::random_hex;
use crate::wait::{Deadline, Interrupt};

impl Semaphore {
    /// Waits until `deadline` until no slot is held (Go's WaitGroup.Wait).
    /// Woken by the release of the last slot; re-checks every 500 ms for
    /// holders whose lease ran out. Ok(false) when the deadline passed.
    pub(crate) fn wait_idle(&self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<bool> {
        if deadline.check()?.spent() {
            return Ok(false);
        }
        let caller = Caller::new(deadline.at(), interrupted);
        let watcher = format!("watch-{}", random_hex(12));
        let waited = match self.watch_until_idle(&caller, &watcher) {
            // The deadline came while a request was unanswered.
            Err(Error::Timeout { .. }) => Ok(false),
            waited => waited,
        };
        if !matches!(waited, Ok(true)) {
            // A watch cut short and delivered late only watches again, for
            // a waiter lease: no tombstone needed.
            let cancelled = self.slots.give_up(&watcher, false);
            if let (Ok(false), Err(e)) = (&waited, cancelled) {
                return Err(e);
            }
        }
        waited
    }

    fn watch_until_idle(&self, caller: &Caller, watcher: &str) -> Result<bool> {
        let s = &self.slots;
        loop {
            let idle: i64 = s.route.run_for(caller, "wait", COMMAND_TIMEOUT, |conn| {
                prepare(&SCRIPTS.watch, &s.keys, s.shape.limit(), conn.fence_base())
                    .arg(watcher)
                    .arg(WAITER_LEASE.as_millis() as u64)
                    .invoke(conn)
            })?;
            if idle == 1 {
                return Ok(true);
            }
            if caller.is_late() {
                return Ok(false);
            }
            let mut listen_until = Instant::now() + RECHECK;
            if let Some(at) = caller.give_up_at() {
                listen_until = listen_until.min(at);
            }
            if self.listen(caller, watcher, listen_until)?.is_some() {
                return Ok(true);
            }
        }
    }
}
