//! Waiting until no slot of a name is held (Go's `WaitGroup.Wait`): the
//! waiter watches the name like a queued acquirer, but takes nothing.

use std::time::Instant;

use redis::ScriptInvocation;

use super::super::caller::Caller;
use super::super::scripts::{prepare, SCRIPTS};
use super::super::server::COMMAND_TIMEOUT;
use super::super::slots::WAITER_LEASE;
use super::in_task::{Hearing, Leaving};
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

    /// [`Semaphore::wait_idle`] for an async caller, on its runtime;
    /// dropping the future leaves no watcher behind (it is given up in the
    /// background).
    pub(crate) async fn wait_idle_async(&self, deadline: Deadline) -> Result<bool> {
        if deadline.check()?.spent() {
            return Ok(false);
        }
        let watcher = format!("watch-{}", random_hex(12));
        // A watch still on its way only watches again, for a waiter lease:
        // no tombstone needed.
        let mut leaving = Leaving::new(&self.slots, &watcher);
        let waited = match self.watch_until_idle_async(deadline.at(), &watcher).await {
            // The deadline came while a request was unanswered.
            Err(Error::Timeout { .. }) => Ok(false),
            waited => waited,
        };
        if !matches!(waited, Ok(true)) {
            let cancelled = self.slots.give_up_async(&watcher, false).await;
            if let (Ok(false), Err(e)) = (&waited, cancelled) {
                leaving.disarm();
                return Err(e);
            }
        }
        leaving.disarm();
        waited
    }

    async fn watch_until_idle_async(
        &self,
        give_up_at: Option<Instant>,
        watcher: &str,
    ) -> Result<bool> {
        let s = &self.slots;
        let mut hearing = Hearing::NotYet;
        loop {
            let idle: i64 = s
                .route
                .for_task(give_up_at, "wait", COMMAND_TIMEOUT, true, |mut link| {
                    let watch = self.watch_script(link.fence_base(), watcher);
                    async move { watch.invoke_async(&mut link).await }
                })
                .await?;
            if idle == 1 {
                return Ok(true);
            }
            if give_up_at.is_some_and(|at| Instant::now() >= at) {
                return Ok(false);
            }
            let recheck_at = Instant::now() + RECHECK;
            let listen_until = give_up_at.map_or(recheck_at, |at| recheck_at.min(at));
            if self
                .listen_async(give_up_at, watcher, listen_until, &mut hearing)
                .await?
                .is_some()
            {
                return Ok(true);
            }
        }
    }

    fn watch_script(&self, fence_base: u64, watcher: &str) -> ScriptInvocation<'static> {
        let s = &self.slots;
        let mut invocation = prepare(&SCRIPTS.watch, &s.keys, s.shape.limit(), fence_base);
        invocation.arg(watcher).arg(WAITER_LEASE.as_millis() as u64);
        invocation
    }

    fn watch_until_idle(&self, caller: &Caller, watcher: &str) -> Result<bool> {
        let s = &self.slots;
        loop {
            let idle: i64 = s.route.run_for(caller, "wait", COMMAND_TIMEOUT, |conn| {
                self.watch_script(conn.fence_base(), watcher).invoke(conn)
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
