//! For the GCS tests: a faithful in-process store (preconditions on every
//! write, generations that only grow, metageneration bumped by each
//! update) with fault injection, and a fake-gcs-server of our own.
#![allow(dead_code)]

pub mod http;
pub mod lands_late;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockyard::gcs::{
    Lock, LockBuilder, LockObject, Metadata, Reply, Store, StoreError, StoreFuture, Version,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Create,
    Get,
    Update,
    Delete,
}

#[derive(Clone, Debug)]
pub enum Fault {
    /// 503 or 429: not applied.
    Unavailable,
    /// A connection reset before the request arrived: not applied.
    Reset,
    /// Applied, but the reply is lost on the way back.
    LoseReply,
    /// Answers after this long.
    Slow(Duration),
    /// Applied at once, with the server's clock of that moment in `Date`,
    /// but the reply takes this long to come back.
    LateReply(Duration),
    /// No fault: lets a later fault in the queue hit a later request.
    Pass,
    /// Refused for good (HTTP 403, as for a principal without
    /// `storage.objects.delete` or an object under a hold): not applied.
    Refused,
    /// Answered; right after, a PATCH the holder sent earlier, whose
    /// request timed out while it was still on its way, arrives and lands:
    /// the metageneration moves on, with the nonce that holder's write of
    /// it carries.
    ThenTheHoldersLateWriteLands,
}

#[derive(Default)]
struct State {
    object: Option<LockObject>,
    last_generation: i64,
    faults: VecDeque<(Op, Fault)>,
}

#[derive(Default)]
pub struct FaithfulStore {
    state: Mutex<State>,
    /// Seconds the server's clock is ahead of ours.
    skew: Mutex<f64>,
    pub creates: AtomicU64,
    pub gets: AtomicU64,
    pub updates: AtomicU64,
    pub deletes: AtomicU64,
}

impl FaithfulStore {
    pub fn new() -> Arc<FaithfulStore> {
        Arc::new(FaithfulStore::default())
    }

    pub fn inject(&self, op: Op, fault: Fault, times: usize) {
        let mut state = self.state.lock().unwrap();
        for _ in 0..times {
            state.faults.push_back((op, fault.clone()));
        }
    }

    pub fn set_skew(&self, seconds: f64) {
        *self.skew.lock().unwrap() = seconds;
    }

    pub fn now(&self) -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            + *self.skew.lock().unwrap()
    }

    pub fn object(&self) -> Option<LockObject> {
        self.state.lock().unwrap().object.clone()
    }

    /// Another holder's object, as a crashed process would leave it.
    pub fn put(&self, identity: &str, expires_in: f64) -> LockObject {
        let mut state = self.state.lock().unwrap();
        state.last_generation += 1;
        let object = LockObject {
            version: Version {
                generation: state.last_generation,
                metageneration: 1,
            },
            identity: Some(identity.into()),
            expires_at: Some(self.now() + expires_in),
            nonce: None,
        };
        state.object = Some(object.clone());
        object
    }

    /// Someone else's metadata PATCH (a person or a script editing the
    /// object, no lock of ours): bumps the metageneration, applies
    /// `change` to the rest.
    pub fn patch_by_someone_else(&self, change: impl FnOnce(&mut LockObject)) -> LockObject {
        let mut state = self.state.lock().unwrap();
        let object = state.object.as_mut().expect("an object to patch");
        object.version.metageneration += 1;
        change(object);
        object.clone()
    }

    pub fn remove(&self) {
        self.state.lock().unwrap().object = None;
    }

    pub fn writes(&self) -> u64 {
        self.creates.load(Ordering::SeqCst)
            + self.updates.load(Ordering::SeqCst)
            + self.deletes.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> u64 {
        self.writes() + self.gets.load(Ordering::SeqCst)
    }

    fn fault(&self, op: Op) -> Option<Fault> {
        let mut state = self.state.lock().unwrap();
        let at = state.faults.iter().position(|(o, _)| *o == op)?;
        state.faults.remove(at).map(|(_, fault)| fault)
    }

    fn counter(&self, op: Op) -> &AtomicU64 {
        match op {
            Op::Create => &self.creates,
            Op::Get => &self.gets,
            Op::Update => &self.updates,
            Op::Delete => &self.deletes,
        }
    }

    fn run<'a, T: Send + 'a>(
        &'a self,
        op: Op,
        apply: impl FnOnce(&mut State, f64) -> Result<T, StoreError> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            self.counter(op).fetch_add(1, Ordering::SeqCst);
            let fault = self.fault(op);
            match &fault {
                Some(Fault::Unavailable) => {
                    return Err(StoreError::Transient("HTTP 503 Service Unavailable".into()))
                }
                Some(Fault::Reset) => {
                    return Err(StoreError::Transient("connection reset by peer".into()))
                }
                Some(Fault::Refused) => {
                    return Err(StoreError::Permanent("HTTP 403 Forbidden".into()))
                }
                Some(Fault::Slow(wait)) => tokio::time::sleep(*wait).await,
                _ => {}
            }
            let now = self.now();
            let value = {
                let mut state = self.state.lock().unwrap();
                let value = apply(&mut state, now)?;
                if let Some(Fault::ThenTheHoldersLateWriteLands) = fault {
                    the_holders_next_write_lands(&mut state, now);
                }
                value
            };
            match fault {
                Some(Fault::LoseReply) => {
                    return Err(StoreError::Transient(
                        "connection reset by peer (after the write)".into(),
                    ))
                }
                Some(Fault::LateReply(delay)) => tokio::time::sleep(delay).await,
                _ => {}
            }
            Ok(Reply {
                value,
                server_time: Some(now.floor()),
            })
        })
    }
}

/// A write of the holder of the object's current revision, as lockyard
/// makes it: the same token, naming the metageneration the write creates.
fn the_holders_next_write_lands(state: &mut State, now: f64) {
    let object = state.object.as_mut().expect("an object to write over");
    let nonce = object.nonce.as_deref().expect("a revision with a nonce");
    let (token, _) = nonce.rsplit_once('.').expect("token.metageneration");
    object.version.metageneration += 1;
    object.nonce = Some(format!("{token}.{}", object.version.metageneration));
    object.expires_at = Some(now + 1.5);
}

fn matches(object: &Option<LockObject>, expected: Version) -> Result<(), StoreError> {
    match object {
        None => Err(StoreError::NotFound),
        Some(o) if o.version != expected => Err(StoreError::PreconditionFailed),
        Some(_) => Ok(()),
    }
}

impl Store for FaithfulStore {
    fn describe(&self) -> String {
        "gs://faithful/lock".into()
    }

    fn create(&self, metadata: Metadata) -> StoreFuture<'_, LockObject> {
        self.run(Op::Create, move |state, _| {
            if state.object.is_some() {
                return Err(StoreError::PreconditionFailed);
            }
            state.last_generation += 1;
            let object = LockObject {
                version: Version {
                    generation: state.last_generation,
                    metageneration: 1,
                },
                identity: Some(metadata.identity),
                expires_at: Some(metadata.expires_at),
                nonce: Some(metadata.nonce),
            };
            state.object = Some(object.clone());
            Ok(object)
        })
    }

    fn get(&self) -> StoreFuture<'_, Option<LockObject>> {
        self.run(Op::Get, |state, _| Ok(state.object.clone()))
    }

    fn update(&self, expected: Version, metadata: Metadata) -> StoreFuture<'_, LockObject> {
        self.run(Op::Update, move |state, _| {
            matches(&state.object, expected)?;
            let object = state.object.as_mut().unwrap();
            object.version.metageneration += 1;
            object.identity = Some(metadata.identity);
            object.expires_at = Some(metadata.expires_at);
            object.nonce = Some(metadata.nonce);
            Ok(object.clone())
        })
    }

    fn delete(&self, expected: Version) -> StoreFuture<'_, ()> {
        self.run(Op::Delete, move |state, _| {
            matches(&state.object, expected)?;
            state.object = None;
            Ok(())
        })
    }
}

/// A lock named "lock" on `store`: ttl 1.5 s, backoff 20 to 100 ms.
pub fn builder(store: &Arc<FaithfulStore>) -> LockBuilder {
    Lock::builder("faithful", "lock")
        .store(store.clone())
        .ttl(Duration::from_millis(1500))
        .backoff_min(Duration::from_millis(20))
        .backoff_max(Duration::from_millis(100))
}
