//! Refreshes sent together: the refreshes due at one moment (the refresh
//! schedule's records that fell due, a session's grants at its renewal)
//! go to each node in pipelines, one round trip for up to [`MOST_IN_ONE`]
//! of them instead of one each.
//!
//! A refresh the pipeline does not settle (a Cluster redirect, a replica's
//! refusal, a node that failed or went silent) is for its caller to send
//! again on its own along its route, which follows redirects and
//! failovers: batching only ever saves round trips, it decides nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{ServerErrorKind, Value};

use super::route::Route;
use super::scripts::SCRIPTS;
use super::server::{Channel, Server};
use super::slots::Slots;

/// Most refreshes in one pipeline: under a MiB to write, and a few
/// milliseconds of the server's time.
pub(crate) const MOST_IN_ONE: usize = 1000;

/// Refresh exchanges with a server so far: pipelines and lone refreshes.
static EXCHANGES: AtomicU64 = AtomicU64::new(0);

/// How many refresh exchanges (a pipeline of refreshes, or a refresh sent
/// on its own) this process has had with Redis servers: what batching
/// saves, for benchmarks and tests.
pub fn refresh_exchanges() -> u64 {
    EXCHANGES.load(Ordering::Relaxed)
}

pub(crate) fn count_exchange() {
    EXCHANGES.fetch_add(1, Ordering::Relaxed);
}

/// One refresh to send: whose slot, which token, by which refresher.
pub(crate) trait Refresh {
    fn slots(&self) -> &Slots;
    fn token(&self) -> &str;
    fn refresher(&self) -> &str;
}

/// Refreshes grouped by node.
pub(crate) type ByNode<R> = Vec<(Arc<Server>, Vec<R>)>;

/// `refreshes` grouped by the node their route leads to now.
pub(crate) fn by_node<R: Refresh>(refreshes: impl IntoIterator<Item = R>) -> ByNode<R> {
    let mut nodes: ByNode<R> = Vec::new();
    for refresh in refreshes {
        let server = refresh.slots().route.server();
        match nodes
            .iter_mut()
            .find(|(node, _)| Arc::ptr_eq(node, &server))
        {
            Some((_, on_node)) => on_node.push(refresh),
            None => nodes.push((server, vec![refresh])),
        }
    }
    nodes
}

/// Sends `refreshes` (at most [`MOST_IN_ONE`]) to `server` in one
/// pipeline: each one's script reply, in order, or None where the pipeline
/// did not settle it (it should then be sent alone).
pub(crate) async fn pipelined<R: Refresh>(
    server: &Server,
    refreshes: &[R],
) -> Vec<Option<Vec<i64>>> {
    let Some(limit) = refreshes
        .iter()
        .map(|refresh| refresh.slots().lease.background_timeout())
        .min()
    else {
        return Vec::new();
    };
    let deadline = Instant::now() + limit;
    let replies = server
        .call(
            Channel::Background,
            "refresh",
            deadline,
            |conn, fence_base| pipeline(conn, fence_base, refreshes),
        )
        .await;
    let mut replies = match replies {
        Ok(replies) => {
            // A seed that answers tells its Cluster's other nodes, which
            // its routes need once the seed itself fails over.
            let mut seeds: Vec<&Route> = Vec::new();
            for refresh in refreshes {
                let route = &refresh.slots().route;
                if !seeds.iter().any(|seen| seen.same_seed(route)) {
                    seeds.push(route);
                }
            }
            for route in seeds {
                route.learn_peers_in_background(deadline).await;
            }
            replies.into_iter()
        }
        Err(_) => {
            log::debug!(
                "a pipeline of {} refreshes to {} failed: each is sent alone",
                refreshes.len(),
                server.name
            );
            Vec::new().into_iter()
        }
    };
    refreshes
        .iter()
        .map(|_| {
            replies
                .next()
                .and_then(|reply| redis::from_redis_value::<Vec<i64>>(reply).ok())
        })
        .collect()
}

/// The refreshes of `refreshes` in one pipeline on `conn`: their
/// replies, a server error each where the script failed (a redirect,
/// WRONGTYPE). A server that lost its scripts (restarted, SCRIPT FLUSH)
/// gets the script and the refreshes it refused once more.
async fn pipeline<R: Refresh>(
    mut conn: MultiplexedConnection,
    fence_base: u64,
    refreshes: &[R],
) -> redis::RedisResult<Vec<Value>> {
    let command = |refresh: &R| {
        refresh
            .slots()
            .refresh_command(fence_base, refresh.token(), refresh.refresher())
    };
    let mut pipe = redis::pipe();
    for refresh in refreshes {
        pipe.add_command(command(refresh));
    }
    count_exchange();
    let mut replies = conn.req_packed_commands(&pipe, 0, refreshes.len()).await?;
    let unknown: Vec<usize> = replies
        .iter()
        .enumerate()
        .filter(|(_, reply)| {
            matches!(reply, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
        })
        .map(|(at, _)| at)
        .collect();
    if unknown.is_empty() {
        return Ok(replies);
    }
    SCRIPTS.refresh.load_async(&mut conn).await?;
    let mut again = redis::pipe();
    for &at in &unknown {
        again.add_command(command(&refreshes[at]));
    }
    count_exchange();
    let answers = conn.req_packed_commands(&again, 0, unknown.len()).await?;
    for (at, answer) in unknown.into_iter().zip(answers) {
        replies[at] = answer;
    }
    Ok(replies)
}
