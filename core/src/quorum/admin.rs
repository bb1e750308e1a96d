//! Operator tools for a quorum lock: each node's view of a name
//! ([`inspect`]), and the break-glass removal of its holders on every node
//! ([`force_release`]). Like dsync's ForceUnlock, they speak to each node
//! directly, so a node that is down is reported, not waited for.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::DEFAULT_CONNECT_TIMEOUT;
use crate::redis::{check_name, server, Route};

/// What one node says about a name, from [`inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeState {
    /// The node's URL, as given.
    pub node: String,
    /// The write holder's grant on this node, if any.
    pub writer: Option<Grant>,
    /// Live read grants on this node.
    pub readers: Vec<Grant>,
    /// Whether a waiting writer's mark keeps new readers out.
    pub writer_waiting: bool,
    /// Why the node could not be asked (its other fields are then empty).
    pub error: Option<String>,
}

/// One grant on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The attempt's uid that holds it.
    pub holder: String,
    /// How long it lasts on this node without another refresh.
    pub expires_in: Duration,
}

impl NodeState {
    /// Whether this node has a live grant of the name.
    pub fn held(&self) -> bool {
        self.writer.is_some() || !self.readers.is_empty()
    }
}

/// Each node's view of `name`: its write and read grants and a waiting
/// writer's mark. Writes nothing. A node that cannot be asked has
/// [`NodeState::error`] set.
///
/// # Errors
/// [`Error::Config`] for a bad name or URL, or fewer than one URL.
pub fn inspect<S: AsRef<str>>(urls: &[S], name: &str) -> Result<Vec<NodeState>> {
    let nodes = nodes(urls, name)?;
    Ok(nodes
        .iter()
        .map(|(url, route)| match node_state(route, name) {
            Ok(state) => NodeState {
                node: url.clone(),
                ..state
            },
            Err(e) => NodeState {
                node: url.clone(),
                writer: None,
                readers: Vec::new(),
                writer_waiting: false,
                error: Some(e.to_string()),
            },
        })
        .collect())
}

/// Removes every grant of `name`, write and read, and a waiting writer's
/// mark, on every node; returns on how many nodes something was removed.
/// The nodes' fencing counters stay, so the next write grant still gets a
/// larger token; the former holders lose quorum at their next refresh.
///
/// # Errors
/// [`Error::Config`] for a bad name or URL; [`Error::Backend`] if a node
/// could not be reached (the others were cleared all the same).
pub fn force_release<S: AsRef<str>>(urls: &[S], name: &str) -> Result<u32> {
    let keys = keys(name);
    let mut cleared = 0;
    let mut unreachable = None;
    for (_, route) in nodes(urls, name)? {
        let removed = route.run("force_release", crate::redis::COMMAND_TIMEOUT, |conn| {
            redis::cmd("DEL").arg(&keys[..]).query::<u32>(conn)
        });
        match removed {
            Ok(0) => {}
            Ok(_) => cleared += 1,
            Err(e) => unreachable = Some(e),
        }
    }
    match unreachable {
        Some(e) => Err(e),
        None => Ok(cleared),
    }
}

fn nodes<S: AsRef<str>>(urls: &[S], name: &str) -> Result<Vec<(String, Route)>> {
    check_name(name)?;
    if urls.is_empty() {
        return Err(Error::config("a quorum needs at least one node URL"));
    }
    urls.iter()
        .map(|url| {
            let url = url.as_ref();
            Ok((
                url.to_owned(),
                Route::new(server(url, DEFAULT_CONNECT_TIMEOUT)?),
            ))
        })
        .collect()
}

/// The name's keys on a node: writer, readers, waiting mark, as
/// `quorum/node.rs` names them (the node-wide fence counter is not one).
fn keys(name: &str) -> [String; 3] {
    let base = format!("lockyard:{{{name}}}:rw");
    [
        format!("{base}:writer"),
        format!("{base}:readers"),
        format!("{base}:waiting"),
    ]
}

/// TIME, the writer and its PTTL, the readers with their deadlines, and
/// whether a waiting mark exists.
type NodeReply = ((u64, u64), Option<String>, i64, Vec<(String, u64)>, bool);

fn node_state(route: &Route, name: &str) -> Result<NodeState> {
    let [writer, readers, waiting] = keys(name);
    let (time, holder, writer_ms, reader_grants, waiting): NodeReply =
        route.run("inspect", crate::redis::COMMAND_TIMEOUT, |conn| {
            redis::pipe()
                .cmd("TIME")
                .cmd("GET")
                .arg(&writer)
                .cmd("PTTL")
                .arg(&writer)
                .cmd("ZRANGE")
                .arg(&readers)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .cmd("EXISTS")
                .arg(&waiting)
                .query(conn)
        })?;
    let now_ms = time.0 * 1000 + time.1 / 1000;
    Ok(NodeState {
        node: String::new(),
        writer: holder.map(|holder| Grant {
            holder,
            expires_in: Duration::from_millis(writer_ms.max(0) as u64),
        }),
        readers: reader_grants
            .into_iter()
            .filter(|(_, deadline)| *deadline > now_ms)
            .map(|(holder, deadline)| Grant {
                holder,
                expires_in: Duration::from_millis(deadline - now_ms),
            })
            .collect(),
        writer_waiting: waiting,
        error: None,
    })
}
