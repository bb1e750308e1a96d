//! Redis Sentinel: which server is the master of a replicated set now. A
//! `redis+sentinel://` URL names the sentinels and the master; the
//! sentinels are asked again whenever the master stops answering or steps
//! down, so a failover costs callers a retry, not a restart.
//!
//! Why not redis-rs's `sentinel` feature: it pulls in `rand` to pick a
//! sentinel, and returns an address without the failover epoch our
//! fencing tokens need (see [`Node::fence_base`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Client;

use super::client::without_lib_name;
use crate::error::{Error, Result};

mod url;

/// How long a master the sentinels named is used without asking them
/// again. A master they replaced while it stayed up (a manual `SENTINEL
/// FAILOVER`, a partition that heals) goes on answering as a master until
/// they demote it, which takes them seconds: without asking, a client
/// would keep granting there while others grant on the new master.
const RECHECK: Duration = Duration::from_secs(1);

/// Config epochs above this would push fencing tokens past 2^53, where
/// Lua's doubles stop counting by one. A million failovers is far beyond
/// any deployment's history.
const MAX_EPOCH: u64 = 1 << 20;

/// What a master named in `epoch` adds to server time for fencing tokens.
fn fence_base(epoch: u64) -> u64 {
    epoch.min(MAX_EPOCH) << 32
}

/// How long one step of asking the sentinels or the master may wait:
/// `connect_timeout`, cut to what is left before `give_up_at` (zero once
/// it passed).
fn step_timeout(connect_timeout: Duration, give_up_at: Option<Instant>) -> Duration {
    match give_up_at {
        Some(at) => connect_timeout.min(at.saturating_duration_since(Instant::now())),
        None => connect_timeout,
    }
}

/// The node a server's requests go to, and what its grants' fencing
/// tokens start from.
pub(crate) struct Node {
    pub(crate) client: Client,
    /// `host:port`, as the sentinels named it.
    address: String,
    /// Added to the server's clock (µs) where the scripts seed fencing
    /// tokens. Sentinel's config epoch grows with every failover, and a
    /// promoted replica may have missed the last increments of the fence
    /// counter (replication is asynchronous); seeding from its clock alone
    /// would then keep tokens increasing only while the two masters'
    /// clocks agree. With epoch × 2^32 µs (about 72 minutes) added, every
    /// grant on the new master gets a larger token than any on the old one
    /// unless the new master's clock is over an hour behind. 0 for a plain
    /// server: its tokens stay what they always were.
    pub(crate) fence_base: u64,
}

impl Node {
    pub(crate) fn fixed(client: Client) -> Node {
        Node {
            address: client.get_connection_info().addr().to_string(),
            client,
            fence_base: 0,
        }
    }
}

/// A `redis+sentinel://` or `rediss+sentinel://` URL, checked.
pub(crate) struct Sentinels {
    /// `host:port` of each sentinel, in the order to ask them: the URL's,
    /// then those that answered last time first.
    addresses: Mutex<Vec<String>>,
    master_name: String,
    /// `redis` or `rediss`: sentinels and master alike.
    scheme: &'static str,
    /// The URL's `user:password@` (still percent-encoded): the master's.
    master_auth: String,
    /// `user:password@` for the sentinels, from the query.
    sentinel_auth: String,
    db: u32,
}

impl Sentinels {
    /// `master-name@host:port,…`, for messages.
    pub(crate) fn name(&self) -> String {
        let mut addresses = self.addresses().clone();
        addresses.sort();
        format!("{}@{}", self.master_name, addresses.join(","))
    }

    fn addresses(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.addresses.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn tls(&self) -> bool {
        self.scheme == "rediss"
    }

    /// Asks the sentinels in turn who the master is, until a majority of
    /// them answered (or all were asked), and keeps the answer with the
    /// highest config epoch: a sentinel that missed the last failover
    /// still names the old master, which may still be up (cut off from the
    /// sentinels, or not yet told to step down). Sentinels that answered
    /// are asked first next time, so one that is down costs a connect
    /// timeout once, not on every new connection. The master named must
    /// then say it is one (`ROLE`): during a failover it may be down, or
    /// a replica being promoted. Each step waits up to `connect_timeout`,
    /// and none starts after `give_up_at` (a caller's deadline).
    fn resolve(&self, connect_timeout: Duration, give_up_at: Option<Instant>) -> Result<Node> {
        let (epoch, master) = self.named(connect_timeout, give_up_at)?;
        let timeout = || step_timeout(connect_timeout, give_up_at);
        let client = Client::open(format!(
            "{}://{}{master}/{}",
            self.scheme, self.master_auth, self.db
        ))
        .map(without_lib_name)
        .map_err(|e| self.error(format!("master {master}: {e}")))?;
        let role: Vec<redis::Value> = client
            .get_connection_with_timeout(timeout().max(Duration::from_millis(1)))
            .and_then(|mut conn| {
                conn.set_read_timeout(Some(timeout().max(Duration::from_millis(1))))?;
                redis::cmd("ROLE").query(&mut conn)
            })
            .map_err(|e| self.error(format!("the sentinels name {master} as master, but: {e}")))?;
        match role.first() {
            Some(redis::Value::BulkString(role)) if role == b"master" => Ok(Node {
                client,
                address: master,
                fence_base: fence_base(epoch),
            }),
            _ => Err(self.error(format!(
                "the sentinels name {master} as master, but it is not one (failover under way?)"
            ))),
        }
    }

    /// The master the sentinels name (address) and the config epoch they
    /// name it in, as [`Sentinels::resolve`] asks them, without asking the
    /// master itself.
    fn named(
        &self,
        connect_timeout: Duration,
        give_up_at: Option<Instant>,
    ) -> Result<(u64, String)> {
        let timeout = || step_timeout(connect_timeout, give_up_at);
        let order = self.addresses().clone();
        let majority = order.len() / 2 + 1;
        let (mut answered, mut silent) = (Vec::new(), Vec::new());
        let mut newest: Option<(u64, String)> = None;
        let mut failures = Vec::new();
        for sentinel in order {
            if answered.len() == majority || timeout().is_zero() {
                silent.push(sentinel);
                continue;
            }
            match self.ask(&sentinel, timeout()) {
                Ok(Some((epoch, master))) => {
                    if newest.as_ref().is_none_or(|(seen, _)| epoch > *seen) {
                        newest = Some((epoch, master));
                    }
                    answered.push(sentinel);
                }
                Ok(None) => {
                    failures.push(format!("{sentinel} does not monitor it"));
                    silent.push(sentinel);
                }
                Err(e) => {
                    failures.push(format!("{sentinel}: {e}"));
                    silent.push(sentinel);
                }
            }
        }
        answered.append(&mut silent);
        *self.addresses() = answered;
        newest.ok_or_else(|| {
            self.error(format!(
                "no sentinel named the master: {}",
                failures.join("; ")
            ))
        })
    }

    /// One sentinel's master for our name (`host:port`) and its config
    /// epoch; None if it does not monitor that name.
    fn ask(&self, sentinel: &str, timeout: Duration) -> redis::RedisResult<Option<(u64, String)>> {
        let client = Client::open(format!(
            "{}://{}{sentinel}",
            self.scheme, self.sentinel_auth
        ))?;
        let mut conn = client.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        // One round trip, so both answers describe the same moment: while
        // the failover's leader reconfigures the other replicas, it already
        // gives out the promoted one's address and the new epoch.
        let (address, master): (Option<(String, u16)>, redis::RedisResult<Vec<String>>) =
            redis::pipe()
                .cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.master_name)
                .cmd("SENTINEL")
                .arg("master")
                .arg(&self.master_name)
                .query(&mut conn)?;
        let (Some((host, port)), Ok(master)) = (address, master) else {
            return Ok(None);
        };
        let epoch = master
            .chunks(2)
            .find(|pair| pair[0] == "config-epoch")
            .and_then(|pair| pair.get(1)?.parse().ok())
            .unwrap_or(0);
        let host = match host.contains(':') {
            true => format!("[{host}]"),
            false => host,
        };
        Ok(Some((epoch, format!("{host}:{port}"))))
    }

    fn error(&self, message: String) -> Error {
        // A failover settles on its own: asking again may succeed.
        Error::backend_transient(&self.name(), "find the master", message)
    }
}

/// The master a Sentinel-managed server sends its requests to. Every new
/// connection asks the sentinels first (as redis-py's Sentinel pool does):
/// an old master that restarts answers as a master, empty, until the
/// sentinels turn it into a replica, and a client that only remembered it
/// would grant locks there. Pooled connections keep going to the master
/// they reach until it fails or steps down, or the sentinels, asked at
/// most [`RECHECK`] ago, name another.
pub(crate) struct Discovery {
    sentinels: Sentinels,
    connect_timeout: Duration,
    current: Mutex<Option<Arc<Node>>>,
    /// When the sentinels were last asked (or are being asked).
    asked_at: Mutex<Option<Instant>>,
}

impl Discovery {
    pub(crate) fn new(sentinels: Sentinels, connect_timeout: Duration) -> Discovery {
        Discovery {
            sentinels,
            connect_timeout,
            current: Mutex::new(None),
            asked_at: Mutex::new(None),
        }
    }

    /// The master the sentinels name now (blocking; asking none after
    /// `give_up_at`). The same one as before is the same [`Node`], so
    /// connections to it stay pooled.
    pub(crate) fn master(&self, give_up_at: Option<Instant>) -> Result<Arc<Node>> {
        *self.asked_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let found = self.sentinels.resolve(self.connect_timeout, give_up_at)?;
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = current.as_ref() {
            if known.address == found.address && known.fence_base == found.fence_base {
                return Ok(known.clone());
            }
        }
        let node = Arc::new(found);
        *current = Some(node.clone());
        Ok(node)
    }

    /// Forgets `node` as the master (it failed, or answered as a replica):
    /// its pooled connections are closed instead of reused.
    pub(crate) fn forget(&self, node: &Arc<Node>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current
            .as_ref()
            .is_some_and(|known| Arc::ptr_eq(known, node))
        {
            *current = None;
        }
    }

    /// Whether the sentinels were last asked over [`RECHECK`] ago.
    pub(crate) fn recheck_due(&self) -> bool {
        let asked_at = self.asked_at.lock().unwrap_or_else(|e| e.into_inner());
        asked_at.is_none_or(|at| at.elapsed() >= RECHECK)
    }

    /// Whether a pooled connection to `node` may be used: it is the
    /// master, and the sentinels still say so if they were last asked over
    /// [`RECHECK`] ago (blocking then). Sentinels that do not answer leave
    /// it in use: it answered a moment ago.
    pub(crate) fn still_master(&self, node: &Arc<Node>, give_up_at: Option<Instant>) -> bool {
        if !self.is_current(node) {
            return false;
        }
        if !self.recheck_due() {
            return true;
        }
        *self.asked_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        // Whatever the new master says to its ROLE check (slow right after
        // its promotion, unreachable from here), once the sentinels name
        // another, this one must get no more requests: it may still take
        // itself for the master, and grant what the new one grants too.
        match self.sentinels.named(self.connect_timeout, give_up_at) {
            Ok((epoch, address)) => address == node.address && fence_base(epoch) == node.fence_base,
            Err(_) => true,
        }
    }

    /// Whether `node` is still the master as far as this process knows.
    pub(crate) fn is_current(&self, node: &Arc<Node>) -> bool {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        current
            .as_ref()
            .is_some_and(|known| Arc::ptr_eq(known, node))
    }
}
