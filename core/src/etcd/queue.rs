//! The waiting line of one name: etcd's concurrency recipe, run by our
//! client with one Txn per step.
//!
//! Every acquire puts a key of its own under `lockyard/<name>/<shape>.`
//! (`L1.` for a lock, `G3.` for a wait group of limit 3), on its lease, and
//! holds once it is among the `limit` oldest keys there by create revision;
//! that revision is its fencing token. A key is put only while the name
//! has no key of another shape (a compare of the same Txn), so every key of
//! a name is of one shape; an entry of another is refused with a
//! ConfigError and writes nothing. A waiter of a lock
//! watches only the key just ahead of it, so a release wakes one waiter
//! (FIFO, no herd) and waiting writes nothing.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::client::{Client, Fault};
use super::kv;
use super::leases::Lease;
use super::uncontended::Uncontended;
use crate::error::{Error, Result};

/// A watch is opened again after this long even if it saw nothing: a
/// connection that died without a word cannot hold a waiter forever.
const WATCH_RENEWAL: Duration = Duration::from_secs(30);

/// Pauses while a waiter's place cannot be read, doubled up to the most.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);

pub(crate) struct Queue {
    pub(crate) client: Arc<Client>,
    /// `lockyard/<escaped name>/`: every key of the name.
    pub(crate) prefix: String,
    shape: Shape,
    /// `<prefix><shape>.`: the keys of this line's shape, which alone hold
    /// and wait here (a key of another shape is an entry being refused,
    /// unless it is the oldest of the name, and then every entry here is).
    pub(crate) own: String,
    pub(crate) limit: i64,
    /// Set for a lock under a session with a lock_delay: its holders bar
    /// the name (see `session.rs`).
    barring: Option<Barring>,
    /// "lock \"deploy\"", for messages.
    what: String,
}

/// The session a bar was put by (its value's first word).
fn bar_session(bar: &kv::Entry) -> &str {
    bar.value.split(' ').next().unwrap_or_default()
}

/// What a name's keys were taken for, written into each key (`L1.`,
/// `G3.`): each entry sees what the holders took the name for, and one of
/// another shape is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Lock,
    /// A wait group of this limit.
    Group(i64),
}

impl Shape {
    pub(crate) fn limit(self) -> i64 {
        match self {
            Shape::Lock => 1,
            Shape::Group(limit) => limit,
        }
    }

    fn tag(self) -> String {
        match self {
            Shape::Lock => "L1".to_owned(),
            Shape::Group(limit) => format!("G{limit}"),
        }
    }

    fn from_tag(tag: &str) -> Option<Shape> {
        match tag.split_at_checked(1)? {
            ("L", "1") => Some(Shape::Lock),
            ("G", limit) => limit.parse().ok().map(Shape::Group),
            _ => None,
        }
    }

    fn describe(self) -> String {
        match self {
            Shape::Lock => "a lock".to_owned(),
            Shape::Group(limit) => format!("a wait group of limit {limit}"),
        }
    }
}

/// What a lock under a session with a lock_delay writes in its name's bar
/// while it holds it: the session's id (its own bars never bar it), then
/// the lock's value if the session's behavior keeps it readable.
#[derive(Clone)]
pub(crate) struct Barring {
    pub(crate) session: String,
    /// The lock's value, kept in its bars (behavior `release`).
    pub(crate) kept: Option<String>,
}

/// How a [`Queue::take`] ended, short of an error. `resent`: the put of the
/// key was sent more than once, so a copy of it may still land after the
/// key is deleted (the caller then hands the key to [`Lease::stray`]).
pub(crate) enum Taken {
    /// Held, with this fencing token (the key's create revision).
    Held { revision: i64, resent: bool },
    /// One attempt found the lock held, and took its key out again.
    Busy { resent: bool },
    /// etcd no longer knows the lease the key was to go on: marked lost,
    /// for the caller to ask again with a new one.
    LeaseGone,
}

/// Where a key stands in the line.
enum Place {
    Holds,
    /// Behind `ahead`, as read at `revision`; `next` when `ahead` is the
    /// holder and no one else is ahead: its delete makes this key the
    /// holder (keys ahead only ever go, since create revisions only grow).
    Behind {
        ahead: String,
        revision: i64,
        next: bool,
    },
    /// The key is gone: its lease ran out, or someone deleted it.
    Gone,
}

impl Queue {
    pub(crate) fn new(
        client: Arc<Client>,
        name: &str,
        shape: Shape,
        what: String,
    ) -> Result<Queue> {
        if name.is_empty() {
            return Err(Error::config("the name must not be empty"));
        }
        // A '/' in a name would put one name's line inside another's range.
        let escaped = name.replace('%', "%25").replace('/', "%2F");
        Ok(Queue {
            client,
            own: format!("lockyard/{escaped}/{}.", shape.tag()),
            prefix: format!("lockyard/{escaped}/"),
            shape,
            limit: shape.limit(),
            barring: None,
            what,
        })
    }

    /// The line of a lock whose holders bar the name (`barring`).
    pub(crate) fn barred_by(mut self, barring: Barring) -> Queue {
        self.barring = Some(barring);
        self
    }

    /// `lockyard/<escaped name>.bar`.
    pub(crate) fn bar_key(&self) -> String {
        self.key_beside("bar")
    }

    /// `lockyard/<escaped name>.<what>`: outside every line's range (a
    /// name's escaped form has no '/').
    pub(crate) fn key_beside(&self, what: &str) -> String {
        format!("{}.{what}", self.prefix.trim_end_matches('/'))
    }

    /// The bar of this line's holder `key`: `<session> <key's nonce>[
    /// <value>]`, each grant's own, so that a delete of it (a release, a
    /// sweep after a failure) is conditional on it and never takes the bar
    /// of a later grant.
    pub(crate) fn bar_value(&self, key: &str) -> Option<String> {
        let barring = self.barring.as_ref()?;
        let nonce = key.rsplit('-').next().unwrap_or(key);
        Some(match &barring.kept {
            Some(value) => format!("{} {nonce} {value}", barring.session),
            None => format!("{} {nonce}", barring.session),
        })
    }

    /// Whether this line's holders bar the name (a lock under a session
    /// with a lock_delay).
    pub(crate) fn is_barring(&self) -> bool {
        self.barring.is_some()
    }

    /// Whether `bar` (a read of the bar key) bars this line's entries: a
    /// bar of another session.
    fn is_barred(&self, bar: &[kv::Entry]) -> bool {
        bar.first().is_some_and(|bar| {
            let session = bar_session(bar);
            self.barring
                .as_ref()
                .is_none_or(|ours| ours.session != session)
        })
    }

    /// Whether the holder `key` may leave a bar behind when it goes: taken
    /// under a session with a lock_delay (`s<session>-<nonce>`).
    fn may_leave_bar(&self, key: &str) -> bool {
        key.strip_prefix(&self.own)
            .is_some_and(|nonce| nonce.starts_with('s'))
    }

    /// Whether `entry`, the oldest of its line, holds despite `bar`: with a
    /// bar, only a key of the bar's own session holds; every other entry
    /// waits for the bar to go.
    pub(crate) fn holds_despite(&self, bar: Option<&kv::Entry>, entry: &kv::Entry) -> bool {
        let Some(bar) = bar else { return true };
        let session = entry
            .key
            .strip_prefix(&self.own)
            .and_then(|nonce| nonce.strip_prefix('s'))
            .and_then(|nonce| nonce.split_once('-'))
            .map(|(session, _)| session);
        session == Some(bar_session(bar))
    }

    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// The cluster's members, for messages.
    pub(crate) fn shown(&self) -> &str {
        self.client.shown()
    }

    /// A key of this line for one acquire: `<prefix><shape>.<nonce>`.
    pub(crate) fn key(&self, nonce: &str) -> String {
        match &self.barring {
            Some(barring) => format!("{}s{}-{nonce}", self.own, barring.session),
            None => format!("{}{nonce}", self.own),
        }
    }

    /// The shape `key` was put with (None for a key not of ours).
    pub(crate) fn shape_of(&self, key: &str) -> Option<Shape> {
        let (tag, _) = key.strip_prefix(&self.prefix)?.split_once('.')?;
        Shape::from_tag(tag)
    }

    /// Err(ConfigError) when the name's oldest key is of another shape
    /// than this line's (every key of a name is of one shape).
    fn check_oldest(&self, oldest: Option<&kv::Entry>) -> Result<()> {
        let Some(oldest) = oldest else { return Ok(()) };
        match self.shape_of(&oldest.key) {
            Some(shape) if shape == self.shape => Ok(()),
            theirs => Err(self.refusal(theirs)),
        }
    }

    /// The ConfigError for an entry of a name held as `theirs`.
    fn refusal(&self, theirs: Option<Shape>) -> Error {
        let theirs = theirs.map_or("something other than lockyard".to_owned(), Shape::describe);
        Error::config(format!(
            "{} is held as {theirs}; it cannot be taken as {} until every holder and waiter is gone",
            self.what,
            self.shape.describe()
        ))
    }

    /// Err(ConfigError) when the name is held with another shape: for a
    /// request that found nothing of its own (a slot's token built with
    /// another limit finds no key).
    pub(crate) async fn check_shape(&self) -> Result<()> {
        let txn = json!({"success": [kv::oldest(&self.prefix, 1)]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        self.check_oldest(kv::entries(kv::response(&answer, 0)).first())
    }

    /// How long one request may be retried on other members.
    pub(crate) fn request_until(&self) -> Instant {
        Instant::now() + self.client.request_timeout()
    }

    pub(crate) async fn call(&self, path: &str, body: &Value, operation: &str) -> Result<Value> {
        self.client
            .call(path, body, self.request_until())
            .await
            .map_err(|fault| fault.into_error(&self.client, operation))
    }

    /// Whether all `limit` places are taken: a look that writes nothing,
    /// for a single attempt that would only leave again.
    /// A name taken with another shape is a ConfigError here too.
    pub(crate) async fn is_full(&self) -> Result<bool> {
        let count = json!({"request_range": {
            "key": kv::encode(&self.own),
            "range_end": kv::prefix_end(&self.own),
            "count_only": true,
        }});
        let txn = json!({"success": [count, kv::oldest(&self.prefix, 1)]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        self.check_oldest(kv::entries(kv::response(&answer, 1)).first())?;
        Ok(kv::number(&kv::response(&answer, 0)["count"]) >= self.limit)
    }

    /// Puts `key` on `lease` and waits until it holds. Given up (dropped)
    /// or failed at any point, it may leave the key behind: the caller
    /// hands it to [`Lease::stray`].
    pub(crate) async fn take(
        &self,
        key: &str,
        value: &str,
        lease: &Arc<Lease>,
        one_attempt: bool,
    ) -> Result<Taken> {
        let Some((revision, holds, resent)) = self.enter(key, value, lease).await? else {
            return Ok(Taken::LeaseGone);
        };
        if holds {
            return Ok(Taken::Held { revision, resent });
        }
        let mut pause = FIRST_PAUSE;
        loop {
            let place = match self.place(key, revision).await {
                // In line already: a member restarting or a leader election
                // is waited out, up to the caller's deadline.
                Err(e) if e.is_transient() && !one_attempt => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                    continue;
                }
                place => place?,
            };
            pause = FIRST_PAUSE;
            match place {
                Place::Holds => return Ok(Taken::Held { revision, resent }),
                Place::Gone => {
                    // Its own lease going takes the key with it, often
                    // before the keep-alive has noticed: ask, to say which.
                    if lease.loss().is_none() && self.lease_ttl(lease.id).await? < 0 {
                        lease.gone();
                    }
                    return Err(Error::backend(
                        self.client.shown(),
                        "waiting",
                        format!(
                            "the waiter's key for {} is gone from etcd ({})",
                            self.what,
                            lease
                                .loss()
                                .unwrap_or_else(|| "deleted by someone else".into())
                        ),
                    ));
                }
                Place::Behind { .. } if one_attempt => {
                    self.leave(key, revision, true, lease).await?;
                    return Ok(Taken::Busy { resent });
                }
                Place::Behind {
                    ahead,
                    revision: read_at,
                    next,
                } => {
                    let turn = self.wait_turn(key, revision, &ahead, read_at, next, lease);
                    match turn.await? {
                        Turn::Holds => return Ok(Taken::Held { revision, resent }),
                        Turn::Look => continue,
                        Turn::Lost => {
                            let why = lease.loss().unwrap_or_default();
                            return Err(Error::backend(
                                self.client.shown(),
                                "waiting",
                                format!("the waiter for {} lost its lease: {why}", self.what),
                            ));
                        }
                    }
                }
            }
        }
    }

    /// Waits until `ahead` is gone (or the watch ends). Every request
    /// timeout it also reads its place: a member frozen under the watch
    /// (SIGSTOP, a partition that keeps TCP alive) sends nothing, not even
    /// an error.
    async fn wait_turn(
        &self,
        key: &str,
        revision: i64,
        ahead: &str,
        read_at: i64,
        next: bool,
        lease: &Lease,
    ) -> Result<Turn> {
        let mut watch = pin!(self.until_gone(ahead, key, read_at + 1));
        let mut lost = pin!(lease.lost());
        loop {
            let tick = tokio::time::sleep(self.client.request_timeout());
            match first_of(watch.as_mut(), lost.as_mut(), tick).await {
                // The holder just ahead went: this key holds, no read
                // needed, unless that holder may have left a bar.
                Ended::Watch(Ok(Gone::Ahead)) if next && !self.may_leave_bar(ahead) => {
                    return Ok(Turn::Holds)
                }
                Ended::Watch(ended) => return ended.map(|_| Turn::Look),
                Ended::Lost => return Ok(Turn::Lost),
                Ended::Tick => match self.place(key, revision).await {
                    Ok(Place::Behind { ahead: still, .. }) if still == ahead => continue,
                    // Moved up, gone or unreadable: the caller looks again.
                    _ => return Ok(Turn::Look),
                },
            }
        }
    }

    /// Puts `key` unless it exists (a retry after a lost reply finds its
    /// own put), and reads the holders in the same Txn: its create revision,
    /// whether it holds, and whether the put was sent more than once. None
    /// if the lease is gone.
    async fn enter(
        &self,
        key: &str,
        value: &str,
        lease: &Lease,
    ) -> Result<Option<(i64, bool, bool)>> {
        let mut alone_resent = false;
        if self.tries_alone() {
            match self.enter_alone(key, value, lease).await? {
                Uncontended::Held { revision, resent } => {
                    return Ok(Some((revision, true, resent)))
                }
                Uncontended::LeaseGone => return Ok(None),
                // An attempt whose reply was lost may have put the key:
                // the full entry's failure branch reads it.
                Uncontended::Crowded { resent } => alone_resent = resent,
            }
        }
        let holders = kv::oldest(&self.own, self.limit);
        let oldest = kv::oldest(&self.prefix, 1);
        let bar = kv::read(&self.bar_key());
        // Put only while the name has no key of another shape, in the same
        // Txn: every key of a name is of one shape, and an entry refused
        // writes nothing.
        let txn = json!({
            "compare": [
                kv::created_at(key, 0),
                kv::none_in(kv::encode(&self.prefix), kv::encode(&self.own)),
                kv::none_in(kv::prefix_end(&self.own), kv::prefix_end(&self.prefix)),
            ],
            "success": [
                {"request_put": {"key": kv::encode(key), "value": kv::encode(value), "lease": lease.id}},
                holders,
                bar,
            ],
            // The oldest key, only read when the put was refused: what the
            // name is held as.
            "failure": [kv::get(key), holders, bar, oldest],
        });
        let Some((answer, resent)) = self.enter_txn(&txn, lease).await? else {
            return Ok(None);
        };
        let holders = kv::entries(kv::response(&answer, 1));
        let holds = holders.iter().any(|entry| entry.key == key)
            && !self.is_barred(&kv::entries(kv::response(&answer, 2)));
        // Alone in the line again: the next entry tries the small Txn.
        if holds && holders.len() == 1 {
            self.found_crowded(false);
        }
        let revision = if answer["succeeded"].as_bool() == Some(true) {
            kv::revision(&answer)
        } else {
            match kv::entries(kv::response(&answer, 0)).first() {
                // Our own put, sent again after its reply was lost.
                Some(entry) => entry.create_revision,
                None => {
                    let oldest = kv::entries(kv::response(&answer, 3));
                    return Err(self.refusal(oldest.first().and_then(|e| self.shape_of(&e.key))));
                }
            }
        };
        Ok(Some((revision, holds, resent || alone_resent)))
    }

    /// Sends an entry's Txn, which puts on `lease`: None when etcd says
    /// the lease is gone (noted on it); else the answer, and whether it
    /// was sent more than once.
    pub(crate) async fn enter_txn(
        &self,
        txn: &Value,
        lease: &Lease,
    ) -> Result<Option<(Value, bool)>> {
        match self
            .client
            .call_tracked("kv/txn", txn, self.request_until())
            .await
        {
            Err(fault) if fault.is_lease_gone() => {
                lease.gone();
                Ok(None)
            }
            answer => answer
                .map(Some)
                .map_err(|fault| fault.into_error(&self.client, "queueing for the lock")),
        }
    }

    /// Where `key`, created at `revision`, stands: one read-only Txn.
    async fn place(&self, key: &str, revision: i64) -> Result<Place> {
        let txn = json!({"success": [
            kv::get(key),
            kv::oldest(&self.own, self.limit),
            kv::newest_before(&self.own, revision),
            kv::read(&self.bar_key()),
        ]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        if kv::entries(kv::response(&answer, 0)).is_empty() {
            return Ok(Place::Gone);
        }
        if kv::entries(kv::response(&answer, 1))
            .iter()
            .any(|entry| entry.key == key)
        {
            if self.is_barred(&kv::entries(kv::response(&answer, 3))) {
                // First in line, behind another session's bar: wait for
                // it to go (released, or run out lock_delay after its
                // session did).
                return Ok(Place::Behind {
                    ahead: self.bar_key(),
                    revision: kv::revision(&answer),
                    next: false,
                });
            }
            return Ok(Place::Holds);
        }
        let holders = kv::entries(kv::response(&answer, 1));
        let ahead = kv::entries(kv::response(&answer, 2));
        Ok(match ahead.into_iter().next() {
            // Only a lock's waiter knows one key whose end frees it; with
            // room for several holders any release may (see `until_gone`).
            // With a bar there, the first in line may be barred, not
            // holding: its going hands nothing over.
            Some(entry) if self.limit == 1 => Place::Behind {
                next: holders
                    .first()
                    .is_some_and(|holder| holder.key == entry.key)
                    && kv::entries(kv::response(&answer, 3)).is_empty(),
                ahead: entry.key,
                revision: kv::revision(&answer),
            },
            _ => Place::Behind {
                ahead: String::new(),
                revision: kv::revision(&answer),
                next: false,
            },
        })
    }

    /// Resolves when `ahead` (or, when empty, any key of the line) is
    /// deleted at or after `from`, when `own` is (a waiter's own key, which
    /// may go in the same revision: a lease shared with the holder,
    /// revoked), when the watch ends, or after [`WATCH_RENEWAL`].
    pub(crate) async fn until_gone(&self, ahead: &str, own: &str, from: i64) -> Result<Gone> {
        let mut create = json!({"start_revision": from, "filters": ["NOPUT"]});
        if ahead.is_empty() {
            create["key"] = kv::encode(&self.own).into();
            create["range_end"] = kv::prefix_end(&self.own).into();
        } else if own.is_empty() {
            create["key"] = kv::encode(ahead).into();
        } else {
            // One watch over both keys (and whatever sorts between them,
            // whose deletes are passed over), so that both deletes of one
            // revision come in one message.
            let (low, high) = if ahead < own {
                (ahead, own)
            } else {
                (own, ahead)
            };
            create["key"] = kv::encode(low).into();
            create["range_end"] = kv::encode(&format!("{high}\0")).into();
        }
        let watch = async {
            let mut lines = match self
                .client
                .stream(
                    "watch",
                    &json!({"create_request": create}),
                    self.request_until(),
                )
                .await
            {
                Ok(lines) => lines,
                Err(Fault::Unanswered(_) | Fault::Unsent(_)) => {
                    // No member took the watch: read the place again after a pause.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    return Ok(Gone::Nothing);
                }
                Err(fault) => return Err(fault.into_error(&self.client, "watching the lock")),
            };
            loop {
                match lines.next().await {
                    Ok(Some(message)) => {
                        let result = &message["result"];
                        let deleted: Vec<String> = result["events"]
                            .as_array()
                            .map(|events| {
                                events.iter().map(|e| kv::decode(&e["kv"]["key"])).collect()
                            })
                            .unwrap_or_default();
                        if !own.is_empty() && deleted.iter().any(|key| key == own) {
                            return Ok(Gone::Own);
                        }
                        if deleted.iter().any(|key| ahead.is_empty() || key == ahead) {
                            return Ok(Gone::Ahead);
                        }
                        if result["canceled"].as_bool() == Some(true) {
                            return Ok(Gone::Nothing);
                        }
                    }
                    Ok(None) => return Ok(Gone::Nothing),
                    Err(fault) if fault.is_compacted() => return Ok(Gone::Nothing),
                    Err(Fault::Unanswered(_) | Fault::Unsent(_)) => return Ok(Gone::Nothing),
                    Err(fault) => return Err(fault.into_error(&self.client, "watching the lock")),
                }
            }
        };
        tokio::time::timeout(WATCH_RENEWAL, watch)
            .await
            .unwrap_or(Ok(Gone::Nothing))
    }

    /// Deletes `key` if it is still the one created at `revision`: true if
    /// it was (the hold was kept to the end). A delete sent again after a
    /// lost reply that finds the key gone asks its mark (`removal.rs`)
    /// whether its own first attempt deleted it; with the lease live when
    /// the release began (`was_live`), that is the release, not a loss. A
    /// holder's bar, if still its own, goes in the same Txn.
    pub(crate) async fn leave(
        &self,
        key: &str,
        revision: i64,
        was_live: bool,
        lease: &Arc<Lease>,
    ) -> Result<bool> {
        let bar = self.bar_value(key);
        let also = bar
            .iter()
            .map(|bar_value| self.drop_bar(bar_value))
            .collect();
        let compare = kv::created_at(key, revision);
        let removal = self
            .delete_once(key, compare, also, Some(lease), "releasing the lock")
            .await?;
        if let (false, true, Some(bar_value)) = (removal.deleted, removal.gone, &bar) {
            self.drop_bar_of_deleted_key(lease.id, bar_value).await;
        }
        Ok(removal.deleted || (removal.by_lost_attempt && was_live))
    }

    /// A holder's key was gone when it released: if its lease is still
    /// there, the key was deleted by hand, and its bar, kept alive with
    /// the session, would bar the name as long as the session lives; it
    /// goes. A lease gone (the session lost) leaves its bar standing for
    /// the lock_delay, as does a lease etcd cannot be asked about.
    async fn drop_bar_of_deleted_key(&self, lease: i64, bar_value: &str) {
        // Asked after the key was found gone: a lease alive now was alive
        // when the key went (leases never come back).
        match self.lease_ttl(lease).await {
            Ok(ttl) if ttl > 0 => {
                let txn = json!({"success": [self.drop_bar(bar_value)]});
                if let Err(e) = self.call("kv/txn", &txn, "lifting the bar").await {
                    log::warn!("lifting the bar of {} failed: {e}", self.what);
                }
            }
            Ok(_) => {}
            Err(e) => log::warn!(
                "{} was deleted by hand or lost with its session; its bar stays: {e}",
                self.what
            ),
        }
    }

    /// Deletes the name's bar if it still holds `bar_value`: one request of
    /// a Txn.
    fn drop_bar(&self, bar_value: &str) -> Value {
        let bar = self.bar_key();
        json!({"request_txn": {
            "compare": [kv::valued(&bar, bar_value)],
            "success": [{"request_delete_range": {"key": kv::encode(&bar)}}],
        }})
    }

    /// Bars the name for other sessions while `key` (created at
    /// `revision`) holds it, on the session's bar lease. An error if the key
    /// is gone meanwhile: the grant is lost.
    pub(crate) async fn put_bar(&self, key: &str, revision: i64, bars: &Lease) -> Result<()> {
        let Some(bar_value) = self.bar_value(key) else {
            return Ok(());
        };
        let bar = self.bar_key();
        let txn = json!({
            "compare": [kv::created_at(key, revision)],
            "success": [{"request_put": {
                "key": kv::encode(&bar),
                "value": kv::encode(&bar_value),
                "lease": bars.id,
            }}],
        });
        let answer = self.call("kv/txn", &txn, "barring the lock").await?;
        if answer["succeeded"].as_bool() != Some(true) {
            return Err(Error::backend(
                self.client.shown(),
                "barring the lock",
                format!("the key of {} went as it was granted", self.what),
            ));
        }
        Ok(())
    }

    /// Deletes what `range` names, whoever holds it (operators only).
    pub(crate) async fn delete(&self, range: &Value) -> Result<Value> {
        self.call("kv/deleterange", range, "deleting a holder")
            .await
    }

    /// Every key of the line, oldest first: the holders, then the waiters.
    pub(crate) async fn line(&self) -> Result<Vec<kv::Entry>> {
        let txn = json!({"success": [kv::oldest(&self.prefix, 0)]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        Ok(kv::entries(kv::response(&answer, 0)))
    }

    /// How long `lease` lasts on etcd's clock (zero once it is gone).
    pub(crate) async fn lease_left(&self, lease: i64) -> Result<Duration> {
        Ok(Duration::from_secs(
            self.lease_ttl(lease).await?.max(0) as u64
        ))
    }

    /// The seconds etcd gives `lease`: -1 once it is gone.
    async fn lease_ttl(&self, lease: i64) -> Result<i64> {
        let answer = self
            .call("lease/timetolive", &json!({"ID": lease}), "reading a lease")
            .await?;
        Ok(kv::number(&answer["TTL"]))
    }

    /// Whether anyone holds the name, whatever it was taken as.
    /// A name barred by a lost session counts as held: it cannot be taken.
    pub(crate) async fn anyone_holds(&self) -> Result<bool> {
        let txn = json!({"success": [kv::oldest(&self.prefix, 1), kv::read(&self.bar_key())]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        Ok(!kv::entries(kv::response(&answer, 0)).is_empty()
            || !kv::entries(kv::response(&answer, 1)).is_empty())
    }

    /// The name's bar, if a session's lock bars it.
    pub(crate) async fn bar(&self) -> Result<Option<kv::Entry>> {
        let txn = json!({"success": [kv::read(&self.bar_key())]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        Ok(kv::entries(kv::response(&answer, 0)).into_iter().next())
    }

    /// The oldest `limit` keys: the holders, with their values.
    pub(crate) async fn holders(&self) -> Result<Vec<kv::Entry>> {
        let txn = json!({"success": [kv::oldest(&self.own, self.limit)]});
        let answer = self.call("kv/txn", &txn, "reading the lock").await?;
        Ok(kv::entries(kv::response(&answer, 0)))
    }
}

/// What a waiter does after one turn of waiting.
enum Turn {
    /// The holder just ahead went: this key holds.
    Holds,
    /// Read the place again.
    Look,
    /// Its lease was lost.
    Lost,
}

/// What a watch of the line saw go.
pub(crate) enum Gone {
    /// The key watched (or, watching the whole line, any key).
    Ahead,
    /// The watcher's own key.
    Own,
    /// Nothing: the watch ended or was renewed.
    Nothing,
}

/// How one turn of waiting ended.
enum Ended {
    Watch(Result<Gone>),
    Lost,
    Tick,
}

/// Whichever of the watch, the lease's loss and the tick ends first.
async fn first_of(
    mut watch: Pin<&mut impl Future<Output = Result<Gone>>>,
    mut lost: Pin<&mut impl Future<Output = ()>>,
    tick: impl Future<Output = ()>,
) -> Ended {
    let mut tick = pin!(tick);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(ended) = watch.as_mut().poll(cx) {
            return Poll::Ready(Ended::Watch(ended));
        }
        if lost.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ended::Lost);
        }
        if tick.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ended::Tick);
        }
        Poll::Pending
    })
    .await
}
