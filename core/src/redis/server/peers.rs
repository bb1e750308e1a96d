//! The other nodes of a server's Redis Cluster, learned once, so that a
//! route can still find its slot after the URL's own node failed over.

use std::time::Instant;

use redis::{ErrorKind, RedisResult, Value};

use super::{Caller, OnSignal, Server, COMMAND_TIMEOUT};

impl Server {
    /// Lock-free: every successful call asks it.
    fn knows_peers(&self) -> bool {
        self.peers.get().is_some()
    }

    /// Learns the other nodes of this server's Cluster (CLUSTER SLOTS;
    /// a server not in a Cluster refuses it) from the first call through it
    /// that succeeds, once per server and process. Best effort: a failure
    /// leaves it for the next call.
    pub(crate) fn learn_peers(&self) {
        if self.knows_peers() {
            return;
        }
        let asked = self.run(
            "cluster slots",
            COMMAND_TIMEOUT,
            &Caller::patient(),
            OnSignal::Report,
            |conn| Ok(redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(conn)),
        );
        if let Ok(slots) = asked {
            self.know_peers(slots);
        }
    }

    /// [`Server::learn_peers`] for background calls, before `deadline`.
    pub(crate) async fn learn_peers_in_background(&self, deadline: Instant) {
        if self.knows_peers() {
            return;
        }
        let asked = tokio::time::timeout_at(deadline.into(), async {
            let mut conn = self.background().await.ok()?;
            Some(
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async::<Value>(&mut conn)
                    .await,
            )
        })
        .await;
        if let Ok(Some(slots)) = asked {
            self.know_peers(slots);
        }
    }

    fn know_peers(&self, slots: RedisResult<Value>) {
        let learned = match slots {
            Ok(slots) => node_addresses(&slots, &self.name),
            // An error reply (cluster support disabled, no permission): the
            // server answers, and asking again would only cost a round trip.
            Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => Vec::new(),
            Err(_) => return,
        };
        // Two calls may learn at once; either list will do.
        let _ = self.peers.set(learned);
    }

    /// The `index`-th other node of this server's Cluster, if known.
    pub(crate) fn peer(&self, index: usize) -> Option<String> {
        self.peers.get()?.get(index).cloned()
    }
}

/// Every node (`host:port`, masters and replicas) in a CLUSTER SLOTS
/// reply but `own`.
fn node_addresses(slots: &Value, own: &str) -> Vec<String> {
    let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
    let mut nodes = Vec::new();
    let Value::Array(ranges) = slots else {
        return nodes;
    };
    for range in ranges {
        let Value::Array(items) = range else { continue };
        for node in items.iter().skip(2) {
            let Value::Array(node) = node else { continue };
            let (Some(host), Some(Value::Int(port))) = (node.first().and_then(text), node.get(1))
            else {
                continue;
            };
            let address = format!("{host}:{port}");
            if !host.is_empty() && address != own && !nodes.contains(&address) {
                nodes.push(address);
            }
        }
    }
    nodes
}
