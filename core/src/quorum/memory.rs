//! An in-memory lock node with injectable faults, for unit tests of the
//! algorithm and the fan-out: the same rules as the Lua scripts, plus a
//! switch to take the node down and a delay to make it slow.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::node::{Grant, NetLocker, Reply, Request};
use crate::error::Error;

#[derive(Default)]
struct Entry {
    writer: Option<(String, Instant)>,
    readers: HashMap<String, Instant>,
    waiting: Option<(String, Instant)>,
}

impl Entry {
    fn withdraw(&mut self, waiter: &str) {
        if self.waiting.as_ref().is_some_and(|(w, _)| w == waiter) {
            self.waiting = None;
        }
    }

    fn purge(&mut self, now: Instant) {
        self.readers.retain(|_, deadline| *deadline > now);
        if self.writer.as_ref().is_some_and(|(_, d)| *d <= now) {
            self.writer = None;
        }
        if self.waiting.as_ref().is_some_and(|(_, d)| *d <= now) {
            self.waiting = None;
        }
    }
}

#[derive(Default)]
struct Store {
    entries: HashMap<String, Entry>,
    /// One fencing counter for every name, as on a Redis node.
    fence: u64,
}

#[derive(Default)]
pub(crate) struct MemoryNode {
    name: String,
    store: Mutex<Store>,
    down: AtomicBool,
    delay_ms: AtomicU64,
}

impl MemoryNode {
    pub(crate) fn new(name: &str) -> Arc<MemoryNode> {
        Arc::new(MemoryNode {
            name: name.to_owned(),
            ..Default::default()
        })
    }

    /// A down node fails every request at once, like a refused connection.
    pub(crate) fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Every request waits this long before it is served.
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Starts the fencing values at `value`, like a node whose clock runs
    /// ahead of the others.
    pub(crate) fn set_fence(&self, value: u64) {
        self.store.lock().unwrap().fence = value;
    }

    /// Live grants of any mode on `resource`.
    pub(crate) fn grants(&self, resource: &str) -> usize {
        let mut store = self.store.lock().unwrap();
        let entry = store.entries.entry(resource.to_owned()).or_default();
        entry.purge(Instant::now());
        entry.readers.len() + usize::from(entry.writer.is_some())
    }

    fn serve<T: Send + 'static>(
        self: Arc<Self>,
        request: Arc<Request>,
        apply: impl FnOnce(&mut Entry, &mut u64, &Request, Instant) -> T + Send + 'static,
    ) -> Reply<T> {
        Box::pin(async move {
            let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if self.down.load(Ordering::SeqCst) {
                let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                return Err(Error::backend_failed(&self.name, "request", refused, true));
            }
            let mut store = self.store.lock().unwrap();
            let Store { entries, fence } = &mut *store;
            let entry = entries.entry(request.resource.clone()).or_default();
            let now = Instant::now();
            entry.purge(now);
            Ok(apply(entry, fence, &request, now))
        })
    }
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

impl NetLocker for MemoryNode {
    fn name(&self) -> &str {
        &self.name
    }

    fn lock(self: Arc<Self>, request: Arc<Request>) -> Reply<Grant> {
        self.serve(request, |entry, fence, r, now| {
            if entry.writer.is_some() || !entry.readers.is_empty() {
                entry.waiting = Some((r.waiter.clone(), now + ms(r.waiting_ms)));
                return Grant::No;
            }
            entry.writer = Some((r.uid.clone(), now + ms(r.ttl_ms)));
            entry.withdraw(&r.waiter);
            *fence += 1;
            Grant::Yes(*fence)
        })
    }

    fn rlock(self: Arc<Self>, request: Arc<Request>) -> Reply<Grant> {
        self.serve(request, |entry, _, r, now| {
            if entry.writer.is_some() || entry.waiting.is_some() {
                return Grant::No;
            }
            entry.readers.insert(r.uid.clone(), now + ms(r.ttl_ms));
            Grant::Yes(0)
        })
    }

    fn unlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.serve(request, |entry, _, r, _| {
            entry.withdraw(&r.waiter);
            let mine = entry.writer.as_ref().is_some_and(|(uid, _)| *uid == r.uid);
            if mine {
                entry.writer = None;
            }
            mine
        })
    }

    fn runlock(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.serve(request, |entry, _, r, _| {
            entry.readers.remove(&r.uid).is_some()
        })
    }

    fn refresh(self: Arc<Self>, request: Arc<Request>) -> Reply<bool> {
        self.serve(request, |entry, _, r, now| {
            let deadline = now + ms(r.ttl_ms);
            if let Some((uid, until)) = entry.writer.as_mut() {
                if *uid == r.uid {
                    *until = deadline;
                    return true;
                }
            }
            match entry.readers.get_mut(&r.uid) {
                Some(until) => {
                    *until = deadline;
                    true
                }
                None => false,
            }
        })
    }

    fn seal(self: Arc<Self>, request: Arc<Request>, token: u64) -> Reply<bool> {
        self.serve(request, move |entry, fence, r, _| {
            let mine = entry.writer.as_ref().is_some_and(|(uid, _)| *uid == r.uid);
            if mine {
                *fence = (*fence).max(token);
            }
            mine
        })
    }

    /// The restart guard lives in the Lua scripts; memory nodes never restart.
    fn adopt(self: Arc<Self>) -> Reply<bool> {
        Box::pin(async { Ok(true) })
    }
}
