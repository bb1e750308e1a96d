//! Where a server's requests go: one node for good, or whichever master
//! the sentinels name; and the pooled connection that remembers which.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, RedisResult, Value};

use super::super::sentinel::{Discovery, Node};
use super::Server;
use crate::error::{Error, Result};

/// Where requests go: one node for good, or the master the sentinels name.
pub(super) enum Target {
    Fixed(Arc<Node>),
    Sentinel(Arc<Discovery>),
}

/// A pooled connection and the node it reaches, whose fencing base the
/// scripts sent over it must use: a grant is fenced by the master it is
/// made on, whatever another thread learned about a failover meanwhile.
pub(crate) struct NodeConnection {
    pub(super) conn: Connection,
    pub(super) node: Arc<Node>,
    /// What the socket's read timeout was last set to.
    read_timeout: Option<Duration>,
}

impl NodeConnection {
    pub(super) fn new(conn: Connection, node: Arc<Node>) -> NodeConnection {
        NodeConnection {
            conn,
            node,
            read_timeout: None,
        }
    }

    pub(crate) fn fence_base(&self) -> u64 {
        self.node.fence_base
    }

    /// Most requests wait as long as the last did on this connection:
    /// the socket is told (a system call) only when that changes.
    pub(super) fn set_read_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        if self.read_timeout != Some(timeout) {
            // Forgotten first: if setting fails, the next request sets it.
            self.read_timeout = None;
            self.conn.set_read_timeout(Some(timeout))?;
            self.read_timeout = Some(timeout);
        }
        Ok(())
    }
}

impl ConnectionLike for NodeConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

impl Server {
    /// Whether requests go to whichever master the sentinels name.
    pub(crate) fn follows_sentinels(&self) -> bool {
        matches!(self.target, Target::Sentinel(_))
    }

    /// The node a new connection goes to (behind Sentinel, the master
    /// the sentinels name now).
    pub(super) fn node(&self, give_up_at: Option<Instant>) -> Result<Arc<Node>> {
        match &self.target {
            Target::Fixed(node) => Ok(node.clone()),
            Target::Sentinel(discovery) => discovery.master(give_up_at),
        }
    }

    /// [`Server::node`] for background calls: the sentinels are asked on
    /// the blocking pool, never on the runtime's only thread.
    pub(super) async fn node_in_background(&self) -> Result<Arc<Node>> {
        match &self.target {
            Target::Fixed(node) => Ok(node.clone()),
            Target::Sentinel(discovery) => {
                let discovery = discovery.clone();
                tokio::task::spawn_blocking(move || discovery.master(None))
                    .await
                    .map_err(|e| Error::backend(&self.name, "find the master", e))?
            }
        }
    }

    /// Whether a pooled connection to `node` may be used (behind Sentinel,
    /// see [`Discovery::still_master`]).
    pub(super) fn still_master(&self, node: &Arc<Node>, give_up_at: Option<Instant>) -> bool {
        match &self.target {
            Target::Fixed(_) => true,
            Target::Sentinel(discovery) => discovery.still_master(node, give_up_at),
        }
    }

    /// [`Server::still_master`] for background calls, on the blocking pool
    /// when the sentinels are to be asked.
    pub(super) async fn still_master_in_background(&self, node: &Arc<Node>) -> bool {
        match &self.target {
            Target::Fixed(_) => true,
            Target::Sentinel(discovery) if !discovery.recheck_due() => discovery.is_current(node),
            Target::Sentinel(discovery) => {
                let (discovery, node) = (discovery.clone(), node.clone());
                tokio::task::spawn_blocking(move || discovery.still_master(&node, None))
                    .await
                    .unwrap_or(true)
            }
        }
    }

    /// Whether `node` is where requests go now.
    pub(super) fn is_current(&self, node: &Arc<Node>) -> bool {
        match &self.target {
            Target::Fixed(_) => true,
            Target::Sentinel(discovery) => discovery.is_current(node),
        }
    }

    /// `node` failed or stepped down: behind Sentinel, its pooled
    /// connections are closed rather than reused, so the next request
    /// connects anew, after asking the sentinels. A fixed node stays.
    pub(super) fn forget(&self, node: &Arc<Node>) {
        if let Target::Sentinel(discovery) = &self.target {
            discovery.forget(node);
        }
    }
}
