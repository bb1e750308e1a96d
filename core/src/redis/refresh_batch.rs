//! Refreshes that fall due together go out together: the refreshes of
//! held slots that reach one node within a few milliseconds of each other
//! travel in one pipeline, one round trip for up to [`MOST_IN_ONE`] of
//! them. Held locks' refreshes fall due on a grid shared by the whole
//! process (see `hold::on_the_grid`), so a process holding ten thousand
//! locks sends a handful of pipelines per refresh interval, not ten
//! thousand requests.
//!
//! A refresh the pipeline does not settle (a Cluster redirect, a replica's
//! refusal, a node that failed or went silent) is sent again on its own
//! along its route, which follows redirects and failovers: batching only
//! ever saves round trips, it decides nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{ServerErrorKind, Value};
use tokio::sync::oneshot;

use super::route::Route;
use super::scripts::SCRIPTS;
use super::server::{Channel, Server};
use super::slots::Slots;

/// How long a pipeline waits for more refreshes once one arrived: it
/// leaves when a wait this long brought none, or after [`LONGEST_WAIT`].
const QUIET: Duration = Duration::from_millis(1);
const LONGEST_WAIT: Duration = Duration::from_millis(20);
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

/// One refresh waiting for its pipeline, and where its answer goes: the
/// script's reply, or None to send it on its own.
struct Request {
    slots: Arc<Slots>,
    token: String,
    refresher: String,
    answer: oneshot::Sender<Option<Vec<i64>>>,
}

/// The refreshes gathering for one node's next pipeline.
struct Gathering {
    server: Arc<Server>,
    requests: Vec<Request>,
}

/// This process's gatherings. Never held while taking another lock, and
/// held across `fork` (see `runtime::held_across_fork`).
struct Table {
    pid: u32,
    gatherings: Vec<Gathering>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The table, locked for `fork` (see `runtime::held_across_fork`).
pub(crate) fn lock_for_fork() -> impl std::any::Any {
    table()
}

/// `token`'s refresh by `refresher`, sent in the next pipeline to the
/// node its route leads to now: the script's reply, or None when the
/// pipeline did not settle it and it should be sent on its own. Runs on
/// lockyard's runtime.
pub(crate) async fn refresh(slots: &Arc<Slots>, token: &str, refresher: &str) -> Option<Vec<i64>> {
    let server = slots.route.server();
    let (answer, answered) = oneshot::channel();
    let request = Request {
        slots: slots.clone(),
        token: token.to_owned(),
        refresher: refresher.to_owned(),
        answer,
    };
    let first = {
        let mut guard = table();
        let pid = std::process::id();
        // A forked child's refreshes are its own: the parent's gatherings
        // (and the tasks that send them) stay with the parent. Leaked, not
        // dropped: their senders' drops belong to the parent.
        if guard.as_ref().is_some_and(|table| table.pid != pid) {
            std::mem::forget(guard.take());
        }
        let table = guard.get_or_insert_with(|| Table {
            pid,
            gatherings: Vec::new(),
        });
        match table
            .gatherings
            .iter_mut()
            .find(|gathering| Arc::ptr_eq(&gathering.server, &server))
        {
            Some(gathering) => {
                gathering.requests.push(request);
                false
            }
            None => {
                table.gatherings.push(Gathering {
                    server: server.clone(),
                    requests: vec![request],
                });
                true
            }
        }
    };
    if first {
        drop(tokio::spawn(gather_and_send(server)));
    }
    answered.await.ok().flatten()
}

/// Waits until refreshes stop arriving for `server`, then sends them all.
async fn gather_and_send(server: Arc<Server>) {
    let started = Instant::now();
    let mut gathered = 0;
    loop {
        tokio::time::sleep(QUIET).await;
        let now_gathered = waiting_for(&server);
        if now_gathered == gathered
            || now_gathered >= MOST_IN_ONE
            || started.elapsed() >= LONGEST_WAIT
        {
            break;
        }
        gathered = now_gathered;
    }
    let mut requests = take_gathering(&server);
    while !requests.is_empty() {
        let rest = requests.split_off(requests.len().min(MOST_IN_ONE));
        let replies = pipelined(&server, &requests).await;
        for (request, renewed) in requests.into_iter().zip(replies) {
            // Its holder may have let go meanwhile: nobody reads the answer.
            let _ = request.answer.send(renewed);
        }
        requests = rest;
    }
}

fn waiting_for(server: &Arc<Server>) -> usize {
    table()
        .as_ref()
        .and_then(|table| {
            table
                .gatherings
                .iter()
                .find(|gathering| Arc::ptr_eq(&gathering.server, server))
        })
        .map_or(0, |gathering| gathering.requests.len())
}

fn take_gathering(server: &Arc<Server>) -> Vec<Request> {
    let mut guard = table();
    let Some(table) = guard.as_mut() else {
        return Vec::new();
    };
    match table
        .gatherings
        .iter()
        .position(|gathering| Arc::ptr_eq(&gathering.server, server))
    {
        Some(at) => table.gatherings.swap_remove(at).requests,
        None => Vec::new(),
    }
}

/// One refresh to send: whose slot, which token, by which refresher.
pub(crate) trait Refresh {
    fn slots(&self) -> &Slots;
    fn token(&self) -> &str;
    fn refresher(&self) -> &str;
}

impl Refresh for Request {
    fn slots(&self) -> &Slots {
        &self.slots
    }
    fn token(&self) -> &str {
        &self.token
    }
    fn refresher(&self) -> &str {
        &self.refresher
    }
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
