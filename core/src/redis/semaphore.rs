//! The counting semaphore every Redis primitive is built on (a lock is the
//! limit-1 case). Admission, expiry and handoff are one Lua script each, so
//! the limit holds whatever the clients' clocks say; this module is the
//! client side of taking and giving back a slot: queueing, listening for a
//! handoff, giving up cleanly. What keeps a granted slot alive is
//! `hold.rs`'s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::ScriptInvocation;

use super::caller::Caller;
use super::failure::OnSignal;
use super::hold::{Hold, TAKER};
use super::keys::Keys;
use super::route::Route;
use super::scripts::{prepare, SCRIPTS};
use super::server::COMMAND_TIMEOUT;
use super::session::Binding;
use super::slots::{HolderState, Shape, Slots, WAITER_LEASE};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::identity::random_hex;
use crate::lease::Lease;
use crate::limits;
use crate::runtime;
use crate::wait::{Deadline, Interrupt};

mod idle;
mod in_task;

/// How often a waiter renews its place, and re-checks for holders whose
/// lease ran out (they free a slot without anyone releasing it).
const RECHECK: Duration = Duration::from_millis(500);
/// Longest single blocking read; bounds how late an interrupt is noticed.
const LISTEN_SLICE: Duration = Duration::from_millis(50);

#[derive(Clone)]
pub(crate) struct Semaphore {
    slots: Arc<Slots>,
}

/// A server timestamp and the local instant just before the request that
/// read it: maps server deadlines to local ones without trusting clocks
/// to agree, only to run at the same rate for a few seconds.
#[derive(Clone, Copy)]
struct ClockPair {
    sent: Stamp,
    server_ms: i64,
}

impl ClockPair {
    fn local(&self, server_ms: i64) -> Stamp {
        let ahead = Duration::from_millis((server_ms - self.server_ms).max(0) as u64);
        self.sent + ahead
    }
}

enum Attempt {
    /// Granted: the fence, and until when the grant surely lasts.
    Granted(u64, Stamp),
    Queued {
        clock: ClockPair,
        earliest_expiry: Stamp,
    },
}

impl Semaphore {
    pub(crate) fn new(
        route: Route,
        keys: Keys,
        shape: Shape,
        lease: Lease,
        what: String,
        binding: Option<Binding>,
    ) -> Self {
        Semaphore {
            slots: Arc::new(Slots {
                route,
                keys,
                shape,
                lease,
                what,
                binding,
                leaving: Default::default(),
            }),
        }
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.slots.keys
    }

    pub(crate) fn route(&self) -> &Route {
        &self.slots.route
    }

    pub(crate) fn what(&self) -> &str {
        &self.slots.what
    }

    /// Waits until `deadline` (a zero timeout: one attempt) for a slot
    /// for `token`. `interrupted` is asked at least every 50 ms while
    /// waiting; when it answers true the wait is abandoned and nothing is
    /// left held or queued. Ok(None) means the deadline passed.
    /// `value` is stored with a grant under a session ("" for none).
    pub(crate) fn acquire(
        &self,
        token: &str,
        value: &str,
        deadline: Deadline,
        interrupted: Interrupt<'_>,
    ) -> Result<Option<Hold>> {
        let meta = self.meta(value)?;
        if deadline.check()?.spent() {
            return Ok(None);
        }
        if deadline.is_one_attempt() {
            // One attempt, which no deadline cuts short.
            let caller = Caller::new(None, interrupted);
            let attempt = self.attempt(&caller, token, &meta, Duration::ZERO);
            return match attempt.and_then(|a| self.keep_granted(token, a)) {
                Ok(hold) => Ok(hold),
                Err(e) => {
                    // The reply may be what was lost: the script may have
                    // granted this request's token, which no later acquire
                    // presents again. Best effort, like a wait's give-up.
                    let _ = self.slots.give_up(token, true);
                    Err(e)
                }
            };
        }
        let caller = Caller::new(deadline.at(), interrupted);
        let mut unanswered = false;
        let waited = match self.wait_in_queue(&caller, token, &meta, &mut unanswered) {
            // The deadline came while a request was unanswered.
            Err(Error::Timeout { .. }) => Ok(None),
            waited => waited,
        };
        if !matches!(waited, Ok(Some(_))) {
            // Leave the queue, and give back a slot handed over meanwhile.
            let cancelled = self.slots.give_up(token, unanswered);
            if let (Ok(None), Err(e)) = (&waited, cancelled) {
                return Err(e);
            }
        }
        waited
    }

    /// `unanswered` turns true when an attempt goes unanswered (no answer
    /// by the deadline, a broken connection): the network may still
    /// deliver it. An interrupted one reached the server long before the
    /// give-up that follows it does, on any network that answers at all.
    fn wait_in_queue(
        &self,
        caller: &Caller,
        token: &str,
        meta: &str,
        unanswered: &mut bool,
    ) -> Result<Option<Hold>> {
        loop {
            self.check_session()?;
            let attempt = self.attempt(caller, token, meta, WAITER_LEASE);
            *unanswered = attempt.as_ref().is_err_and(Error::went_unanswered);
            let (clock, earliest_expiry) = match attempt? {
                Attempt::Granted(fence, valid_until) => {
                    return Hold::keep(&self.slots, token, fence, valid_until, false, TAKER)
                        .map(Some);
                }
                Attempt::Queued {
                    clock,
                    earliest_expiry,
                } => (clock, earliest_expiry),
            };
            let listen_until = listen_until(earliest_expiry, caller.give_up_at());
            if let Some(message) = self.listen(caller, token, listen_until)? {
                let (fence, valid_until) = self.handed_over(clock, &message)?;
                // It lasts only the handoff window until refreshed, which
                // the refresher does at once.
                return Hold::keep(&self.slots, token, fence, valid_until, true, TAKER).map(Some);
            }
            if caller.is_late() {
                return Ok(None);
            }
        }
    }

    fn attempt(
        &self,
        caller: &Caller,
        token: &str,
        meta: &str,
        waiter_lease: Duration,
    ) -> Result<Attempt> {
        let sent = Stamp::now();
        let reply: Vec<i64> =
            self.slots
                .route
                .run_for(caller, "acquire", COMMAND_TIMEOUT, |conn| {
                    self.acquire_script(conn.fence_base(), token, meta, waiter_lease)
                        .invoke(conn)
                })?;
        self.answered(sent, &reply)
    }

    /// The acquire script for `token` on the node whose fence base is
    /// `fence_base`; `waiter_lease` zero: one attempt, never queued.
    fn acquire_script(
        &self,
        fence_base: u64,
        token: &str,
        meta: &str,
        waiter_lease: Duration,
    ) -> ScriptInvocation<'static> {
        let s = &self.slots;
        let mut invocation = prepare(&SCRIPTS.acquire, &s.keys, s.shape.limit(), fence_base);
        invocation
            .arg(token)
            .arg(s.lease.ttl_ms())
            .arg(waiter_lease.as_millis() as u64)
            .arg(WAITER_LEASE.as_millis() as u64)
            .arg(meta)
            .arg(s.shape.kind());
        invocation
    }

    /// What the acquire script's `reply` to a request sent at `sent` says.
    fn answered(&self, sent: Stamp, reply: &[i64]) -> Result<Attempt> {
        let [granted, fence, deadline_ms, now_ms] = reply[..] else {
            return Err(self.slots.protocol_error("acquire"));
        };
        if granted == -1 {
            return Err(self.slots.shape_mismatch(fence, deadline_ms));
        }
        let clock = ClockPair {
            sent,
            server_ms: now_ms,
        };
        Ok(if granted == 1 {
            Attempt::Granted(fence as u64, clock.local(deadline_ms))
        } else {
            Attempt::Queued {
                clock,
                earliest_expiry: clock.local(deadline_ms),
            }
        })
    }

    /// The hold of a one-attempt `attempt`, if it was granted.
    fn keep_granted(&self, token: &str, attempt: Attempt) -> Result<Option<Hold>> {
        match attempt {
            Attempt::Granted(fence, valid_until) => {
                Hold::keep(&self.slots, token, fence, valid_until, false, TAKER).map(Some)
            }
            Attempt::Queued { .. } => Ok(None),
        }
    }

    /// Blocks on the wake-up list of `token` until a message arrives,
    /// `until` passes, or the caller is interrupted.
    fn listen(&self, caller: &Caller, token: &str, until: Instant) -> Result<Option<String>> {
        let wake_key = self.slots.keys.wake(token);
        loop {
            if caller.interrupted() {
                return Err(Error::Interrupted(self.slots.what.clone()));
            }
            self.check_session()?;
            let left = until.saturating_duration_since(Instant::now());
            if left < Duration::from_millis(1) {
                return Ok(None);
            }
            let slice = left.min(LISTEN_SLICE);
            // A signal ends the slice early (Ok(None)): back to checking
            // the interrupt. A wake-up lost with the dropped connection is
            // still in the grants hash, where the next attempt claims it.
            let message: Option<Option<(String, String)>> = self.slots.route.run_or_signal(
                caller,
                "wait",
                slice + COMMAND_TIMEOUT,
                OnSignal::Report,
                |conn| {
                    redis::cmd("BLPOP")
                        .arg(&wake_key)
                        .arg(format!("{:.3}", slice.as_secs_f64()))
                        .query(conn)
                },
            )?;
            if let Some(Some((_, message))) = message {
                return Ok(Some(message));
            }
        }
    }

    /// A slot handed over while queued, from its wake-up message
    /// "<fence> <deadline ms>": its fence, and until when it surely lasts.
    fn handed_over(&self, clock: ClockPair, message: &str) -> Result<(u64, Stamp)> {
        let (fence, deadline_ms) = message
            .split_once(' ')
            .and_then(|(f, d)| Some((f.parse::<u64>().ok()?, d.parse::<i64>().ok()?)))
            .ok_or_else(|| self.slots.protocol_error("wait"))?;
        Ok((fence, clock.local(deadline_ms)))
    }

    /// What a grant under a session stores beside `value` ("" for none).
    fn meta(&self, value: &str) -> Result<String> {
        match &self.slots.binding {
            Some(binding) => binding.meta(value),
            None => Ok(String::new()),
        }
    }

    /// Ok unless the wait runs under a session that was destroyed or lost
    /// meanwhile (a flag read: cheap enough for every listening slice).
    fn check_session(&self) -> Result<()> {
        match &self.slots.binding {
            Some(binding) => binding.check_live(),
            None => Ok(()),
        }
    }

    /// Takes over keeping `token`'s slot alive from whichever process took
    /// (or last adopted) it: from now on only this process's refresher
    /// extends the lease, renewed at once. Ok(None) when the slot is gone.
    pub(crate) fn adopt(&self, token: &str) -> Result<Option<Hold>> {
        let refresher = random_hex(16);
        let sent = Stamp::now();
        let reply: Vec<i64> = self.slots.route.run("adopt", COMMAND_TIMEOUT, |conn| {
            self.adopt_script(conn.fence_base(), token, &refresher)
                .invoke(conn)
        })?;
        self.adopted(token, &refresher, sent, &reply)
    }

    fn adopt_script(
        &self,
        fence_base: u64,
        token: &str,
        refresher: &str,
    ) -> ScriptInvocation<'static> {
        let s = &self.slots;
        let mut invocation = prepare(&SCRIPTS.adopt, &s.keys, s.shape.limit(), fence_base);
        invocation.arg(token).arg(s.lease.ttl_ms()).arg(refresher);
        invocation
    }

    /// The hold the adopt script's `reply` gave `refresher`, if any.
    fn adopted(
        &self,
        token: &str,
        refresher: &str,
        sent: Stamp,
        reply: &[i64],
    ) -> Result<Option<Hold>> {
        let [adopted, fence, deadline_ms, now_ms] = reply[..] else {
            return Err(self.slots.protocol_error("adopt"));
        };
        if adopted == -1 {
            return Err(self.slots.shape_mismatch(fence, deadline_ms));
        }
        if adopted != 1 {
            return Ok(None);
        }
        let clock = ClockPair {
            sent,
            server_ms: now_ms,
        };
        let valid_until = clock.local(deadline_ms);
        Hold::keep(
            &self.slots,
            token,
            fence as u64,
            valid_until,
            false,
            refresher,
        )
        .map(Some)
    }

    /// Gives the slot back. Ok(false) when it had already been lost
    /// (expired or taken over): whatever it protected may have been touched
    /// by someone else meanwhile.
    pub(crate) fn release(&self, hold: Hold) -> Result<bool> {
        let (token, was_live) = (hold.token.clone(), hold.health.is_healthy());
        drop(hold);
        self.slots.release_as(&token, was_live)
    }

    /// Gives `holds` back on the runtime's blocking threads and returns at
    /// once: for a drop that must not wait on Redis (a garbage collector's
    /// finalizer). A failure is logged.
    pub(crate) fn release_in_background(&self, holds: Vec<Hold>) {
        if holds.is_empty() {
            return;
        }
        let semaphore = self.clone();
        runtime::spawn_blocking(move || {
            for hold in holds {
                if let Err(e) = semaphore.release(hold) {
                    log::warn!("releasing {} failed: {e}", semaphore.what());
                }
            }
        });
    }

    /// Gives back the slot of `token`, held by this process or any other.
    pub(crate) fn release_token(&self, token: &str) -> Result<bool> {
        self.slots.release_as(token, true)
    }

    /// Live holders, and whether `token` (if given) is one of them.
    pub(crate) fn inspect(&self, token: Option<&str>) -> Result<(u32, bool)> {
        self.slots.inspect(token)
    }

    /// Who holds the name now (and the last election term recorded).
    pub(crate) fn holder(&self, caller: &Caller) -> Result<HolderState> {
        self.slots.holder(caller)
    }
}

/// How long a queued waiter listens for its handoff before it asks again:
/// until the earliest holder's lease may have run out (any value the
/// server sent, bounded by [`RECHECK`]), or the caller gives up.
fn listen_until(earliest_expiry: Stamp, give_up_at: Option<Instant>) -> Instant {
    let until = limits::from_now(
        RECHECK.min(
            earliest_expiry
                .left()
                .saturating_add(Duration::from_millis(1)),
        ),
    );
    give_up_at.map_or(until, |at| until.min(at))
}
