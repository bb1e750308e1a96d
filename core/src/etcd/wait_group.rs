//! The etcd wait group: the `limit`-place line of [`Queue`], its slots
//! held per process and handed between processes by token.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::client::Client;
use super::grant::{self, Grant};
use super::leases::{self, Lease, Leases};
use super::queue::{Queue, Shape};
use super::slots::Adopted;
use super::target::Target;
use crate::error::{Error, Result};
use crate::group::Slot;
use crate::health;
use crate::holds::{Holds, Leaving};
use crate::identity::{holder_identity, random_hex};
use crate::lease::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TTL};
use crate::limits;
use crate::runtime;
use crate::wait::{Deadline, InTime, Interrupt, NEVER};

/// Length of a slot's token: random hex, the last part of its key.
const TOKEN_LEN: usize = 24;

/// At most `limit` holders at a time across every process, on etcd: a
/// crashed holder's slot comes free when its lease runs out.
///
/// Slots are the `limit` oldest keys of the name by create revision, so
/// waiters are served in arrival order, and a slot's fencing token is its
/// key's create revision. As with [`crate::redis::WaitGroup`], a slot is
/// freed only by [`WaitGroup::done`], by its lease running out, or by the
/// end of the [`Slot`] guard that took it; [`WaitGroup::adopt`] moves a
/// slot onto the lease of the process that works on it. Each group keeps
/// its own lease, which a dropped group stops keeping alive without
/// revoking it: slots handed to other processes run out after `ttl`, never
/// sooner.
///
/// ```no_run
/// use std::time::Duration;
/// use lockyard::etcd::WaitGroup;
///
/// let quota = WaitGroup::builder("etcd://127.0.0.1:2379", "api-quota", 10).build()?;
/// let slot = quota.acquire(Some(Duration::from_secs(30)))?;
/// slot.check_health()?;
/// // ... call the rate-limited API ...
/// drop(slot); // done
/// quota.wait(None)?; // until every slot is free again
/// # Ok::<(), lockyard::Error>(())
/// ```
pub struct WaitGroup {
    queue: Arc<Queue>,
    client: Arc<Client>,
    ttl_secs: i64,
    /// This group's lease in this process (a new one after a fork).
    leases: Mutex<Arc<Leases>>,
    prefix: String,
    /// Slots this process holds, by token.
    /// Shared with an adopt under way, which records its slot even when
    /// its caller went away.
    slots: Arc<Holds<String, Held>>,
}

/// A slot this process keeps alive.
struct Held {
    grant: Grant,
    /// Taken for a block: freed when the group is dropped inside it.
    in_block: bool,
}

/// Options for a [`WaitGroup`]; start with [`WaitGroup::builder`].
#[derive(Clone)]
#[must_use]
pub struct WaitGroupBuilder {
    url: String,
    name: String,
    limit: u32,
    ttl: Duration,
    connect_timeout: Duration,
}

impl WaitGroupBuilder {
    /// How long a slot outlives its holder's process (default
    /// [`DEFAULT_TTL`](crate::lease::DEFAULT_TTL)), in whole seconds
    /// (rounded up).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// How long one request to a member may take before the next member is
    /// tried (default [`DEFAULT_CONNECT_TIMEOUT`](crate::lease::DEFAULT_CONNECT_TIMEOUT)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Validates the options; touches no server.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty name, a limit of 0, a ttl under 1 s
    /// or over 30 days, or a URL that is not `etcd://` or `etcds://`.
    pub fn build(self) -> Result<WaitGroup> {
        let target = Target::parse(&self.url)?;
        if self.limit == 0 {
            return Err(Error::config("limit must be at least 1"));
        }
        let ttl_secs = leases::ttl_secs(self.ttl)?;
        let connect_timeout = limits::positive_period("connect_timeout", self.connect_timeout)?;
        let client = Arc::new(Client::new(target, connect_timeout));
        let what = format!("wait group {:?}", self.name);
        let queue = Queue::new(
            client.clone(),
            &self.name,
            Shape::Group(self.limit.into()),
            what,
        )?;
        Ok(WaitGroup {
            queue: Arc::new(queue),
            leases: Mutex::new(Leases::own(&client, ttl_secs)),
            client,
            ttl_secs,
            prefix: random_hex(8),
            slots: Arc::new(Holds::new()),
        })
    }
}

impl WaitGroup {
    /// Options for the group `name` with `limit` slots on the etcd cluster
    /// at `url` (as for [`crate::etcd::Lock::builder`]).
    pub fn builder(
        url: impl Into<String>,
        name: impl Into<String>,
        limit: u32,
    ) -> WaitGroupBuilder {
        WaitGroupBuilder {
            url: url.into(),
            name: name.into(),
            limit,
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Waits up to `timeout` (None: forever) for a slot; the returned
    /// guard frees it on drop.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out, [`Error::Backend`] if no
    /// member answers, or if the waiter's lease is lost while it waits.
    pub fn acquire(&self, timeout: Option<Duration>) -> Result<Slot<'_, WaitGroup>> {
        let token = self.enter(timeout, NEVER)?;
        Ok(Slot::new(self, token))
    }

    /// Takes a slot and returns its token, to be freed with
    /// [`WaitGroup::done`] from this process or any other. This process
    /// keeps it alive until another one [adopts](WaitGroup::adopt) it;
    /// dropping the group does not free it. Waits until `deadline`;
    /// `interrupted` is asked at least every 50 ms, and a wait that ends
    /// without a slot leaves nothing queued.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes, [`Error::Interrupted`].
    pub fn add(&self, deadline: impl Into<Deadline>, interrupted: Interrupt<'_>) -> Result<String> {
        self.take(deadline.into(), interrupted, false)
    }

    /// Takes a slot for a block that ends with [`WaitGroup::leave`]; like
    /// [`WaitGroup::add`], except that dropping the group inside the block
    /// frees the slot.
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
        let deadline = deadline.check()?;
        let (token, key, value) = self.place();
        let grant = grant::take(
            &self.queue,
            &self.leases(),
            &key,
            &value,
            deadline,
            interrupted,
        )?;
        self.keep(token, grant, deadline, in_block)
    }

    /// A new slot's token, its key in the line and what the key stores.
    fn place(&self) -> (String, String, String) {
        let token = random_hex(TOKEN_LEN / 2);
        let key = self.queue.key(&token);
        (token, key, holder_identity(&self.prefix))
    }

    /// Keeps the slot `grant` of a take with `deadline` (None: it ran out).
    fn keep(
        &self,
        token: String,
        grant: Option<Grant>,
        deadline: Deadline,
        in_block: bool,
    ) -> Result<String> {
        let grant =
            grant.ok_or_else(|| deadline.ran_out(format!("a slot of {}", self.queue.what())))?;
        self.slots
            .get()
            .insert(token.clone(), Held { grant, in_block });
        Ok(token)
    }

    /// This group's leases: after a fork, the child's own.
    fn leases(&self) -> Arc<Leases> {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        if leases.pid() != crate::pid::current() {
            *leases = Leases::own(&self.client, self.ttl_secs);
        }
        leases.clone()
    }

    /// The key of `token`, if it is one of ours in shape.
    fn key(&self, token: &str) -> Option<String> {
        let ours = token.len() == TOKEN_LEN && token.bytes().all(|b| b.is_ascii_hexdigit());
        ours.then(|| self.queue.key(token))
    }

    /// Frees the slot of `token`, whichever process took it. Ok(false) if
    /// that slot had already run out or been freed, or the token is not
    /// one of this group's.
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answers.
    pub fn done(&self, token: &str) -> Result<bool> {
        let held = self.slots.get().remove(token);
        match (held, self.key(token)) {
            (Some(held), _) => self.free(held),
            (None, Some(key)) => runtime::block_on(self.remove(key)),
            (None, None) => Ok(false),
        }
    }

    /// Frees the slot `key`, which this process does not hold.
    fn remove(&self, key: String) -> impl Future<Output = Result<bool>> + Send + 'static {
        let (queue, leases) = (self.queue.clone(), self.leases());
        async move {
            let marks = leases.live(queue.request_until()).await?;
            let removed = queue.remove(&key, Some(&marks)).await?;
            // A token of a group of another limit names another key.
            if !removed {
                queue.check_shape().await?;
            }
            Ok(removed)
        }
    }

    /// Frees a slot this process holds, warning if it had been lost.
    fn free(&self, held: Held) -> Result<bool> {
        self.warn_if_lost(grant::give_back(&self.queue, &held.grant))
    }

    /// Passes a free's outcome on, warning if the slot had been lost.
    fn warn_if_lost(&self, freed: Result<bool>) -> Result<bool> {
        health::warn_if_lost(
            freed,
            || format!("a slot of {}", self.queue.what()),
            "freed",
            "more than its limit",
        )
    }

    /// Takes over keeping the slot of `token` alive, in the process the
    /// adder handed the token to: the slot's key moves onto this group's
    /// lease (keeping its fencing token), so it lives as long as this
    /// process and this group do, until [`WaitGroup::done`] frees it.
    /// Ok(false) when the slot is gone (done, or run out) or another
    /// process adopted it already (a slot has one adopter).
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answers.
    pub fn adopt(&self, token: &str) -> Result<bool> {
        let Some(key) = self.key(token) else {
            return Ok(false);
        };
        runtime::block_on(self.adopting(token, key))
    }

    /// Moves the slot `key` of `token` onto this group's lease and records
    /// it here; false when it is gone.
    fn adopting(
        &self,
        token: &str,
        key: String,
    ) -> impl Future<Output = Result<bool>> + Send + 'static {
        let (slots, token) = (self.slots.clone(), token.to_owned());
        let moving = self.move_here(key.clone());
        async move { Ok(adopted(&slots, &token, key, moving.await?)) }
    }

    /// Moves the slot `key` onto this group's lease; its lease and
    /// revision, or None when it is gone.
    fn move_here(
        &self,
        key: String,
    ) -> impl Future<Output = Result<Option<(Arc<Lease>, i64)>>> + Send + 'static {
        let (queue, leases) = (self.queue.clone(), self.leases());
        let adopter = holder_identity(&self.prefix);
        async move {
            for _ in 0..2 {
                let lease = leases.live(queue.request_until()).await?;
                match queue.adopt(&key, &lease, &adopter).await? {
                    Adopted::Ours(revision) => return Ok(Some((lease, revision))),
                    Adopted::Gone => {
                        queue.check_shape().await?;
                        return Ok(None);
                    }
                    Adopted::LeaseGone => continue,
                }
            }
            Err(grant::two_leases_lost(&queue))
        }
    }

    /// Ends a block that took the slot of `token`: frees only a slot this
    /// process holds (in a process forked inside the block the slot is the
    /// parent's, and this does nothing: Ok(true)). Ok(false) when the slot
    /// was freed already.
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answers.
    pub fn leave(&self, token: &str) -> Result<bool> {
        match self.slots.leave(token) {
            Leaving::Held(held) => self.free(held),
            Leaving::Inherited => Ok(true),
            Leaving::NotHeld => Ok(false),
        }
    }

    /// Waits until `deadline` until no slot is held and nobody waits.
    /// Interruptible like [`WaitGroup::add`]; writes nothing.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the deadline passes first.
    pub fn wait_interruptibly(
        &self,
        deadline: impl Into<Deadline>,
        interrupted: Interrupt<'_>,
    ) -> Result<()> {
        let deadline = deadline.into().check()?;
        let ran_out = || deadline.ran_out(format!("{} to have no slot held", self.queue.what()));
        if deadline.is_one_attempt() {
            return match runtime::block_on(self.queue.held())? {
                0 => Ok(()),
                _ => Err(ran_out()),
            };
        }
        match runtime::block_on_interruptibly(self.queue.until_empty(), deadline.at(), interrupted)
        {
            runtime::Ended::Done(done) => done,
            runtime::Ended::TimedOut => Err(ran_out()),
            runtime::Ended::Interrupted => Err(Error::Interrupted(self.queue.what().to_owned())),
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

    /// Held slots, asked of etcd.
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answers.
    pub fn count(&self) -> Result<u32> {
        runtime::block_on(self.queue.held())
    }

    /// The fencing token of a slot this process holds: its key's create
    /// revision.
    pub fn fencing_token(&self, token: &str) -> Option<u64> {
        self.slots
            .get()
            .get(token)
            .map(|held| held.grant.held.revision as u64)
    }

    /// Whether a slot this process holds is surely still live (reads a
    /// flag and the clock).
    pub fn healthy(&self, token: &str) -> bool {
        self.slots
            .get()
            .get(token)
            .is_some_and(|held| held.grant.held.health.is_healthy())
    }

    /// Ok if this process holds the slot and it is healthy.
    ///
    /// # Errors
    /// [`Error::NotLocked`] if this process does not hold it,
    /// [`Error::LockUnhealthy`] if it may be lost.
    pub fn check_health(&self, token: &str) -> Result<()> {
        let what = format!("slot {token} of {}", self.queue.what());
        match self.slots.get().get(token) {
            None => Err(Error::NotLocked(what)),
            Some(held) => held.grant.held.health.check(&what),
        }
    }

    /// Frees the slots of open blocks in the background and returns at
    /// once (a garbage collector's finalizer); slots taken by `add` are
    /// left to run out.
    pub fn release_blocks_in_background(&self) {
        for held in self.blocks() {
            self.free_in_background(held);
        }
    }

    /// [`WaitGroup::leave`] that returns at once: the slot is freed in the
    /// background (the slot guard of an async task dropped, which must not
    /// block its executor).
    pub fn leave_in_background(&self, token: &str) {
        if let Leaving::Held(held) = self.slots.leave(token) {
            self.free_in_background(held);
        }
    }

    fn free_in_background(&self, held: Held) {
        grant::give_back_in_background(self.queue.clone(), held.grant);
    }

    /// Takes out the slots of open blocks.
    fn blocks(&self) -> Vec<Held> {
        let mut slots = self.slots.get();
        let tokens: Vec<String> = slots
            .iter()
            .filter(|(_, held)| held.in_block)
            .map(|(token, _)| token.clone())
            .collect();
        tokens
            .iter()
            .filter_map(|token| slots.remove(token))
            .collect()
    }
}

/// The async twins: each wait runs on lockyard's runtime, where the
/// client's connections live, and the caller awaits it on any executor.
impl WaitGroup {
    /// The async twin of [`WaitGroup::acquire`]: waits up to `timeout`,
    /// holding no thread. Dropping the future before it completes leaves
    /// nothing held or queued; dropping the slot frees it in the
    /// background ([`Slot::release_async`](crate::group::Slot) waits for
    /// the answer instead).
    ///
    /// # Errors
    /// Those of [`WaitGroup::acquire`].
    pub async fn acquire_async(&self, timeout: Option<Duration>) -> Result<Slot<'_, WaitGroup>> {
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

    /// The async twin of [`WaitGroup::enter`].
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait runs out.
    pub async fn enter_async(&self, deadline: impl Into<Deadline>) -> Result<String> {
        self.take_async(deadline.into(), true).await
    }

    async fn take_async(&self, deadline: Deadline, in_block: bool) -> Result<String> {
        let deadline = deadline.check()?;
        let (token, key, value) = self.place();
        let grant =
            grant::take_async(self.queue.clone(), self.leases(), key, value, deadline).await?;
        self.keep(token, grant, deadline, in_block)
    }

    /// The async twin of [`WaitGroup::done`]. Dropped before it ends, the
    /// slot is freed all the same.
    ///
    /// # Errors
    /// Those of [`WaitGroup::done`].
    pub async fn done_async(&self, token: &str) -> Result<bool> {
        let held = self.slots.get().remove(token);
        match (held, self.key(token)) {
            (Some(held), _) => self.free_async(held).await,
            (None, Some(key)) => runtime::to_the_end(self.queue.what(), self.remove(key)).await,
            (None, None) => Ok(false),
        }
    }

    /// The async twin of [`WaitGroup::adopt`]. Dropped before it ends, the
    /// adopt runs to its end: a slot moved onto this group's lease is this
    /// group's, as after an adopt that returned true.
    ///
    /// # Errors
    /// Those of [`WaitGroup::adopt`].
    pub async fn adopt_async(&self, token: &str) -> Result<bool> {
        let Some(key) = self.key(token) else {
            return Ok(false);
        };
        runtime::to_the_end(self.queue.what(), self.adopting(token, key)).await
    }

    /// The async twin of [`WaitGroup::leave`].
    ///
    /// # Errors
    /// Those of [`WaitGroup::leave`].
    pub async fn leave_async(&self, token: &str) -> Result<bool> {
        match self.slots.leave(token) {
            Leaving::Held(held) => self.free_async(held).await,
            Leaving::Inherited => Ok(true),
            Leaving::NotHeld => Ok(false),
        }
    }

    /// [`WaitGroup::free`] for an async caller: dropped before it ends, the
    /// slot is freed all the same.
    async fn free_async(&self, held: Held) -> Result<bool> {
        let freed = grant::give_back_async(self.queue.clone(), held.grant).await;
        self.warn_if_lost(freed)
    }

    /// The async twin of [`WaitGroup::wait`]: Ok(false) when the timeout
    /// ran out. Dropping the future leaves no watch behind.
    ///
    /// # Errors
    /// [`Error::Config`] for a timeout over 100 years.
    pub async fn wait_async(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = Deadline::after(timeout).check()?;
        let queue = self.queue.clone();
        let idle = runtime::on_runtime(self.queue.what(), async move {
            if deadline.is_one_attempt() {
                return Ok(queue.held().await? == 0);
            }
            let Some(at) = deadline.at() else {
                return queue.until_empty().await.map(|()| true);
            };
            match tokio::time::timeout_at(at.into(), queue.until_empty()).await {
                Ok(emptied) => emptied.map(|()| true),
                Err(_) => Ok(false),
            }
        });
        idle.await
    }

    /// The async twin of [`WaitGroup::count`].
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answers.
    pub async fn count_async(&self) -> Result<u32> {
        let queue = self.queue.clone();
        runtime::on_runtime(self.queue.what(), async move { queue.held().await }).await
    }
}

impl Slot<'_, WaitGroup> {
    /// Frees the slot now and reports whether it was still live, as a drop
    /// does (in a process forked while it was held, the slot is the
    /// parent's and stays). Dropped before the answer, the release
    /// finishes in the background.
    ///
    /// # Errors
    /// [`Error::Backend`] if no member answers.
    pub async fn release_async(self) -> Result<bool> {
        let (group, token) = self.disarm();
        group.leave_async(&token).await
    }
}

/// Keeps the slot of `token` that [`WaitGroup::move_here`] adopted, in
/// `slots`; false when there was none to adopt.
fn adopted(
    slots: &Holds<String, Held>,
    token: &str,
    key: String,
    moved: Option<(Arc<Lease>, i64)>,
) -> bool {
    let Some((lease, revision)) = moved else {
        return false;
    };
    let mut slots = slots.get();
    let in_block = slots.get(token).is_some_and(|held| held.in_block);
    let grant = Grant {
        held: lease.hold(key, revision, false),
        lease,
    };
    slots.insert(token.to_owned(), Held { grant, in_block });
    true
}

impl Drop for WaitGroup {
    /// A dropped group frees the slots of blocks it is still inside of,
    /// and stops keeping the others alive without freeing them: a token
    /// handed to a worker keeps its slot until the worker's `done`, or
    /// until `ttl` after the last keep-alive.
    fn drop(&mut self) {
        for held in self.blocks() {
            if let Err(e) = self.free(held) {
                log::warn!(
                    "freeing a slot of {} on drop failed: {e}",
                    self.queue.what()
                );
            }
        }
    }
}

crate::group::slot_group!(WaitGroup);
