//! The counting semaphore every Redis primitive is built on (a lock is the
//! limit-1 case). Admission, expiry and handoff are one Lua script each, so
//! the limit holds whatever the clients' clocks say; this module is the
//! client side: queueing, listening for a handoff, giving up cleanly, and
//! refreshing held slots in the background.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::failure::OnSignal;
use super::keys::Keys;
use super::route::Route;
use super::scripts::{prepare, SCRIPTS};
use super::server::COMMAND_TIMEOUT;
use super::session::{Binding, Member, Membership};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::identity::random_hex;
use crate::lease::Lease;
use crate::limits;
use crate::runtime;

/// The refresher id of the process that took a slot (see `refresh.lua`);
/// a process that adopts a slot refreshes it under an id of its own.
const TAKER: &str = "";
/// A queued waiter stays eligible this long after its last renewal; a
/// crashed waiter stops being handed slots after at most this much.
const WAITER_LEASE: Duration = Duration::from_secs(2);
/// How often a waiter renews its place, and re-checks for holders whose
/// lease ran out (they free a slot without anyone releasing it).
const RECHECK: Duration = Duration::from_millis(500);
/// Longest single blocking read; bounds how late an interrupt is noticed.
const LISTEN_SLICE: Duration = Duration::from_millis(50);

#[derive(Clone)]
pub(crate) struct Semaphore {
    shared: Arc<Shared>,
}

/// What a name is used as. Clients must agree while anyone holds or waits
/// for it: the server records it with the first holder or waiter (`shape`
/// in the prelude) and refuses the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A lock, an election, an exclusive task: one holder at a time.
    Lock,
    /// A WaitGroup with this many slots.
    WaitGroup(u32),
}

impl Shape {
    fn limit(self) -> u32 {
        match self {
            Shape::Lock => 1,
            Shape::WaitGroup(limit) => limit,
        }
    }

    /// As the scripts record it: 1 for a lock, 2 for a WaitGroup.
    fn kind(self) -> u8 {
        match self {
            Shape::Lock => 1,
            Shape::WaitGroup(_) => 2,
        }
    }

    fn recorded(kind: i64, limit: i64) -> Shape {
        match kind {
            1 => Shape::Lock,
            _ => Shape::WaitGroup(u32::try_from(limit).unwrap_or(u32::MAX)),
        }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shape::Lock => write!(f, "a lock"),
            Shape::WaitGroup(limit) => write!(f, "a WaitGroup with limit {limit}"),
        }
    }
}

struct Shared {
    route: Route,
    keys: Keys,
    shape: Shape,
    lease: Lease,
    /// "lock \"deploy\"", for messages.
    what: String,
    /// The session whose lease the grants share, if any.
    binding: Option<Binding>,
}

/// One granted slot. Dropping it stops keeping it alive; the slot itself
/// is given back by [`Semaphore::release`] or runs out by TTL.
pub(crate) struct Hold {
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) health: Arc<Health>,
    _keeper: Keeper,
}

/// What keeps a grant alive: its own refresher, or the session it lives
/// under (whose renewal refreshes it and whose health is its health).
enum Keeper {
    Refresher(JoinHandle<()>),
    Session { _membership: Membership },
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
    shared: Arc<Shared>,
    token: String,
}

impl Member for SessionGrant {
    fn refresh(&self) -> Pin<Box<dyn Future<Output = Result<bool>> + Send + '_>> {
        Box::pin(async move {
            Ok(refresh_once(&self.shared, &self.token, TAKER).await? == Renewal::Extended)
        })
    }

    fn release(&self) -> Result<bool> {
        Semaphore {
            shared: self.shared.clone(),
        }
        .release_token(&self.token)
    }
}

/// What [`Semaphore::holder`] saw, in one atomic read.
pub(crate) struct HolderState {
    pub(crate) held: bool,
    /// The holder's value; when nobody holds the name, the value a
    /// "release" session left behind. None when empty.
    pub(crate) value: Option<String>,
    pub(crate) fence: u64,
    /// Id of the last recorded election term ("0-0" if none).
    pub(crate) last_term: String,
}

impl Hold {
    pub(crate) fn check_health(&self, what: &str) -> Result<()> {
        self.health.check(what)
    }
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
    Granted(Hold),
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
            shared: Arc::new(Shared {
                route,
                keys,
                shape,
                lease,
                what,
                binding,
            }),
        }
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.shared.keys
    }

    pub(crate) fn route(&self) -> &Route {
        &self.shared.route
    }

    pub(crate) fn what(&self) -> &str {
        &self.shared.what
    }

    /// Waits up to `timeout` (None: forever, zero: one attempt) for a slot
    /// for `token`. `interrupted` is polled at least every 50 ms while
    /// waiting; when it answers true the wait is abandoned and nothing is
    /// left held or queued. Ok(None) means the timeout ran out.
    /// `value` is stored with a grant under a session ("" for none).
    pub(crate) fn acquire(
        &self,
        token: &str,
        value: &str,
        timeout: Option<Duration>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Hold>> {
        let meta = match &self.shared.binding {
            Some(binding) => binding.meta(value)?,
            None => String::new(),
        };
        let give_up_at = limits::deadline(Instant::now(), limits::wait(timeout)?);
        if timeout == Some(Duration::ZERO) {
            return match self.attempt(token, &meta, Duration::ZERO) {
                Ok(Attempt::Granted(hold)) => Ok(Some(hold)),
                Ok(Attempt::Queued { .. }) => Ok(None),
                Err(e) => {
                    // The reply may be what was lost: the script may have
                    // granted this request's token, which no later acquire
                    // presents again. Best effort, like a wait's give-up.
                    let _ = self.cancel(token);
                    Err(e)
                }
            };
        }
        let waited = self.wait_in_queue(token, &meta, give_up_at, interrupted);
        if !matches!(waited, Ok(Some(_))) {
            // Leave the queue, and give back a slot handed over meanwhile.
            let cancelled = self.cancel(token);
            if let (Ok(None), Err(e)) = (&waited, cancelled) {
                return Err(e);
            }
        }
        waited
    }

    fn wait_in_queue(
        &self,
        token: &str,
        meta: &str,
        give_up_at: Option<Instant>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<Hold>> {
        loop {
            self.check_session()?;
            let (clock, earliest_expiry) = match self.attempt(token, meta, WAITER_LEASE)? {
                Attempt::Granted(hold) => return Ok(Some(hold)),
                Attempt::Queued {
                    clock,
                    earliest_expiry,
                } => (clock, earliest_expiry),
            };
            // The server's earliest expiry may be anything; RECHECK bounds it.
            let mut listen_until = limits::from_now(
                RECHECK.min(
                    earliest_expiry
                        .left()
                        .saturating_add(Duration::from_millis(1)),
                ),
            );
            if let Some(at) = give_up_at {
                listen_until = listen_until.min(at);
            }
            if let Some(message) = self.listen(token, listen_until, interrupted)? {
                return self.handed_over(token, clock, &message).map(Some);
            }
            if give_up_at.is_some_and(|at| Instant::now() >= at) {
                return Ok(None);
            }
        }
    }

    fn attempt(&self, token: &str, meta: &str, waiter_lease: Duration) -> Result<Attempt> {
        let s = &self.shared;
        let sent = Stamp::now();
        let reply: Vec<i64> = s.route.run("acquire", COMMAND_TIMEOUT, |conn| {
            prepare(&SCRIPTS.acquire, &s.keys, s.shape.limit())
                .arg(token)
                .arg(s.lease.ttl_ms())
                .arg(waiter_lease.as_millis() as u64)
                .arg(WAITER_LEASE.as_millis() as u64)
                .arg(meta)
                .arg(s.shape.kind())
                .invoke(conn)
        })?;
        let [granted, fence, deadline_ms, now_ms] = reply[..] else {
            return Err(self.protocol_error("acquire"));
        };
        if granted == -1 {
            return Err(self.shape_mismatch(fence, deadline_ms));
        }
        let clock = ClockPair {
            sent,
            server_ms: now_ms,
        };
        Ok(if granted == 1 {
            Attempt::Granted(self.hold(
                token,
                fence as u64,
                clock.local(deadline_ms),
                false,
                TAKER,
            )?)
        } else {
            Attempt::Queued {
                clock,
                earliest_expiry: clock.local(deadline_ms),
            }
        })
    }

    /// Blocks on the wake-up list of `token` until a message arrives,
    /// `until` passes, or `interrupted` fires.
    fn listen(
        &self,
        token: &str,
        until: Instant,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Option<String>> {
        let wake_key = format!("{}{token}", self.shared.keys.wake_prefix);
        loop {
            if interrupted() {
                return Err(Error::Interrupted(self.shared.what.clone()));
            }
            self.check_session()?;
            let left = until.saturating_duration_since(Instant::now());
            if left < Duration::from_millis(1) {
                return Ok(None);
            }
            let slice = left.min(LISTEN_SLICE);
            // A signal ends the slice early (Ok(None)): back to checking
            // `interrupted`. A wake-up lost with the dropped connection is
            // still in the grants hash, where the next attempt claims it.
            let message: Option<Option<(String, String)>> = self.shared.route.run_or_signal(
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

    /// A slot handed over while `token` was queued: "<fence> <deadline ms>".
    fn handed_over(&self, token: &str, clock: ClockPair, message: &str) -> Result<Hold> {
        let (fence, deadline_ms) = message
            .split_once(' ')
            .and_then(|(f, d)| Some((f.parse::<u64>().ok()?, d.parse::<i64>().ok()?)))
            .ok_or_else(|| self.protocol_error("wait"))?;
        // It lasts only the handoff window until refreshed, which the
        // refresher does at once.
        self.hold(token, fence, clock.local(deadline_ms), true, TAKER)
    }

    /// Ok unless the wait runs under a session that was destroyed or lost
    /// meanwhile (a flag read: cheap enough for every listening slice).
    fn check_session(&self) -> Result<()> {
        match &self.shared.binding {
            Some(binding) => binding.check_live(),
            None => Ok(()),
        }
    }

    fn cancel(&self, token: &str) -> Result<()> {
        let s = &self.shared;
        s.route.run("cancel", COMMAND_TIMEOUT, |conn| {
            prepare(&SCRIPTS.cancel, &s.keys, s.shape.limit())
                .arg(token)
                .invoke::<i64>(conn)
        })?;
        Ok(())
    }

    /// Takes over keeping `token`'s slot alive from whichever process took
    /// (or last adopted) it: from now on only this process's refresher
    /// extends the lease, renewed at once. Ok(None) when the slot is gone.
    pub(crate) fn adopt(&self, token: &str) -> Result<Option<Hold>> {
        let s = &self.shared;
        let refresher = random_hex(16);
        let sent = Stamp::now();
        let reply: Vec<i64> = s.route.run("adopt", COMMAND_TIMEOUT, |conn| {
            prepare(&SCRIPTS.adopt, &s.keys, s.shape.limit())
                .arg(token)
                .arg(s.lease.ttl_ms())
                .arg(&refresher)
                .invoke(conn)
        })?;
        let [adopted, fence, deadline_ms, now_ms] = reply[..] else {
            return Err(self.protocol_error("adopt"));
        };
        if adopted == -1 {
            return Err(self.shape_mismatch(fence, deadline_ms));
        }
        if adopted != 1 {
            return Ok(None);
        }
        let clock = ClockPair {
            sent,
            server_ms: now_ms,
        };
        let valid_until = clock.local(deadline_ms);
        self.hold(token, fence as u64, valid_until, false, &refresher)
            .map(Some)
    }

    /// Gives the slot back. Ok(false) when it had already been lost
    /// (expired or taken over): whatever it protected may have been touched
    /// by someone else meanwhile.
    pub(crate) fn release(&self, hold: Hold) -> Result<bool> {
        let (token, was_live) = (hold.token.clone(), hold.health.is_healthy());
        drop(hold);
        self.release_as(&token, was_live)
    }

    /// Gives back the slot of `token`, held by this process or any other.
    pub(crate) fn release_token(&self, token: &str) -> Result<bool> {
        self.release_as(token, true)
    }

    /// Releases `token`. Its answer cannot simply be repeated: a release cut
    /// short by a signal may have taken effect, and a second one would then
    /// report the slot as lost. So the server is asked whether it still has
    /// the slot; if not, this release freed it when it `was_live` before.
    fn release_as(&self, token: &str, was_live: bool) -> Result<bool> {
        let s = &self.shared;
        loop {
            let released =
                s.route
                    .run_or_signal("release", COMMAND_TIMEOUT, OnSignal::Report, |conn| {
                        prepare(&SCRIPTS.release, &s.keys, s.shape.limit())
                            .arg(token)
                            .invoke::<i64>(conn)
                    })?;
            match released {
                Some(released) => return Ok(released == 1),
                None if !self.inspect(Some(token))?.1 => return Ok(was_live),
                None => continue,
            }
        }
    }

    /// Waits up to `timeout` until no slot is held (Go's WaitGroup.Wait).
    /// Woken by the release of the last slot; re-checks every 500 ms for
    /// holders whose lease ran out. Ok(false) when the timeout ran out.
    pub(crate) fn wait_idle(
        &self,
        timeout: Option<Duration>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let give_up_at = limits::deadline(Instant::now(), limits::wait(timeout)?);
        let watcher = format!("watch-{}", random_hex(12));
        let waited = self.watch_until_idle(&watcher, give_up_at, interrupted);
        if !matches!(waited, Ok(true)) {
            let cancelled = self.cancel(&watcher);
            if let (Ok(false), Err(e)) = (&waited, cancelled) {
                return Err(e);
            }
        }
        waited
    }

    fn watch_until_idle(
        &self,
        watcher: &str,
        give_up_at: Option<Instant>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let s = &self.shared;
        loop {
            let idle: i64 = s.route.run("wait", COMMAND_TIMEOUT, |conn| {
                prepare(&SCRIPTS.watch, &s.keys, s.shape.limit())
                    .arg(watcher)
                    .arg(WAITER_LEASE.as_millis() as u64)
                    .invoke(conn)
            })?;
            if idle == 1 {
                return Ok(true);
            }
            let mut listen_until = Instant::now() + RECHECK;
            if let Some(at) = give_up_at {
                if Instant::now() >= at {
                    return Ok(false);
                }
                listen_until = listen_until.min(at);
            }
            if self.listen(watcher, listen_until, interrupted)?.is_some() {
                return Ok(true);
            }
        }
    }

    /// Live holders, and whether `token` (if given) is one of them.
    pub(crate) fn inspect(&self, token: Option<&str>) -> Result<(u32, bool)> {
        let s = &self.shared;
        let reply: Vec<i64> = s.route.run("inspect", COMMAND_TIMEOUT, |conn| {
            prepare(&SCRIPTS.inspect, &s.keys, s.shape.limit())
                .arg(token.unwrap_or(""))
                .invoke(conn)
        })?;
        match reply[..] {
            [count, mine] => Ok((count as u32, mine == 1)),
            _ => Err(self.protocol_error("inspect")),
        }
    }

    /// Who holds the name now (and the last election term recorded).
    pub(crate) fn holder(&self) -> Result<HolderState> {
        let s = &self.shared;
        let (held, value, fence, last_term): (i64, String, u64, String) =
            s.route.run("holder", COMMAND_TIMEOUT, |conn| {
                prepare(&SCRIPTS.holder, &s.keys, s.shape.limit()).invoke(conn)
            })?;
        Ok(HolderState {
            held: held == 1,
            value: (!value.is_empty()).then_some(value),
            fence,
            last_term,
        })
    }

    /// A granted slot, kept alive from now on by this process's refresher
    /// `refresher` (or by the session it was taken under).
    fn hold(
        &self,
        token: &str,
        fence: u64,
        valid_until: Stamp,
        refresh_now: bool,
        refresher: &str,
    ) -> Result<Hold> {
        let Some(binding) = &self.shared.binding else {
            let health = Arc::new(Health::new(valid_until));
            let refresher = runtime::spawn(refresh_loop(
                self.shared.clone(),
                token.to_owned(),
                refresher.to_owned(),
                health.clone(),
                refresh_now,
            ));
            return Ok(Hold {
                token: token.to_owned(),
                fence,
                health,
                _keeper: Keeper::Refresher(refresher),
            });
        };
        if refresh_now {
            // A handed-over grant lasts only the handoff window; the
            // session's next renewal may come too late for it.
            let s = &self.shared;
            let mut failures = 0;
            let renewed: Vec<i64> = loop {
                // No try can succeed after the handoff window: none may
                // outlast it.
                let window = valid_until.left().max(Duration::from_millis(100));
                let outcome = s.route.run("refresh", window, |conn| {
                    prepare(&SCRIPTS.refresh, &s.keys, s.shape.limit())
                        .arg(token)
                        .arg(s.lease.ttl_ms())
                        .arg(refresher)
                        .invoke(conn)
                });
                match outcome {
                    Err(e) => {
                        failures += 1;
                        if failures >= s.lease.max_refresh_fails || valid_until.has_passed() {
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
        }
        if let Err(lost) = binding.confirm() {
            // Given back as a clean release: no lock_delay for a grant its
            // session never used.
            self.release_as(token, true)?;
            return Err(lost);
        }
        let member = Arc::new(SessionGrant {
            shared: self.shared.clone(),
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

    /// The name is recorded as `kind` with `limit`, not what this client is.
    fn shape_mismatch(&self, kind: i64, limit: i64) -> Error {
        let s = &self.shared;
        Error::config(format!(
            "{} is used as {} by other clients; this one asks for {}",
            s.what,
            Shape::recorded(kind, limit),
            s.shape
        ))
    }

    fn protocol_error(&self, operation: &str) -> Error {
        Error::backend(
            &self.shared.route.server().name,
            operation,
            "unexpected reply from the script",
        )
    }
}

/// Keeps one slot alive until aborted. A refresh that finds the slot gone
/// marks it lost at once; transient failures only after
/// `max_refresh_fails` in a row.
async fn refresh_loop(
    shared: Arc<Shared>,
    token: String,
    refresher: String,
    health: Arc<Health>,
    mut due_now: bool,
) {
    let lease = &shared.lease;
    let mut failures = 0;
    // A handed-over grant lasts only the handoff window until its first
    // refresh: retries of that one come quickly enough to fit them all in.
    let mut taken_up = !due_now;
    loop {
        if !due_now {
            let pause = if taken_up {
                lease.refresh_every
            } else {
                first_refresh_retry(lease)
            };
            tokio::time::sleep(pause).await;
        }
        due_now = false;
        let sent = Stamp::now();
        let outcome = refresh_once(&shared, &token, &refresher).await;
        match outcome {
            Ok(Renewal::Extended) => {
                taken_up = true;
                failures = 0;
                health.extend(sent + lease.ttl);
            }
            Ok(Renewal::Adopted) => {
                // Not lost: kept alive elsewhere now, and no longer ours.
                log::debug!("a slot of {} was adopted by another process", shared.what);
                health.mark_lost("the slot was adopted by another process");
                return;
            }
            Ok(Renewal::Lost) => {
                let reason =
                    "the lease ran out or the slot was taken over before it could be refreshed";
                log::warn!("{} lost: {reason}", shared.what);
                health.mark_lost(reason);
                return;
            }
            Err(e) => {
                failures += 1;
                log::warn!(
                    "refreshing {} failed ({failures}/{}): {e}",
                    shared.what,
                    lease.max_refresh_fails
                );
                if failures >= lease.max_refresh_fails {
                    health.mark_lost(format!(
                        "{failures} refreshes in a row failed, the last with: {e}"
                    ));
                    return;
                }
            }
        }
    }
}

/// The pause between tries of a handed-over grant's first refresh: every
/// one of `max_refresh_fails` tries fits in the handoff window.
fn first_refresh_retry(lease: &Lease) -> Duration {
    WAITER_LEASE / (lease.max_refresh_fails + 1)
}

/// What one refresh found.
#[derive(Debug, PartialEq, Eq)]
enum Renewal {
    Extended,
    /// Expired or freed: whatever the slot protected may be touched by others.
    Lost,
    /// Another process adopted the slot; its refresher keeps it alive.
    Adopted,
}

/// One refresh of `token`'s lease by the shared TTL, by `refresher`. It
/// follows the slot wherever the Cluster moved it; a failed connection is
/// dropped so the next try reconnects.
async fn refresh_once(shared: &Shared, token: &str, refresher: &str) -> Result<Renewal> {
    let renewed: Vec<i64> = shared
        .route
        .in_background(
            "refresh",
            shared.lease.background_timeout(),
            |mut conn| async move {
                prepare(&SCRIPTS.refresh, &shared.keys, shared.shape.limit())
                    .arg(token)
                    .arg(shared.lease.ttl_ms())
                    .arg(refresher)
                    .invoke_async(&mut conn)
                    .await
            },
        )
        .await?;
    Ok(match renewed.first() {
        Some(1) => Renewal::Extended,
        Some(2) => Renewal::Adopted,
        _ => Renewal::Lost,
    })
}
