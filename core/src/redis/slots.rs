//! One name's slots as a semaphore and the keepers of its grants share
//! them: where they live (route and keys), what the name is used as, how
//! long a grant lasts and the session it is bound to; and the requests on
//! one slot that take a single script call each.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Cmd, ScriptInvocation};

use super::caller::Caller;
use super::failure::OnSignal;
use super::keys::Keys;
use super::refresh_batch;
use super::route::Route;
use super::scripts::{evalsha, prepare, SCRIPTS};
use super::server::COMMAND_TIMEOUT;
use super::session::Binding;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::runtime;

/// A queued waiter stays eligible this long after its last renewal; a
/// crashed waiter stops being handed slots after at most this much. It is
/// also the handoff window: a slot handed to a waiter lasts this long
/// until its first refresh.
pub(crate) const WAITER_LEASE: Duration = Duration::from_secs(2);

/// How long a caller leaving the queue waits for the server to confirm.
const LEAVING_TIME: Duration = Duration::from_millis(100);
/// How long the server refuses an acquire that arrives after its caller
/// gave up (held up in the network): longer than such a delay lasts but in
/// rare cases, after which the late grant would block the name for one
/// ttl, as a crashed holder does.
const TOMBSTONE: Duration = Duration::from_secs(60);

/// Give-ups the server has not confirmed yet: (token, tombstone ms, when
/// asking is pointless). One background worker per name asks again.
#[derive(Default)]
pub(crate) struct Leaving {
    tokens: Vec<(String, u64, Instant)>,
    working: bool,
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
    pub(crate) fn limit(self) -> u32 {
        match self {
            Shape::Lock => 1,
            Shape::WaitGroup(limit) => limit,
        }
    }

    /// As the scripts record it: 1 for a lock, 2 for a WaitGroup.
    pub(crate) fn kind(self) -> u8 {
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

/// One name's slots as a semaphore and the keepers of its grants see them.
pub(crate) struct Slots {
    pub(crate) route: Route,
    pub(crate) keys: Keys,
    pub(crate) shape: Shape,
    pub(crate) lease: Lease,
    /// "lock \"deploy\"", for messages.
    pub(crate) what: String,
    /// The session whose lease the grants share, if any.
    pub(crate) binding: Option<Binding>,
    pub(crate) leaving: Mutex<Leaving>,
}

/// What [`Slots::holder`] saw, in one atomic read.
pub(crate) struct HolderState {
    pub(crate) held: bool,
    /// The holder's value; when nobody holds the name, the value a
    /// "release" session left behind. None when empty.
    pub(crate) value: Option<String>,
    pub(crate) fence: u64,
    /// Id of the last recorded election term ("0-0" if none).
    pub(crate) last_term: String,
}

impl From<(i64, String, u64, String)> for HolderState {
    /// The holder script's reply: held, value, fence, last term.
    fn from((held, value, fence, last_term): (i64, String, u64, String)) -> Self {
        HolderState {
            held: held == 1,
            value: (!value.is_empty()).then_some(value),
            fence,
            last_term,
        }
    }
}

/// What one refresh found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    Extended,
    /// Expired or freed: whatever the slot protected may be touched by others.
    Lost,
    /// Another process adopted the slot; its refresher keeps it alive.
    Adopted,
}

impl Renewal {
    /// What the refresh script's reply says.
    pub(crate) fn of(renewed: &[i64]) -> Renewal {
        match renewed.first() {
            Some(1) => Renewal::Extended,
            Some(2) => Renewal::Adopted,
            _ => Renewal::Lost,
        }
    }
}

impl Slots {
    /// Takes `token` out of the queue, and gives back a slot handed to it
    /// meanwhile (or granted by a request whose reply was lost). Asked for
    /// a moment on the caller's thread; if the server does not answer in
    /// that time (a silent network), asked again in the background until
    /// the token's place and any grant to it have run out on their own, so
    /// a caller who is leaving is never held up for long. `in_flight`: an
    /// acquire for `token` was cut short and may still reach the server
    /// after this; the server then keeps a tombstone for the token for a
    /// minute, which that late acquire finds instead of the name.
    pub(crate) fn give_up(self: &Arc<Self>, token: &str, in_flight: bool) -> Result<()> {
        let never = || false;
        let caller = Caller::new(Some(Instant::now() + LEAVING_TIME), &never);
        let tombstone_ms = tombstone_ms(in_flight);
        match self
            .route
            .run_for(&caller, "cancel", COMMAND_TIMEOUT, |conn| {
                self.cancel_script(conn.fence_base(), token, tombstone_ms)
                    .invoke::<i64>(conn)
            }) {
            Err(e) if e.went_unanswered() => {
                self.leave_in_background(token.to_owned(), tombstone_ms);
                Ok(())
            }
            cancelled => cancelled.map(drop),
        }
    }

    /// [`Slots::give_up`] for an async caller, on its runtime.
    pub(crate) async fn give_up_async(
        self: &Arc<Self>,
        token: &str,
        in_flight: bool,
    ) -> Result<()> {
        let tombstone_ms = tombstone_ms(in_flight);
        let give_up_at = Some(Instant::now() + LEAVING_TIME);
        let cancelled = self
            .route
            .for_task(give_up_at, "cancel", COMMAND_TIMEOUT, true, |mut link| {
                let cancel = self.cancel_script(link.fence_base(), token, tombstone_ms);
                async move { cancel.invoke_async::<i64>(&mut link).await }
            })
            .await;
        match cancelled {
            Err(e) if e.went_unanswered() => {
                self.leave_in_background(token.to_owned(), tombstone_ms);
                Ok(())
            }
            cancelled => cancelled.map(drop),
        }
    }

    /// Gives up `token` in the background, returning at once: for an async
    /// wait dropped before it ended (`in_flight`: see [`Slots::give_up`]).
    /// An exiting process waits for the first try, as long as
    /// [`Slots::give_up_async`] gives it: a waiter cancelled as its
    /// process ends (Ctrl-C in `asyncio.run`) must not stay in line, to be
    /// handed the lock, after it is gone. Later tries are not waited for.
    pub(crate) fn give_up_in_background(self: &Arc<Self>, token: String, in_flight: bool) {
        let slots = self.clone();
        runtime::spawn_awaited(async move {
            match slots.give_up_async(&token, in_flight).await {
                Err(e) if e.is_transient() => {
                    slots.leave_in_background(token, tombstone_ms(in_flight));
                }
                _ => {}
            }
        });
    }

    /// Hands a give-up to this name's one background worker, started if
    /// none is running.
    fn leave_in_background(self: &Arc<Self>, token: String, tombstone_ms: u64) {
        // By then the token's place in the queue and any grant to it have
        // run out by themselves.
        let pointless_after = Instant::now() + self.lease.ttl.max(WAITER_LEASE);
        let mut leaving = self.leaving.lock().unwrap_or_else(|e| e.into_inner());
        leaving.tokens.push((token, tombstone_ms, pointless_after));
        if !leaving.working {
            leaving.working = true;
            runtime::spawn(self.clone().keep_leaving());
        }
    }

    /// Asks again, with backoff, for every give-up the server has not
    /// confirmed, until none is left.
    async fn keep_leaving(self: Arc<Self>) {
        let mut pause = Duration::from_millis(50);
        loop {
            let pending = {
                let mut leaving = self.leaving.lock().unwrap_or_else(|e| e.into_inner());
                leaving
                    .tokens
                    .retain(|(_, _, until)| Instant::now() < *until);
                if leaving.tokens.is_empty() {
                    leaving.working = false;
                    return;
                }
                leaving.tokens.clone()
            };
            for (token, tombstone_ms, _) in pending {
                let (slots, token) = (&self, &token);
                let timeout = slots.lease.background_timeout();
                let cancelled = slots
                    .route
                    .in_background("cancel", timeout, |mut conn| async move {
                        slots
                            .cancel_script(conn.fence_base(), token, tombstone_ms)
                            .invoke_async::<i64>(&mut conn)
                            .await
                    })
                    .await;
                if !cancelled.is_err_and(|e| e.is_transient()) {
                    let mut leaving = self.leaving.lock().unwrap_or_else(|e| e.into_inner());
                    leaving.tokens.retain(|(pending, _, _)| pending != token);
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// The script call that gives up `token` on the node whose fence base
    /// is `fence_base`, leaving a tombstone of `tombstone_ms` (see
    /// [`Slots::give_up`]).
    fn cancel_script(
        &self,
        fence_base: u64,
        token: &str,
        tombstone_ms: u64,
    ) -> ScriptInvocation<'static> {
        let mut invocation = prepare(&SCRIPTS.cancel, &self.keys, self.shape.limit(), fence_base);
        invocation.arg(token).arg(tombstone_ms);
        invocation
    }

    /// Releases `token`. Its answer cannot simply be repeated: a release cut
    /// short by a signal may have taken effect, and a second one would then
    /// report the slot as lost. So the server is asked whether it still has
    /// the slot; if not, this release freed it when it `was_live` before.
    pub(crate) fn release_as(&self, token: &str, was_live: bool) -> Result<bool> {
        loop {
            let released = self.route.run_or_signal(
                &Caller::patient(),
                "release",
                COMMAND_TIMEOUT,
                OnSignal::Report,
                |conn| {
                    self.release_script(conn.fence_base(), token)
                        .invoke::<i64>(conn)
                },
            )?;
            match released {
                Some(released) => return Ok(released == 1),
                None if !self.inspect(Some(token))?.1 => return Ok(was_live),
                None => continue,
            }
        }
    }

    /// [`Slots::release_as`] for an async caller, on its runtime. A call
    /// whose connection broke is not sent again: its answer is unknown,
    /// and the error says so.
    pub(crate) async fn release_async(&self, token: &str) -> Result<bool> {
        let released: i64 = self
            .route
            .for_task(None, "release", COMMAND_TIMEOUT, false, |mut link| {
                let release = self.release_script(link.fence_base(), token);
                async move { release.invoke_async(&mut link).await }
            })
            .await?;
        Ok(released == 1)
    }

    fn release_script(&self, fence_base: u64, token: &str) -> ScriptInvocation<'static> {
        let mut invocation = prepare(&SCRIPTS.release, &self.keys, self.shape.limit(), fence_base);
        invocation.arg(token);
        invocation
    }

    /// Live holders, and whether `token` (if given) is one of them.
    pub(crate) fn inspect(&self, token: Option<&str>) -> Result<(u32, bool)> {
        let reply: Vec<i64> = self.route.run("inspect", COMMAND_TIMEOUT, |conn| {
            self.inspect_script(conn.fence_base(), token).invoke(conn)
        })?;
        self.inspected(&reply)
    }

    /// [`Slots::inspect`] for an async caller, on its runtime.
    pub(crate) async fn inspect_async(&self, token: Option<&str>) -> Result<(u32, bool)> {
        let reply: Vec<i64> = self
            .route
            .for_task(None, "inspect", COMMAND_TIMEOUT, true, |mut link| {
                let inspect = self.inspect_script(link.fence_base(), token);
                async move { inspect.invoke_async(&mut link).await }
            })
            .await?;
        self.inspected(&reply)
    }

    fn inspect_script(&self, fence_base: u64, token: Option<&str>) -> ScriptInvocation<'static> {
        let mut invocation = prepare(&SCRIPTS.inspect, &self.keys, self.shape.limit(), fence_base);
        invocation.arg(token.unwrap_or(""));
        invocation
    }

    fn inspected(&self, reply: &[i64]) -> Result<(u32, bool)> {
        match reply[..] {
            [count, mine] => Ok((count as u32, mine == 1)),
            _ => Err(self.protocol_error("inspect")),
        }
    }

    /// Who holds the name now (and the last election term recorded).
    pub(crate) fn holder(&self, caller: &Caller) -> Result<HolderState> {
        let reply: (i64, String, u64, String) =
            self.route
                .run_for(caller, "holder", COMMAND_TIMEOUT, |conn| {
                    self.holder_script(conn.fence_base()).invoke(conn)
                })?;
        Ok(HolderState::from(reply))
    }

    /// [`Slots::holder`] for an async caller who gives up at `give_up_at`.
    pub(crate) async fn holder_async(&self, give_up_at: Option<Instant>) -> Result<HolderState> {
        let reply: (i64, String, u64, String) = self
            .route
            .for_task(give_up_at, "holder", COMMAND_TIMEOUT, true, |mut link| {
                let holder = self.holder_script(link.fence_base());
                async move { holder.invoke_async(&mut link).await }
            })
            .await?;
        Ok(HolderState::from(reply))
    }

    fn holder_script(&self, fence_base: u64) -> ScriptInvocation<'static> {
        prepare(&SCRIPTS.holder, &self.keys, self.shape.limit(), fence_base)
    }

    /// One refresh sent on its own, given up after `limit`: it follows the
    /// slot wherever the Cluster moved it, and a failed connection is
    /// dropped so the next try reconnects. The script's reply (see
    /// `refresh.lua`).
    pub(crate) async fn refresh_alone(
        &self,
        token: &str,
        refresher: &str,
        limit: Duration,
    ) -> Result<Vec<i64>> {
        self.route
            .in_background("refresh", limit, |mut conn| async move {
                refresh_batch::count_exchange();
                self.refresh_script(conn.fence_base(), token, refresher)
                    .invoke_async(&mut conn)
                    .await
            })
            .await
    }

    /// The script call that extends `token`'s lease by the shared TTL on
    /// the node whose fence base is `fence_base`, by `refresher`.
    pub(crate) fn refresh_script(
        &self,
        fence_base: u64,
        token: &str,
        refresher: &str,
    ) -> ScriptInvocation<'static> {
        let mut invocation = prepare(&SCRIPTS.refresh, &self.keys, self.shape.limit(), fence_base);
        invocation
            .arg(token)
            .arg(self.lease.ttl_ms())
            .arg(refresher);
        invocation
    }

    /// [`Slots::refresh_script`] as a command for a pipeline.
    pub(crate) fn refresh_command(&self, fence_base: u64, token: &str, refresher: &str) -> Cmd {
        let mut cmd = evalsha(&SCRIPTS.refresh, &self.keys, self.shape.limit(), fence_base);
        cmd.arg(token).arg(self.lease.ttl_ms()).arg(refresher);
        cmd
    }

    /// The name is recorded as `kind` with `limit`, not what this client is.
    pub(crate) fn shape_mismatch(&self, kind: i64, limit: i64) -> Error {
        Error::config(format!(
            "{} is used as {} by other clients; this one asks for {}",
            self.what,
            Shape::recorded(kind, limit),
            self.shape
        ))
    }

    pub(crate) fn protocol_error(&self, operation: &str) -> Error {
        Error::backend(
            &self.route.server().name,
            operation,
            "unexpected reply from the script",
        )
    }
}

/// How long the server refuses a late acquire of a token given up while
/// one may still be `in_flight` (see [`Slots::give_up`]), in ms.
fn tombstone_ms(in_flight: bool) -> u64 {
    if in_flight {
        TOMBSTONE.as_millis() as u64
    } else {
        0
    }
}
