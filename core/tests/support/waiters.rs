//! Helpers of the tests of async waiters sharing connections (loaded by
//! `#[path]`: the Lock and tokio are not for every test binary).

// Each test binary uses some of these.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockyard::redis::Lock;

use super::support::RedisServer;

const MS: fn(u64) -> Duration = Duration::from_millis;

pub fn lock_at(url: &str, name: &str) -> Arc<Lock> {
    Arc::new(Lock::builder(url, name).build().unwrap())
}

/// Connections blocked in a BLPOP now.
pub fn blocked_in_blpop(server: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.raw().unwrap())
        .unwrap();
    list.lines()
        .filter(|line| line.contains("cmd=blpop"))
        .filter(|line| {
            let flags = line
                .split(' ')
                .find_map(|field| field.strip_prefix("flags="));
            flags.is_some_and(|flags| flags.contains('b'))
        })
        .count()
}

/// A blocking call on `url`: the process learns the server is no
/// Cluster, so that waiters of all locks share listeners (the state of
/// any process that made a blocking call or ran a renewal).
pub async fn learn_no_cluster(url: &str) {
    let probe = lock_at(url, "probe");
    tokio::task::spawn_blocking(move || drop(probe.try_acquire().unwrap()))
        .await
        .unwrap();
}

/// How many hold the lock, the last release, the worst gap after one.
#[derive(Default)]
pub struct Watch {
    pub inside: AtomicU32,
    pub released: Mutex<Option<Instant>>,
    pub worst_gap: Mutex<Duration>,
    pub gaps: Mutex<Vec<Duration>>,
}

impl Watch {
    pub fn entered(&self) {
        assert_eq!(self.inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
        if let Some(at) = *self.released.lock().unwrap() {
            let gap = at.elapsed();
            self.gaps.lock().unwrap().push(gap);
            let mut worst = self.worst_gap.lock().unwrap();
            *worst = (*worst).max(gap);
        }
    }

    pub fn leaving_first(&self) {
        *self.released.lock().unwrap() = Some(Instant::now());
    }

    pub fn leaving(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
        *self.released.lock().unwrap() = Some(Instant::now());
    }
}

/// `count` waiters queue for `name` behind a holder, each holding a
/// moment; returns the worst release-to-next-holder gap and how many
/// connections were blocked in BLPOP while all of them waited.
pub async fn queue_up(
    server: &RedisServer,
    url: &str,
    name: &str,
    count: usize,
) -> (Duration, usize) {
    let holder = lock_at(url, name);
    let held = holder.acquire_async(None).await.unwrap();
    let watch = Arc::new(Watch::default());
    let mut tasks = Vec::new();
    for _ in 0..count {
        let (lock, watch) = (lock_at(url, name), watch.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock
                .acquire_async(Some(Duration::from_secs(60)))
                .await
                .unwrap();
            watch.entered();
            tokio::time::sleep(MS(1)).await;
            watch.leaving();
            guard.release_async().await.unwrap();
        }));
        tokio::time::sleep(MS(2)).await;
    }
    tokio::time::sleep(MS(300)).await;
    let listening = blocked_in_blpop(server);
    *watch.released.lock().unwrap() = Some(Instant::now());
    held.release_async().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("every waiter gets the lock")
            .unwrap();
    }
    let worst = *watch.worst_gap.lock().unwrap();
    (worst, listening)
}

pub fn acl_user(server: &RedisServer, user: &str, keys: &str) -> String {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg(">secret")
        .arg(keys)
        .arg("&*")
        .arg("+@all")
        .query(&mut server.raw().unwrap())
        .unwrap();
    server
        .url()
        .replace("redis://", &format!("redis://{user}:secret@"))
}
