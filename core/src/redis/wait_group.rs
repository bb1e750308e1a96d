//! A distributed counting semaphore with Go's WaitGroup shape: `add`
//! takes one of `limit` slots and returns its token, `done(token)` frees
//! it from any process, `adopt(token)` moves its lease to the process that
//! works on it, `wait` returns once no slot is held.

use std::time::Duration;

use super::hold::Hold;
use super::keys::Keys;
use super::route::Route;
use super::semaphore::Semaphore;
use super::server::server;
use super::slots::Shape;
use crate::error::{Error, Result};
use crate::health;
use crate::holds::{Holds, Leaving};
use crate::identity::uuid4;
use crate::lease::{LeaseOptions, DEFAULT_TTL};
use crate::wait::{Deadline, InTime, Interrupt, NEVER};

/// At most `limit` holders at a time across every process, however many
/// crash: a crashed holder's slot comes free after `ttl`.
///
/// A slot is freed only by [`WaitGroup::done`], by its lease running out,
/// or by the end of the [`Slot`] guard that took it. A token handed to
/// another process stays alive from the adder's process until that process
/// calls [`WaitGroup::adopt`]; dropping the group (or exiting) never frees
/// slots taken by [`WaitGroup::add`], it only stops refreshing them: they
/// run out after `ttl` unless another process adopted them. So a worker
/// still running on a handed-off token is never joined by one slot too many.
///
/// Admission is one atomic script on the server's clock, so the limit holds
/// whatever the clients' clocks say. Waiters are served in arrival order
/// and woken by the release that frees their slot.
///
/// ```no_run
/// use std::time::Duration;
/// use lockyard::redis::WaitGroup;
///
/// let quota = WaitGroup::builder("redis://127.0.0.1:6379/0", "api-quota", 10).build()?;
/// let slot = quota.acquire(Some(Duration::from_secs(30)))?;
/// slot.check_health()?;
/// // ... call the rate-limited API ...
/// drop(slot); // done
/// quota.wait(None)?; // until every slot is free again
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct WaitGroup {
    semaphore: Semaphore,
    /// Slots this process holds, by token.
    slots: Holds<String, Held>,
}

/// A slot this process keeps alive.
struct Held {
    hold: Hold,
    /// Taken for a block ([`WaitGroup::acquire`], a binding's `with` or
    /// `synchronize`): freed when the group is dropped inside the block.
    /// Other slots may be worked on elsewhere: they are left to run out.
    in_block: bool,
}

/// Options for a [`WaitGroup`]; start with [`WaitGroup::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct WaitGroupBuilder {
    url: String,
    name: String,
    limit: u32,
    lease: LeaseOptions,
}

crate::lease::lease_setters! {
    WaitGroupBuilder;
    /// How long a slot outlives its holder's last refresh (default
    /// [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL); at most 30 days).
    ttl;
    /// Refresh period; must be below ttl / max_refresh_fails.
    refresh_interval;
    /// Consecutive transient refresh failures that make a slot unhealthy
    /// (default [`DEFAULT_MAX_REFRESH_FAILS`](crate::lease::DEFAULT_MAX_REFRESH_FAILS)).
    max_refresh_fails;
    /// How long connecting may take before Redis counts as unreachable
    /// (default [`DEFAULT_CONNECT_TIMEOUT`](crate::lease::DEFAULT_CONNECT_TIMEOUT); at most 30 days).
    connect_timeout;
}

impl WaitGroupBuilder {
    /// Validates the options; touches no server.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty name, a limit of 0, a TTL under 1 ms
    /// or over 30 days,
    /// an unparsable URL, or a refresh interval that cannot keep slots alive.
    pub fn build(self) -> Result<WaitGroup> {
        let keys = Keys::new(&self.name)?;
        if self.limit == 0 {
            return Err(Error::config("limit must be at least 1"));
        }
        let lease = self.lease.lease(DEFAULT_TTL)?;
        let route = Route::new(server(&self.url, self.lease.connect_timeout()?)?);
        let what = format!("wait group {:?}", self.name);
        Ok(WaitGroup {
            semaphore: Semaphore::new(route, keys, Shape::WaitGroup(self.limit), lease, what, None),
            slots: Holds::new(),
        })
    }
}

impl WaitGroup {
    /// Options for the group `name` with `limit` slots on the Redis server at `url`.
    pub fn builder(
        url: impl Into<String>,
        name: impl Into<String>,
        limit: u32,
    ) -> WaitGroupBuilder {
        WaitGroupBuilder {
            url: url.into(),
            name: name.into(),
            limit,
            lease: LeaseOptions::default(),
        }
    }

    /// Waits up to `timeout` (None: forever) for a slot; the returned
    /// guard frees it on drop.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out, [`Error::Config`] for a
    /// timeout over 100 years, [`Error::Backend`] if Redis cannot be
    /// reached.
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<Slot<'_>> {
        let token = self.enter(timeout, NEVER)?;
        Ok(Slot::new(self, token))
    }

    /// Takes a slot and returns its token (a UUID), to be freed with
    /// [`WaitGroup::done`] from this process or any other. This process
    /// keeps it alive until another one [adopts](WaitGroup::adopt) it;
    /// dropping the group does not free it. Waits until `deadline` (a
    /// [`Deadline`], or a timeout: None waits forever, zero tries once).
    /// `interrupted` is asked at least every 50 ms while waiting; when it
    /// answers true nothing stays held and the call returns
    /// [`Error::Interrupted`].
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes.
    pub fn add(&self, deadline: impl Into<Deadline>, interrupted: Interrupt<'_>) -> Result<String> {
        self.take(deadline.into(), interrupted, false)
    }

    /// Takes a slot for a block that ends with [`WaitGroup::leave`] (a
    /// binding's `with` or `synchronize`); like [`WaitGroup::add`], except
    /// that dropping the group inside the block frees the slot.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out.
    pub fn enter(
        &self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<String> {
        self.take(deadline.into(), interrupted, true)
    }

    fn take(
        &self,
        deadline: Deadline,
        interrupted: Interrupt<'_>,
        in_block: bool,
    ) -> Result<String> {
        let token = uuid4();
        let hold = self.semaphore.acquire(&token, "", deadline, interrupted)?;
        self.keep_slot(token, hold, deadline, in_block)
    }

    /// Keeps the slot a wait until `deadline` took for `token` (None: the
    /// deadline passed first, answered with [`Error::Timeout`]).
    fn keep_slot(
        &self,
        token: String,
        hold: Option<Hold>,
        deadline: Deadline,
        in_block: bool,
    ) -> Result<String> {
        let hold =
            hold.ok_or_else(|| deadline.ran_out(format!("a slot of {}", self.semaphore.what())))?;
        self.slots
            .get()
            .insert(token.clone(), Held { hold, in_block });
        Ok(token)
    }

    /// Frees the slot of `token`, whichever process took it. Ok(false) if
    /// that slot had already expired or been freed, or the token is not one
    /// of this group's: never an error that could cost other slots.
    pub fn done(&self, token: &str) -> Result<bool> {
        let held = self.slots.get().remove(token);
        match held {
            Some(held) => self.free(held),
            None => self.semaphore.release_token(token),
        }
    }

    /// Frees a slot this process holds, warning if it had been lost.
    fn free(&self, held: Held) -> Result<bool> {
        self.warn_if_lost(self.semaphore.release(held.hold))
    }

    fn warn_if_lost(&self, freed: Result<bool>) -> Result<bool> {
        health::warn_if_lost(
            freed,
            || format!("a slot of {}", self.semaphore.what()),
            "freed",
            "more than its limit",
        )
    }

    /// Takes over keeping the slot of `token` alive, typically in the
    /// worker process the adder handed the token to: from now on this
    /// process refreshes it (and the adder's process stops), so the slot
    /// lives as long as this process and this group do, until
    /// [`WaitGroup::done`] frees it. Ok(false) when the slot is gone (done,
    /// or its lease ran out) or another process adopted it already (a slot
    /// has one adopter). Afterwards [`WaitGroup::healthy`] and
    /// [`WaitGroup::fencing_token`] answer for it here.
    ///
    /// ```no_run
    /// # let token = String::new();
    /// use lockyard::redis::WaitGroup;
    ///
    /// let quota = WaitGroup::builder("redis://127.0.0.1:6379/0", "api-quota", 10).build()?;
    /// if quota.adopt(&token)? {
    ///     // ... the work the slot was taken for ...
    ///     quota.done(&token)?;
    /// }
    /// # Ok::<(), lockyard::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] when the name is used as a Lock or as a WaitGroup
    /// of another limit; [`Error::Backend`] if Redis cannot be reached.
    pub fn adopt(&self, token: &str) -> Result<bool> {
        let Some(hold) = self.semaphore.adopt(token)? else {
            return Ok(false);
        };
        self.adopted(token, hold);
        Ok(true)
    }

    /// Keeps an adopted slot (in a block still, if it was taken for one).
    fn adopted(&self, token: &str, hold: Hold) {
        let mut slots = self.slots.get();
        let in_block = slots.get(token).is_some_and(|held| held.in_block);
        slots.insert(token.to_owned(), Held { hold, in_block });
    }

    /// Ends a block that took the slot of `token` (a [`Slot`]'s drop, a
    /// binding's `with` or `synchronize`). Unlike [`WaitGroup::done`] it
    /// frees only a slot this process holds: in a process forked inside the
    /// block the slot is the parent's, and this does nothing (Ok(true)).
    /// Ok(false) when the slot was freed already (e.g. by `done` inside the
    /// block).
    pub fn leave(&self, token: &str) -> Result<bool> {
        match self.slots.leave(token) {
            Leaving::Held(held) => self.free(held),
            Leaving::Inherited => Ok(true),
            Leaving::NotHeld => Ok(false),
        }
    }

    /// Waits until `deadline` until no slot is held. Interruptible like
    /// [`WaitGroup::add`].
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes first.
    pub fn wait_interruptibly(
        &self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        let deadline = deadline.into();
        if self.semaphore.wait_idle(deadline, interrupted)? {
            Ok(())
        } else {
            Err(deadline.ran_out(format!("{} to have no slot held", self.semaphore.what())))
        }
    }

    /// Waits up to `timeout` (None: forever) until no slot is held;
    /// Ok(false) when the timeout ran out.
    ///
    /// # Errors
    /// [`Error::Config`] for a timeout over 100 years.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        self.wait_interruptibly(timeout, NEVER).in_time()
    }

    /// Live slots, asked of Redis.
    pub fn count(&self) -> Result<u32> {
        Ok(self.semaphore.inspect(None)?.0)
    }

    /// The fencing token of a slot this process holds.
    pub fn fencing_token(&self, token: &str) -> Option<u64> {
        self.slots.get().get(token).map(|held| held.hold.fence)
    }

    /// Whether a slot this process holds is surely still live (reads a flag).
    pub fn healthy(&self, token: &str) -> bool {
        self.slots
            .get()
            .get(token)
            .is_some_and(|held| held.hold.health.is_healthy())
    }

    /// Ok if this process holds the slot and it is healthy.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if this process does not hold it,
    /// [`Error::LockUnhealthy`] if it may be lost.
    pub fn check_health(&self, token: &str) -> Result<()> {
        let what = format!("slot {token} of {}", self.semaphore.what());
        match self.slots.get().get(token) {
            None => Err(Error::NotLocked(what)),
            Some(held) => held.hold.health.check(&what),
        }
    }
}

impl WaitGroup {
    /// The async twin of [`WaitGroup::acquire`]: waits up to `timeout` on
    /// the calling task's runtime, holding no thread. Dropping the future
    /// before it completes leaves nothing held or queued; dropping the slot
    /// frees it in the background ([`Slot::release_async`] waits for
    /// the answer instead).
    ///
    /// # Errors
    /// Those of [`WaitGroup::acquire`].
    pub async fn acquire_async(&self, timeout: Option<Duration>) -> Result<Slot<'_>> {
        let token = self.take_async(Deadline::after(timeout), true).await?;
        Ok(Slot::for_task(self, token))
    }

    /// The async twin of [`WaitGroup::add`], waiting until `deadline` (a
    /// [`Deadline`], or a timeout: None waits forever, zero tries once).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out.
    pub async fn add_async(&self, deadline: impl Into<Deadline>) -> Result<String> {
        self.take_async(deadline.into(), false).await
    }

    /// The async twin of [`WaitGroup::enter`]: a slot for a block that
    /// ends with [`WaitGroup::leave`] (or [`WaitGroup::leave_in_background`]).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out.
    pub async fn enter_async(&self, deadline: impl Into<Deadline>) -> Result<String> {
        self.take_async(deadline.into(), true).await
    }

    /// The async twin of [`WaitGroup::adopt`].
    ///
    /// # Errors
    /// Those of [`WaitGroup::adopt`].
    pub async fn adopt_async(&self, token: &str) -> Result<bool> {
        let Some(hold) = self.semaphore.adopt_async(token).await? else {
            return Ok(false);
        };
        self.adopted(token, hold);
        Ok(true)
    }

    /// The async twin of [`WaitGroup::leave`].
    pub async fn leave_async(&self, token: &str) -> Result<bool> {
        match self.slots.leave(token) {
            Leaving::Held(held) => self.free_async(held).await,
            Leaving::Inherited => Ok(true),
            Leaving::NotHeld => Ok(false),
        }
    }

    async fn take_async(&self, deadline: Deadline, in_block: bool) -> Result<String> {
        let token = uuid4();
        let hold = self.semaphore.acquire_async(&token, "", deadline).await?;
        self.keep_slot(token, hold, deadline, in_block)
    }

    /// The async twin of [`WaitGroup::done`].
    pub async fn done_async(&self, token: &str) -> Result<bool> {
        let held = self.slots.get().remove(token);
        match held {
            Some(held) => self.free_async(held).await,
            None => self.semaphore.release_token_async(token).await,
        }
    }

    /// [`WaitGroup::free`] for an async caller, on its runtime.
    async fn free_async(&self, held: Held) -> Result<bool> {
        self.warn_if_lost(self.semaphore.release_async(held.hold).await)
    }

    /// The async twin of [`WaitGroup::wait`]: Ok(false) when the timeout
    /// ran out. Dropping the future leaves no watcher behind.
    ///
    /// # Errors
    /// [`Error::Config`] for a timeout over 100 years.
    pub async fn wait_async(&self, timeout: Option<Duration>) -> Result<bool> {
        self.semaphore
            .wait_idle_async(Deadline::after(timeout))
            .await
    }

    /// The async twin of [`WaitGroup::count`].
    pub async fn count_async(&self) -> Result<u32> {
        Ok(self.semaphore.inspect_async(None).await?.0)
    }

    /// [`WaitGroup::leave`] that returns at once: the slot is freed in the
    /// background (an async task's slot dropped).
    pub fn leave_in_background(&self, token: &str) {
        if let Leaving::Held(held) = self.slots.leave(token) {
            self.semaphore.release_in_background(vec![held.hold]);
        }
    }

    /// Frees the slots of open blocks as a drop does, on the runtime's
    /// blocking threads, and returns at once: for a group about to be
    /// dropped where blocking is not allowed (a garbage collector's
    /// finalizer). Slots taken by `add` are left to the drop.
    pub fn release_blocks_in_background(&self) {
        let in_blocks: Vec<Hold> = {
            let mut slots = self.slots.get();
            let tokens: Vec<String> = slots
                .iter()
                .filter(|(_, held)| held.in_block)
                .map(|(token, _)| token.clone())
                .collect();
            tokens
                .iter()
                .filter_map(|token| slots.remove(token))
                .map(|held| held.hold)
                .collect()
        };
        self.semaphore.release_in_background(in_blocks);
    }
}

impl Drop for WaitGroup {
    /// A dropped group frees the slots of blocks it is still inside of. It
    /// stops refreshing the others without freeing them: a token handed to
    /// a worker keeps its slot until the worker's `done`, or until `ttl`
    /// after the last refresh (this one's, or the adopter's).
    fn drop(&mut self) {
        for held in self.slots.drain() {
            if !held.in_block {
                continue;
            }
            if let Err(e) = self.semaphore.release(held.hold) {
                log::warn!(
                    "freeing a slot of {} on drop failed: {e}",
                    self.semaphore.what()
                );
            }
        }
    }
}

/// One held slot of a [`WaitGroup`]; freed on drop.
pub type Slot<'a> = crate::group::Slot<'a, WaitGroup>;

impl Slot<'_> {
    /// Frees the slot now, on the calling task's runtime, and reports
    /// whether it was still live, as a drop does (in a process forked while
    /// it was held, the slot is the parent's and stays). Dropped before the
    /// answer, the release finishes in the background.
    pub async fn release_async(self) -> Result<bool> {
        let (group, token) = self.disarm();
        group.leave_async(&token).await
    }
}

crate::group::slot_group!(WaitGroup);
