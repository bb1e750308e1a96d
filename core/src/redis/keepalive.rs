//! A session's keep-alive: its key in Redis, renewed every ttl/2 together
//! with every grant living under the session, and what the session needs
//! of such a grant ([`Member`]). The semaphore's holds implement `Member`;
//! nothing here knows how a grant was taken.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::hold::TAKER;
use super::refresh_batch::{by_node, pipelined, Refresh, MOST_IN_ONE};
use super::route::{Link, Route};
use super::server::COMMAND_TIMEOUT;
use super::slots::{Renewal, Slots};
use crate::clock::Stamp;
use crate::error::Result;
use crate::health::Health;
use crate::holds::{Holds, ProcessHolds};
use crate::lease::Lease;

/// A grant living under a session, as the session sees it.
pub(crate) trait Member: Send + Sync {
    /// Its slots and token: the renewal refreshes them, by the session's
    /// TTL, in pipelines with the session's other grants.
    fn grant(&self) -> (&Slots, &str);

    /// Gives the grant back (a clean release: no lock_delay).
    fn release(&self) -> Result<bool>;
}

/// The session's key and the grants its renewal keeps alive.
pub(crate) struct KeepAlive {
    id: String,
    /// "session <id>", for messages.
    what: String,
    key: String,
    /// What the key holds: the creator's pid and the session's behavior.
    value: String,
    route: Route,
    lease: Lease,
    health: Arc<Health>,
    /// Grants held under the session, kept alive by its renewal; a forked
    /// child's are its own, not its parent's.
    members: Holds<u64, Arc<dyn Member>>,
    next_member: AtomicU64,
}

impl KeepAlive {
    /// The keep-alive of session `id`, holding `value`, before its key is
    /// created ([`KeepAlive::create`]). Healthy for one TTL from now, the
    /// earliest its key can be sent.
    pub(crate) fn new(id: &str, route: Route, lease: Lease, value: String) -> KeepAlive {
        KeepAlive {
            id: id.to_owned(),
            what: format!("session {id}"),
            key: format!("lockyard:session:{{{id}}}"),
            value,
            route,
            health: Arc::new(Health::new(Stamp::now() + lease.ttl)),
            lease,
            members: Holds::new(),
            next_member: AtomicU64::new(0),
        }
    }

    /// Creates the session's key in Redis for the lease's TTL;
    /// [`KeepAlive::run`] renews it.
    pub(crate) fn create(&self) -> Result<()> {
        self.route.run("create session", COMMAND_TIMEOUT, |conn| {
            self.create_command().query::<()>(conn)
        })
    }

    /// [`KeepAlive::create`] for an async caller, on its runtime. Each
    /// link the create is sent on is left in `sent_on`, for
    /// [`KeepAlive::delete_behind`].
    pub(crate) async fn create_async(&self, sent_on: &Mutex<Option<Link>>) -> Result<()> {
        self.route
            .for_task(None, "create session", COMMAND_TIMEOUT, true, |mut link| {
                let create = self.create_command();
                *sent_on.lock().unwrap_or_else(|e| e.into_inner()) = Some(link.clone());
                async move { create.query_async::<()>(&mut link).await }
            })
            .await
    }

    /// SET NX: a resent create finds the key and changes nothing.
    fn create_command(&self) -> redis::Cmd {
        let mut set = redis::cmd("SET");
        set.arg(&self.key)
            .arg(&self.value)
            .arg("NX")
            .arg("PX")
            .arg(self.lease.ttl_ms());
        set
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    pub(crate) fn health(&self) -> &Arc<Health> {
        &self.health
    }

    fn members(&self) -> ProcessHolds<'_, u64, Arc<dyn Member>> {
        self.members.get()
    }

    /// Puts `member` under the renewal until the returned tie is dropped.
    pub(crate) fn join(self: &Arc<Self>, member: Arc<dyn Member>) -> Membership {
        let id = self.next_member.fetch_add(1, Ordering::Relaxed);
        self.members().insert(id, member);
        Membership {
            keep_alive: self.clone(),
            id,
        }
    }

    /// Gives back every grant under the session (this process's); the
    /// first error, after trying them all.
    pub(crate) fn release_all(&self) -> Result<()> {
        let mut first_error = None;
        for member in self.members.drain() {
            if let Err(e) = member.release() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether the key is still in Redis; a missing key loses the session.
    pub(crate) fn confirm(&self) -> Result<()> {
        let exists: bool = self.route.run("confirm session", COMMAND_TIMEOUT, |conn| {
            redis::cmd("EXISTS").arg(&self.key).query(conn)
        })?;
        if !exists {
            self.health
                .mark_lost("the session's key is gone (it ran out, or Redis restarted)");
        }
        Ok(())
    }

    pub(crate) fn delete(&self) -> Result<()> {
        self.route.run("destroy session", COMMAND_TIMEOUT, |conn| {
            redis::cmd("DEL").arg(&self.key).query::<()>(conn)
        })
    }

    /// Deletes the key through the route, on lockyard's runtime.
    pub(crate) async fn delete_async(&self) -> Result<()> {
        self.route
            .in_background("destroy session", COMMAND_TIMEOUT, |mut link| async move {
                self.delete_command().query_async::<()>(&mut link).await
            })
            .await
    }

    /// Deletes the key on `link`, the connection a create was sent on:
    /// it writes in order, so the delete lands after the create, however
    /// late the create's runtime writes it (its driver runs on the
    /// caller's runtime). Gives up after the command timeout.
    pub(crate) async fn delete_behind(&self, mut link: Link) {
        let delete = self.delete_command();
        let deleted = tokio::time::timeout(COMMAND_TIMEOUT, delete.query_async::<()>(&mut link));
        if !matches!(deleted.await, Ok(Ok(()))) {
            log::debug!("deleting {} behind its create failed", self.what);
        }
    }

    fn delete_command(&self) -> redis::Cmd {
        let mut delete = redis::cmd("DEL");
        delete.arg(&self.key);
        delete
    }

    /// Renews the session key and every grant under it every ttl/2. A grant
    /// or the key found gone loses the session (and its locks) at once;
    /// after a transient failure it retries every ttl/10 until the lease it
    /// still surely has runs out.
    pub(crate) async fn run(self: Arc<Self>) {
        let ttl = self.lease.ttl;
        let mut failures = 0u32;
        loop {
            tokio::time::sleep(if failures == 0 { ttl / 2 } else { ttl / 10 }).await;
            let sent = Stamp::now();
            match self.renew_once().await {
                Ok(None) => {
                    failures = 0;
                    self.health.extend(sent + ttl);
                }
                Ok(Some(reason)) => {
                    log::warn!("{} lost: {reason}", self.what);
                    self.health.mark_lost(reason);
                    return;
                }
                Err(e) => {
                    failures += 1;
                    log::warn!("renewing {} failed ({failures} in a row): {e}", self.what);
                    if !self.health.is_healthy() {
                        self.health.mark_lost(format!(
                            "its lease ran out while renewals failed, the last with: {e}"
                        ));
                        return;
                    }
                }
            }
        }
    }

    /// Ok(Some(reason)) when the session turned out lost.
    async fn renew_once(&self) -> Result<Option<String>> {
        let renewed: i64 = self
            .route
            .in_background(
                "renew session",
                self.lease.background_timeout(),
                |mut conn| async move {
                    redis::cmd("PEXPIRE")
                        .arg(&self.key)
                        .arg(self.lease.ttl_ms())
                        .query_async(&mut conn)
                        .await
                },
            )
            .await?;
        if renewed == 0 {
            return Ok(Some(
                "the session ran out before it could be renewed (paused or partitioned?)".into(),
            ));
        }
        let members: Vec<(u64, Arc<dyn Member>)> = self
            .members()
            .iter()
            .map(|(id, m)| (*id, m.clone()))
            .collect();
        // In one pipeline per node (see `refresh_batch`); a refresh the
        // pipeline does not settle goes alone along its route.
        for (server, on_node) in by_node(members) {
            for chunk in on_node.chunks(MOST_IN_ONE) {
                let replies = pipelined(&server, chunk).await;
                for ((id, member), reply) in chunk.iter().zip(replies) {
                    let renewed = match reply {
                        Some(renewed) => renewed,
                        None => {
                            let (slots, token) = member.grant();
                            slots
                                .refresh_alone(token, TAKER, slots.lease.background_timeout())
                                .await?
                        }
                    };
                    // A grant released meanwhile is gone for a good reason.
                    if Renewal::of(&renewed) != Renewal::Extended && self.members().contains_key(id)
                    {
                        return Ok(Some(
                            "a lock under it ran out or was taken over before it could be refreshed"
                                .into(),
                        ));
                    }
                }
            }
        }
        Ok(None)
    }
}

/// A grant's tie to the session it lives under; the grant leaves the
/// session's renewal when this is dropped.
pub(crate) struct Membership {
    keep_alive: Arc<KeepAlive>,
    id: u64,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.keep_alive.members().remove(&self.id);
    }
}

impl Refresh for (u64, Arc<dyn Member>) {
    fn slots(&self) -> &Slots {
        self.1.grant().0
    }
    fn token(&self) -> &str {
        self.1.grant().1
    }
    fn refresher(&self) -> &str {
        TAKER
    }
}
