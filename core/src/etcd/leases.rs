//! The leases this process holds its etcd keys with: one per cluster and
//! ttl, shared by every lock object without a session, kept alive every
//! ttl/3 by one task however many keys it carries.
//!
//! The keep-alive task also checks, every interval, that each held key is
//! still the one taken (one read-only Txn), and deletes the keys of waits
//! given up and releases that failed: a key left behind would otherwise
//! stay alive, and hold its place, for as long as this process keeps the
//! lease. A lease etcd no longer knows is lost for good: its holds turn
//! unhealthy, and the next acquire is granted a new lease.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::client::{Client, Fault};
use super::kv;
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::health::Health;
use crate::limits;
use crate::runtime;

/// How long a key given up is looked for after a delete of it succeeded: a
/// put sent before the wait was given up may still land after the delete.
/// etcd applies or drops a proposal within its own request timeout (5 s
/// plus two election timeouts by default), and its gateway cancels the
/// request of a client that went away: 20 s is well past both.
const STRAY_WATCH: Duration = Duration::from_secs(20);

/// Compares per read-only Txn when checking held keys (etcd's default
/// `--max-txn-ops` is 128).
const CHECK_CHUNK: usize = 100;

/// One process's leases of one ttl on one cluster.
pub(crate) struct Leases {
    client: Arc<Client>,
    ttl_secs: i64,
    pid: u32,
    /// Whether dropping the last user revokes the lease, freeing at once
    /// what rides on it (false for a wait group's: handed-off slots must
    /// run out after ttl, never sooner).
    revoke_on_drop: bool,
    /// A session's: its one lease, never granted again once lost or ended.
    once: bool,
    /// A session's with a lock_delay: the ttl of the lease its bars ride on
    /// (ttl + lock_delay), granted with the lease and renewed with it.
    bar_ttl: Option<i64>,
    current: tokio::sync::Mutex<Option<Arc<Lease>>>,
}

/// One granted lease and what rides on it.
pub(crate) struct Lease {
    pub(crate) id: i64,
    ttl: Duration,
    client: Arc<Client>,
    /// Until when the lease surely lasts (boot-clock ns): the send time of
    /// the last keep-alive etcd acknowledged plus the ttl.
    valid_until: AtomicU64,
    lost: AtomicBool,
    lost_why: Mutex<Option<String>>,
    /// Wakes waiters when the lease is lost.
    on_loss: Notify,
    held: Mutex<Vec<Weak<Held>>>,
    strays: Mutex<Vec<Stray>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// A session's bar lease: renewed right after this one, and only while
    /// this one is (a lost session's bars then run out lock_delay later).
    pub(crate) bars: Option<Arc<Lease>>,
    /// The lease's own health, as a session reports it.
    pub(crate) health: Health,
}

/// A key this process holds, as the keep-alive task checks it.
pub(crate) struct Held {
    pub(crate) key: String,
    pub(crate) revision: i64,
    pub(crate) health: Health,
    /// The key's put was sent more than once: a late copy may land once
    /// the key is gone (given back, or freed by another process), and is
    /// then looked for and deleted.
    pub(crate) resent: bool,
}

struct Stray {
    key: String,
    /// Deleted only while it has this value (a session's bar).
    value: Option<String>,
    /// When a delete of it (or a look that found it gone) first succeeded;
    /// None until then, however long etcd is out of reach.
    deleted: Option<Instant>,
}

static REGISTRY: Mutex<Vec<Weak<Leases>>> = Mutex::new(Vec::new());

impl Leases {
    /// This process's leases of `ttl_secs` on `client`'s cluster, shared
    /// with every lock object of the same URL and ttl.
    pub(crate) fn shared(client: &Arc<Client>, ttl_secs: i64) -> Arc<Leases> {
        let pid = crate::pid::current();
        let mut registry = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        registry.retain(|leases| leases.strong_count() > 0);
        let found = registry.iter().filter_map(Weak::upgrade).find(|leases| {
            leases.pid == pid && leases.ttl_secs == ttl_secs && leases.client.same_as(client)
        });
        if let Some(leases) = found {
            return leases;
        }
        let leases = Arc::new(Leases::new(client, ttl_secs, true));
        registry.push(Arc::downgrade(&leases));
        leases
    }

    /// Leases of one object alone, left to run out when it is dropped.
    pub(crate) fn own(client: &Arc<Client>, ttl_secs: i64) -> Arc<Leases> {
        Arc::new(Leases::new(client, ttl_secs, false))
    }

    /// A session's one lease (and its bar lease, of `bar_ttl`), revoked
    /// when the session ends; granted by the first [`Leases::live`].
    pub(crate) fn session(client: &Arc<Client>, ttl_secs: i64, bar_ttl: Option<i64>) -> Leases {
        let mut leases = Leases::new(client, ttl_secs, true);
        leases.once = true;
        leases.bar_ttl = bar_ttl;
        leases
    }

    /// Whether these are a session's with a bar lease (a lock_delay).
    pub(crate) fn bars(&self) -> bool {
        self.bar_ttl.is_some()
    }

    fn new(client: &Arc<Client>, ttl_secs: i64, revoke_on_drop: bool) -> Leases {
        Leases {
            client: client.clone(),
            ttl_secs,
            pid: crate::pid::current(),
            revoke_on_drop,
            once: false,
            bar_ttl: None,
            current: tokio::sync::Mutex::new(None),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The live lease, granted now if there is none (or it was lost).
    pub(crate) async fn live(&self, until: Instant) -> Result<Arc<Lease>> {
        let mut current = self.current.lock().await;
        if let Some(lease) = current.as_ref() {
            if !lease.is_lost() {
                return Ok(lease.clone());
            }
            if self.once {
                // Never a silent new lease: what the session held is gone.
                return Err(Error::LockUnhealthy {
                    what: "the session".into(),
                    reason: lease.loss().unwrap_or_default(),
                });
            }
        }
        // The lease first, its bar lease after: the bars then surely
        // outlive the lease's first deadline by the lock_delay.
        let mut lease = self.grant(self.ttl_secs, until).await?;
        let mut unkept = Granting::new(self, lease.id);
        if let Some(ttl_secs) = self.bar_ttl {
            lease.bars = Some(Arc::new(self.grant(ttl_secs, until).await?));
        }
        unkept.keep();
        let lease = Arc::new(lease);
        let task = runtime::spawn(Lease::keep_alive(Arc::downgrade(&lease)));
        *lease.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        *current = Some(lease.clone());
        Ok(lease)
    }

    /// Grants a lease of `ttl_secs`, not yet kept alive.
    async fn grant(&self, ttl_secs: i64, until: Instant) -> Result<Lease> {
        let sent = Stamp::now();
        // The id is ours, not etcd's pick: a grant whose reply was lost,
        // sent again, finds its own lease instead of making a second one.
        let id = lease_id();
        // A grant that fails, or is dropped, after its request may have
        // reached etcd revokes the lease it may have made.
        let mut granting = Granting::new(self, id);
        let grant = json!({"ID": id, "TTL": ttl_secs});
        let granted = match self.client.call_tracked("lease/grant", &grant, until).await {
            Ok((answer, _)) => kv::number(&answer["TTL"]),
            Err(Fault::Refused { message, .. }) if message.contains("lease already exists") => {
                ttl_secs
            }
            Err(fault) => return Err(fault.into_error(&self.client, "granting a lease")),
        };
        if granted != ttl_secs {
            return Err(Error::config(format!(
                "etcd at {} grants leases of at least {granted} s: a ttl of {ttl_secs} s is too short",
                self.client.shown(),
            )));
        }
        granting.keep();
        let ttl = Duration::from_secs(granted as u64);
        Ok(Lease {
            id,
            ttl,
            client: self.client.clone(),
            valid_until: AtomicU64::new((sent + ttl).nanos()),
            lost: AtomicBool::new(false),
            lost_why: Mutex::new(None),
            on_loss: Notify::new(),
            held: Mutex::new(Vec::new()),
            strays: Mutex::new(Vec::new()),
            task: Mutex::new(None),
            bars: None,
            health: Health::new(sent + ttl),
        })
    }

    /// Ends a session's lease: marks it (and every key on it) lost with
    /// `why`, stops keeping it alive and revokes it and its bar lease, so
    /// that its keys and bars go at once. Ok(()) if there was none.
    pub(crate) async fn end(&self, why: &str) -> Result<()> {
        let Some(lease) = self.current.lock().await.clone() else {
            return Ok(());
        };
        lease.stop();
        if lease.is_lost() {
            // Not a clean end: its bars stand for their lock_delay.
            return Ok(());
        }
        lease.mark_lost(why.to_owned());
        let until = Instant::now() + self.client.request_timeout();
        match self.client.revoke(lease.id, until).await {
            Ok(true) => {}
            // Lost meanwhile: its bars stand, as above.
            Ok(false) => return Ok(()),
            // Unknown: the bars run out after ttl + lock_delay, the
            // session's keys after ttl.
            Err(fault) => return Err(fault.into_error(&self.client, "revoking a session's lease")),
        }
        match &lease.bars {
            Some(bars) => match self.client.revoke(bars.id, until).await {
                Err(fault) => Err(fault.into_error(&self.client, "revoking a session's bar lease")),
                Ok(_) => Ok(()),
            },
            None => Ok(()),
        }
    }

    fn revoke_in_background(&self, id: i64) {
        let client = self.client.clone();
        let until = Instant::now() + client.request_timeout();
        runtime::spawn_awaited(async move {
            let _ = client.revoke(id, until).await;
        });
    }
}

/// A lease granted, or being granted, that nothing keeps alive yet:
/// revoked in the background when dropped before [`Granting::keep`] (a
/// grant that failed, or was given up midway with its caller), rather than
/// left in etcd until its ttl.
struct Granting<'a> {
    leases: &'a Leases,
    id: Option<i64>,
}

impl<'a> Granting<'a> {
    fn new(leases: &'a Leases, id: i64) -> Self {
        Granting {
            leases,
            id: Some(id),
        }
    }

    fn keep(&mut self) {
        self.id = None;
    }
}

impl Drop for Granting<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.leases.revoke_in_background(id);
        }
    }
}

/// A ttl in etcd's whole seconds, rounded up.
pub(crate) fn ttl_secs(ttl: Duration) -> Result<i64> {
    limits::period("ttl", ttl)?;
    if ttl < Duration::from_secs(1) {
        return Err(Error::config(format!(
            "ttl must be at least 1 s (etcd's leases are whole seconds), got {ttl:?}"
        )));
    }
    Ok(ttl.as_secs() as i64 + i64::from(ttl.subsec_nanos() > 0))
}

/// A random positive lease id (etcd's ids are positive int64s).
fn lease_id() -> i64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the OS random source failed");
    (i64::from_le_bytes(bytes) & i64::MAX).max(1)
}

impl Drop for Leases {
    /// No lock object uses these leases any more: the lease is revoked, and
    /// with it any key still on it (or, for [`Leases::own`], no longer kept
    /// alive).
    fn drop(&mut self) {
        let Some(lease) = self.current.get_mut().take() else {
            return;
        };
        if self.pid != crate::pid::current() {
            // The parent's: its task runs on the parent's runtime.
            std::mem::forget(lease);
            return;
        }
        lease.stop();
        if lease.is_lost() {
            return;
        }
        // A group's lease may carry slots handed to other processes: those
        // must run out after ttl. With none, revoking frees what a wait
        // given up may have left on it; else that is deleted by hand.
        if self.revoke_on_drop || lease.held().is_empty() {
            self.revoke_in_background(lease.id);
            // A session built and dropped unused: its bar lease goes too.
            if let Some(bars) = &lease.bars {
                self.revoke_in_background(bars.id);
            }
        } else {
            lease.sweep_after_drop();
        }
    }
}

impl Lease {
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Why the lease is lost, once it is.
    pub(crate) fn loss(&self) -> Option<String> {
        self.is_lost().then(|| {
            self.lost_why
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default()
        })
    }

    /// Resolves once the lease is lost.
    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.on_loss.notified();
            if self.is_lost() {
                return;
            }
            notified.await;
        }
    }

    /// Starts checking (and keeping) `key`, taken at `revision`.
    pub(crate) fn hold(&self, key: String, revision: i64, resent: bool) -> Arc<Held> {
        let held = Arc::new(Held {
            key,
            revision,
            resent,
            health: Health::new(Stamp::from_nanos(self.valid_until.load(Ordering::Acquire))),
        });
        if let Some(why) = self.loss() {
            held.health.mark_lost(why);
        }
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&held));
        held
    }

    /// Deletes `key` now, in the background, and again at every
    /// keep-alive until a delete succeeded and [`STRAY_WATCH`] passed
    /// since: a wait given up, a release that failed. While this process
    /// keeps the lease alive, nothing else would ever remove the key.
    pub(crate) fn stray(self: &Arc<Self>, key: String) {
        self.push_stray(key, None);
    }

    /// [`Lease::stray`] for a key deleted only while it holds `value`.
    pub(crate) fn stray_if(self: &Arc<Self>, key: String, value: String) {
        self.push_stray(key, Some(value));
    }

    fn push_stray(self: &Arc<Self>, key: String, value: Option<String>) {
        self.strays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Stray {
                key,
                value,
                deleted: None,
            });
        // A process that exits right after giving up a wait (Ctrl-C) waits
        // for this first sweep: its key would otherwise hold its place in
        // line until the lease ran out.
        let lease = Arc::downgrade(self);
        runtime::spawn_awaited(async move {
            if let Some(lease) = lease.upgrade() {
                lease.sweep_strays().await;
            }
        });
    }

    /// The lease is gone on the server (a request on it was refused with
    /// "lease not found"): lost for good, as the keep-alive would find.
    pub(crate) fn gone(&self) {
        self.mark_lost(format!(
            "its etcd lease {:x} expired or was revoked",
            self.id
        ));
    }

    fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }

    fn mark_lost(&self, why: String) {
        {
            let mut slot = self.lost_why.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(why.clone());
        }
        self.lost.store(true, Ordering::Release);
        self.health.mark_lost(why.clone());
        self.on_loss.notify_waiters();
        for held in self.held() {
            held.health.mark_lost(why.clone());
        }
    }

    fn held(&self) -> Vec<Arc<Held>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|h| h.strong_count() > 0);
        held.iter().filter_map(Weak::upgrade).collect()
    }

    async fn keep_alive(lease: Weak<Lease>) {
        let mut pause = Duration::ZERO;
        loop {
            tokio::time::sleep(pause).await;
            let Some(lease) = lease.upgrade() else { return };
            pause = match lease.renew().await {
                Ok(until) => {
                    let until = match &lease.bars {
                        None => until,
                        Some(bars) => match bars.renew_bars().await {
                            // Its names could no longer be barred after a loss.
                            None => {
                                lease.mark_lost(format!(
                                    "its bar lease {:x} (for lock_delay) expired or was revoked",
                                    bars.id
                                ));
                                return;
                            }
                            // Live only while a loss would still bar its
                            // names for the whole lock_delay: a bar lease
                            // whose renewals fail runs out lock_delay after
                            // the session's health, never before.
                            Some(bars_until) => until.min(bars_until - (bars.ttl - lease.ttl)),
                        },
                    };
                    lease.extend(until);
                    lease.check_held().await;
                    lease.sweep_strays().await;
                    lease.ttl / 3
                }
                Err(fault) if fault.is_lease_gone() => {
                    lease.mark_lost(format!(
                        "its etcd lease {:x} expired or was revoked",
                        lease.id
                    ));
                    return;
                }
                // Try again soon: the health runs out by itself meanwhile.
                Err(_) => lease.ttl / 10,
            };
            if lease.is_lost() {
                return;
            }
        }
    }

    /// Renews a bar lease after its session's, and deletes the bars that
    /// releases could not: until when it surely lasts (the last renewal
    /// that went through), None once etcd no longer knows it.
    async fn renew_bars(&self) -> Option<Stamp> {
        if self.is_lost() {
            return None;
        }
        match self.renew().await {
            Err(fault) if fault.is_lease_gone() => {
                self.gone();
                return None;
            }
            Ok(until) => self.extend(until),
            Err(_) => {}
        }
        self.sweep_strays().await;
        Some(Stamp::from_nanos(self.valid_until.load(Ordering::Acquire)))
    }

    /// One keep-alive: until when etcd now keeps the lease (from when the
    /// request was sent).
    async fn renew(&self) -> Result<Stamp, Fault> {
        let sent = Stamp::now();
        let answer = self
            .client
            .call(
                "lease/keepalive",
                &json!({"ID": self.id}),
                Instant::now() + self.ttl / 3,
            )
            .await?;
        let ttl = kv::number(&answer["result"]["TTL"]);
        if ttl <= 0 {
            return Err(Fault::Refused {
                code: 5,
                message: "requested lease not found".into(),
            });
        }
        Ok(sent + Duration::from_secs(ttl as u64))
    }

    /// The lease (and every key held on it) is surely live until `until`.
    fn extend(&self, until: Stamp) {
        self.valid_until.fetch_max(until.nanos(), Ordering::AcqRel);
        self.health.extend(until);
        for held in self.held() {
            held.health.extend(until);
        }
    }

    /// Marks lost every held key that is gone or was taken again.
    async fn check_held(&self) {
        let held = self.held();
        for chunk in held.chunks(CHECK_CHUNK) {
            let txn = json!({
                "compare": chunk.iter().map(|h| kv::created_at(&h.key, h.revision)).collect::<Vec<_>>(),
                "failure": chunk.iter().map(|h| kv::get(&h.key)).collect::<Vec<_>>(),
            });
            let until = Instant::now() + self.ttl / 3;
            let Ok(answer) = self.client.call("kv/txn", &txn, until).await else {
                return;
            };
            if answer["succeeded"].as_bool() == Some(true) {
                continue;
            }
            for (index, held) in chunk.iter().enumerate() {
                let now = kv::entries(kv::response(&answer, index));
                if now.first().map(|entry| entry.create_revision) != Some(held.revision) {
                    held.health
                        .mark_lost(format!("its key {:?} was deleted from etcd", held.key));
                    if held.resent {
                        self.look_for_late_copy(&held.key);
                    }
                }
            }
        }
    }

    /// Deletes `key` at the next sweeps, for [`STRAY_WATCH`]: a copy of its
    /// put, sent twice, may land after another process freed it.
    fn look_for_late_copy(&self, key: &str) {
        let mut strays = self.strays.lock().unwrap_or_else(|e| e.into_inner());
        if !strays.iter().any(|stray| stray.key == key) {
            strays.push(Stray {
                key: key.to_owned(),
                value: None,
                deleted: None,
            });
        }
    }

    /// Goes on deleting strays, in the background, once the lease is no
    /// longer kept alive: a put sent before a wait was given up may still
    /// land. Ends when none is looked for, or when the lease ran out anyway.
    fn sweep_after_drop(self: Arc<Self>) {
        drop(runtime::spawn(async move {
            let until = Instant::now() + STRAY_WATCH.max(self.ttl);
            while Instant::now() < until
                && !self
                    .strays
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty()
            {
                self.sweep_strays().await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }));
    }

    /// Deletes the strays that exist; forgets those that were gone for
    /// [`STRAY_WATCH`].
    async fn sweep_strays(&self) {
        let (keys, valued): (Vec<String>, Vec<(String, String)>) = {
            let mut strays = self.strays.lock().unwrap_or_else(|e| e.into_inner());
            strays.retain(|stray| stray.deleted.is_none_or(|at| at.elapsed() < STRAY_WATCH));
            let keys = strays
                .iter()
                .filter(|stray| stray.value.is_none())
                .map(|stray| stray.key.clone())
                .collect();
            let valued = strays
                .iter()
                .filter_map(|stray| Some((stray.key.clone(), stray.value.clone()?)))
                .collect();
            (keys, valued)
        };
        for (key, value) in valued {
            let txn = json!({
                "compare": [kv::valued(&key, &value)],
                "success": [{"request_delete_range": {"key": kv::encode(&key)}}],
            });
            let until = Instant::now() + self.ttl / 3;
            if self.client.call("kv/txn", &txn, until).await.is_ok() {
                let mut strays = self.strays.lock().unwrap_or_else(|e| e.into_inner());
                for stray in strays
                    .iter_mut()
                    .filter(|s| s.key == key && s.value.as_ref() == Some(&value))
                {
                    stray.deleted.get_or_insert(Instant::now());
                }
            }
        }
        for chunk in keys.chunks(CHECK_CHUNK) {
            let txn = json!({
                "compare": chunk.iter().map(|key| kv::created_at(key, 0)).collect::<Vec<_>>(),
                "failure": chunk.iter().map(|key| json!({"request_delete_range": {"key": kv::encode(key)}})).collect::<Vec<_>>(),
            });
            let until = Instant::now() + self.ttl / 3;
            if self.client.call("kv/txn", &txn, until).await.is_ok() {
                let now = Instant::now();
                let mut strays = self.strays.lock().unwrap_or_else(|e| e.into_inner());
                for stray in strays
                    .iter_mut()
                    .filter(|s| s.value.is_none() && chunk.contains(&s.key))
                {
                    stray.deleted.get_or_insert(now);
                }
            }
        }
    }
}
