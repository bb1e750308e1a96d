//! Waiters that share their connections. A waiting task listens on its
//! wake-up list; alone, that takes a connection blocked in BLPOP per
//! waiter, and each connection's buffers cost more than the whole rest
//! of a wait. Here one BLPOP waits on the lists of up to
//! [`KEYS_PER_LISTENER`] waiters of one runtime, and passes each message
//! popped to its waiter. A waiter joining a BLPOP already out wakes it
//! with a marker pushed onto the listener's own list, which every BLPOP
//! names last, and it is sent again with the new list. (Not CLIENT
//! UNBLOCK: aimed at a BLPOP that a `CLIENT PAUSE … WRITE` holds back, as
//! a failover does, it crashes redis-server 7.0; a push is a write like
//! any other and waits out the pause.)
//!
//! A message popped for a waiter gone meanwhile is dropped, as one lost
//! with a connection is: the grant it announced is still in the grants
//! hash, where the waiter's give-up returns it, or its next attempt claims
//! it. A listener that fails for any reason leaves its waiters to listen
//! alone for the rest of their wait, as they did before there were
//! listeners: the shared path is never the only one.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};
use tokio::sync::{oneshot, Notify};

use super::super::sentinel::Node;
use super::{Server, COMMAND_TIMEOUT};
use crate::identity::random_hex;

/// Wake-up lists one BLPOP waits on at most: every BLPOP sent names all
/// of them again, so the server's work per handoff grows with it.
const KEYS_PER_LISTENER: usize = 64;
/// Longest wait of one BLPOP: how long a listener nobody uses any more
/// lingers (the next waiter finds it ready), and, with
/// [`COMMAND_TIMEOUT`], how soon a connection gone silent is noticed.
const SLICE: Duration = Duration::from_secs(1);
/// How long a marker outlives a listener that ended before popping it.
const MARKER_TTL: Duration = Duration::from_secs(2);
/// How long a marker may go unanswered before the listener looks whether
/// its runtime has given up on that connection (see `push_marker`).
const MARKER_PATIENCE: Duration = Duration::from_secs(1);

/// The listeners of one server in this process.
#[derive(Default)]
pub(crate) struct Wakes {
    /// This process's id, and its listeners by runtime and group: a
    /// forked child starts with none.
    listeners: Mutex<(u32, ByGroup)>,
    /// A BLPOP on lists of different locks was refused (CROSSSLOT: a
    /// Cluster this process took for a single server): only lists of
    /// one lock share a BLPOP from now on.
    by_lock: AtomicBool,
}

/// Which waiters may share a BLPOP: those of one runtime (its
/// connections are driven there) and, in a Cluster, of one lock (one
/// BLPOP reaches one slot).
type Group = (tokio::runtime::Id, Option<Box<str>>);

type ByGroup = HashMap<Group, Vec<Arc<Listener>>>;

/// Identifies one waiter's place in a listener, so that a waiter leaving
/// late never removes a newer waiter on the same list.
static NEXT_PLACE: AtomicU64 = AtomicU64::new(0);

struct Listener {
    group: Group,
    /// The list a joining waiter's marker goes to: under the lock's hash
    /// tag where the group is one lock's, so that one BLPOP names both.
    marker: Box<str>,
    state: Mutex<State>,
    /// A waiter joined while a BLPOP was out (see [`State::unblock`]).
    joined: Notify,
}

#[derive(Default)]
struct State {
    /// Each waiting list's waiter: its place and where its message goes.
    waiting: HashMap<Box<str>, (u64, oneshot::Sender<String>)>,
    /// A BLPOP is out, with the lists waiting when it was sent.
    out: bool,
    /// A list joined since that BLPOP was sent: it must be woken.
    unblock: bool,
    /// The listener ended or is ending: nobody joins it any more.
    ended: bool,
}

/// A waiter's place in a listener; leaving it (drop) frees it.
pub(crate) struct Ear {
    listener: Arc<Listener>,
    list: Box<str>,
    place: u64,
    heard: Option<oneshot::Receiver<String>>,
}

/// What a waiter heard while it listened.
pub(crate) enum Heard {
    Message(String),
    /// Nothing before the time it gave.
    Nothing,
    /// The listener ended: the waiter must listen alone.
    Deaf,
}

impl Ear {
    /// The message on this waiter's list, or [`Heard::Nothing`] by
    /// `until`. A message that came while the waiter was not listening
    /// (between two attempts) waits for it here, as it would in its list.
    pub(crate) async fn hear(&mut self, until: Instant) -> Heard {
        let Some(heard) = self.heard.as_mut() else {
            return Heard::Deaf;
        };
        match tokio::time::timeout_at(until.into(), heard).await {
            Ok(Ok(message)) => {
                self.heard = None;
                Heard::Message(message)
            }
            Ok(Err(_)) => {
                self.heard = None;
                Heard::Deaf
            }
            Err(_) => Heard::Nothing,
        }
    }
}

impl Drop for Ear {
    fn drop(&mut self) {
        let mut state = self.listener.state();
        if state
            .waiting
            .get(&self.list)
            .is_some_and(|(place, _)| *place == self.place)
        {
            state.waiting.remove(&self.list);
        }
    }
}

impl Server {
    /// A place for the waiter on wake-up list `list` of the lock whose
    /// keys begin with `lock`, in a listener of the calling task's
    /// runtime; None where waiters cannot share one (the caller then
    /// listens alone): another waiter of this process is on the same list.
    pub(crate) fn ear(self: &Arc<Self>, list: &str, lock: &str) -> Option<Ear> {
        let wakes = &self.wakes;
        let runtime = tokio::runtime::Handle::try_current().ok()?.id();
        let by_lock = wakes.by_lock.load(Ordering::Relaxed) || !self.outside_cluster();
        let group = (runtime, by_lock.then(|| lock.into()));
        let mut listeners = wakes.listeners.lock().unwrap_or_else(|e| e.into_inner());
        let pid = crate::pid::current();
        if listeners.0 != pid {
            // The parent's listeners run on its runtimes, which have no
            // thread here: dropping them would wake nothing.
            std::mem::forget(std::mem::replace(&mut *listeners, (pid, HashMap::new())));
        }
        let group_listeners = listeners.1.entry(group.clone()).or_default();
        if group_listeners
            .iter()
            .any(|l| l.state().waiting.contains_key(list))
        {
            return None;
        }
        let place = NEXT_PLACE.fetch_add(1, Ordering::Relaxed);
        let (tell, heard) = oneshot::channel();
        let mut tell = Some(tell);
        let found = group_listeners
            .iter()
            .find(|listener| listener.join(list, place, &mut tell))
            .cloned();
        let (listener, made) = match found {
            Some(listener) => (listener, false),
            None => {
                let marker = match &group.1 {
                    Some(lock) => format!("{lock}wake:listener-{}", random_hex(8)),
                    // In a hash tag of its own, as a lock's keys are: an ACL
                    // for `lockyard:{*` allows it.
                    None => format!("lockyard:{{listener-{}}}", random_hex(8)),
                };
                let listener = Arc::new(Listener {
                    group,
                    marker: marker.into(),
                    state: Mutex::default(),
                    joined: Notify::new(),
                });
                listener.join(list, place, &mut tell);
                group_listeners.push(listener.clone());
                (listener, true)
            }
        };
        drop(listeners);
        if made {
            // Spawned outside the lock: a runtime shutting down drops the
            // task at once, and its `Ending` takes the lock.
            tokio::spawn(listener.clone().run(self.clone()));
        }
        Some(Ear {
            listener,
            list: list.into(),
            place,
            heard: Some(heard),
        })
    }

    /// Whether this server is known to be outside any Cluster, so that
    /// the lists of all its locks may share a BLPOP.
    fn outside_cluster(&self) -> bool {
        self.follows_sentinels() || self.peers.get().is_some_and(Vec::is_empty)
    }

    fn forget_listener(&self, listener: &Arc<Listener>) {
        let mut listeners = self
            .wakes
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if listeners.0 != crate::pid::current() {
            return;
        }
        if let Some(group) = listeners.1.get_mut(&listener.group) {
            group.retain(|other| !Arc::ptr_eq(other, listener));
            if group.is_empty() {
                listeners.1.remove(&listener.group);
            }
        }
    }
}

/// Ends a listener however its task ends (a failure, its runtime shutting
/// down, even before it first ran): its waiters are told (they listen
/// alone), nobody joins it.
struct Ending {
    listener: Arc<Listener>,
    server: Arc<Server>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let waiting = {
            let mut state = self.listener.state();
            state.ended = true;
            std::mem::take(&mut state.waiting)
        };
        // Dropped outside the lock: each drop wakes a waiter.
        drop(waiting);
        self.server.forget_listener(&self.listener);
    }
}

/// A marker on its way; it may outlive the BLPOP it was pushed for.
type Push = Pin<Box<dyn Future<Output = RedisResult<()>> + Send>>;

impl Listener {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the waiter on `list` if there is room (`tell` is then taken).
    fn join(&self, list: &str, place: u64, tell: &mut Option<oneshot::Sender<String>>) -> bool {
        let mut state = self.state();
        if state.ended || state.waiting.len() >= KEYS_PER_LISTENER {
            return false;
        }
        let tell = tell.take().expect("one waiter joins once");
        state.waiting.insert(list.into(), (place, tell));
        if state.out && !state.unblock {
            state.unblock = true;
            self.joined.notify_one();
        }
        true
    }

    /// The listener's task. The guard is made before the task first
    /// runs: a task dropped unpolled (its runtime shutting down) drops it.
    fn run(self: Arc<Self>, server: Arc<Server>) -> impl Future<Output = ()> + Send {
        let ending = Ending {
            listener: self,
            server,
        };
        async move {
            let (listener, server) = (&ending.listener, &ending.server);
            if let Err(e) = listener.serve(server).await {
                // Lists of different locks in one BLPOP: a Cluster. A
                // marker outside every lock's keys: an ACL for lock keys
                // only. Either way, listeners of one lock from now on.
                let kind = e.kind();
                let global = listener.group.1.is_none();
                if kind == ErrorKind::Server(ServerErrorKind::CrossSlot)
                    || (global && kind == ErrorKind::Server(ServerErrorKind::NoPerm))
                {
                    server.wakes.by_lock.store(true, Ordering::Relaxed);
                }
                log::debug!("waiters on {} listen alone: {e}", server.name);
            }
            drop(ending);
        }
    }

    /// Sends BLPOPs until nobody waits, then gives its connection back
    /// to the pool.
    async fn serve(&self, server: &Arc<Server>) -> RedisResult<()> {
        let (node, listening, _) = server
            .caller_connection(true)
            .await
            .map_err(connect_error)?;
        let mut pushing = None;
        // Markers pushed and not popped yet (one may land after the BLPOP
        // that would have popped it): deleted when the listener ends.
        let mut unpopped = 0u32;
        loop {
            let lists: Vec<Box<str>> = {
                let mut state = self.state();
                if state.waiting.is_empty() {
                    state.ended = true;
                    break;
                }
                (state.out, state.unblock) = (true, false);
                state.waiting.keys().cloned().collect()
            };
            let popped = self
                .listen(
                    server,
                    &node,
                    &listening,
                    &lists,
                    (&mut pushing, &mut unpopped),
                )
                .await;
            self.state().out = false;
            match popped? {
                // The marker's wake-up: the next BLPOP names the new list.
                Some((list, _)) if *list == *self.marker => {
                    unpopped = unpopped.saturating_sub(1);
                }
                Some((list, message)) => {
                    let waiter = self.state().waiting.remove(list.as_str());
                    if let Some((_, tell)) = waiter {
                        // A waiter gone meanwhile: see the module's comment.
                        let _ = tell.send(message);
                    }
                }
                None => {}
            }
        }
        server.keep_caller_connection(node, listening);
        // A push not sent yet never is; one sent is ahead of the DEL on
        // the same connection (a push's failure ended the listener).
        drop(pushing);
        if unpopped > 0 {
            let (_, mut control, ..) = server
                .shared_connection(false)
                .await
                .map_err(connect_error)?;
            let mut delete = redis::cmd("DEL");
            delete.arg(&*self.marker);
            within(MARKER_PATIENCE, delete.query_async::<()>(&mut control)).await?;
        }
        Ok(())
    }

    /// One BLPOP on `lists` and the marker (last: a waiter's message goes
    /// first). Meanwhile a waiter joining has a marker pushed, and a push
    /// still unanswered from an earlier BLPOP is waited for: one that
    /// fails (see [`Listener::push_marker`]) ends the listener.
    async fn listen(
        &self,
        server: &Arc<Server>,
        node: &Arc<Node>,
        listening: &MultiplexedConnection,
        lists: &[Box<str>],
        (pushing, pushed): (&mut Option<Push>, &mut u32),
    ) -> RedisResult<Option<(String, String)>> {
        let mut blpop = redis::cmd("BLPOP");
        for list in lists {
            blpop.arg(&**list);
        }
        blpop.arg(&*self.marker).arg(SLICE.as_secs());
        let mut listening = listening.clone();
        let mut popped = pin!(within(
            SLICE + COMMAND_TIMEOUT,
            blpop.query_async(&mut listening)
        ));
        let mut joined = pin!(self.joined.notified());
        poll_fn(|cx| {
            if let Poll::Ready(popped) = popped.as_mut().poll(cx) {
                return Poll::Ready(popped);
            }
            loop {
                if let Some(push) = pushing.as_mut() {
                    match push.as_mut().poll(cx) {
                        Poll::Ready(Ok(())) => *pushing = None,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        // Joins meanwhile need no marker of their own:
                        // this one wakes the BLPOP, and the next has them.
                        Poll::Pending => return Poll::Pending,
                    }
                }
                if joined.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                joined.set(self.joined.notified());
                // A wake-up meant for an earlier BLPOP: this one has the list.
                if self.state().unblock {
                    *pushing = Some(self.push_marker(server, node));
                    *pushed += 1;
                }
            }
        })
        .await
    }

    /// A marker pushed over the runtime's shared connection as it is now,
    /// if it reaches `node`: behind Sentinel, a marker pushed on a new
    /// master would never wake a BLPOP on the old one. Unanswered for
    /// [`MARKER_PATIENCE`], it is pushed again if the runtime has given up
    /// on that connection meanwhile (another call timed out on it), and
    /// waited for otherwise: a push fails only as any call does, at
    /// [`COMMAND_TIMEOUT`], and then retires its connection.
    fn push_marker(&self, server: &Arc<Server>, node: &Arc<Node>) -> Push {
        let (server, node) = (server.clone(), node.clone());
        let mut mark = redis::pipe();
        mark.atomic()
            .rpush(&*self.marker, "joined")
            .ignore()
            .pexpire(&*self.marker, MARKER_TTL.as_millis() as i64)
            .ignore();
        Box::pin(async move {
            let give_up_at = Instant::now() + COMMAND_TIMEOUT;
            'connection: loop {
                let (reached, mut control, shared, _) = server
                    .shared_connection(false)
                    .await
                    .map_err(connect_error)?;
                if !Arc::ptr_eq(&reached, &node) {
                    return Err(RedisError::from((ErrorKind::Io, "the master changed")));
                }
                let mut push = pin!(mark.query_async::<()>(&mut control));
                loop {
                    let waited = tokio::time::timeout(MARKER_PATIENCE, push.as_mut()).await;
                    match waited {
                        Ok(pushed) => {
                            if pushed.is_err() {
                                server.forget_shared(&shared);
                            }
                            return pushed;
                        }
                        Err(_) if Instant::now() >= give_up_at => {
                            server.forget_shared(&shared);
                            return Err(RedisError::from((ErrorKind::Io, "no answer in time")));
                        }
                        Err(_) if !server.is_shared(&shared) => continue 'connection,
                        Err(_) => {}
                    }
                }
            }
        })
    }
}

fn connect_error(e: crate::Error) -> RedisError {
    RedisError::from((ErrorKind::Io, "connect", e.to_string()))
}

/// `request`'s answer, or a timeout error after `limit`.
async fn within<T>(
    limit: Duration,
    request: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(limit, request)
        .await
        .unwrap_or_else(|_| Err(RedisError::from((ErrorKind::Io, "no answer in time"))))
}
