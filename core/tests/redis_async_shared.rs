//! Async waiters share their connections: one BLPOP listens for many
//! waiters of a runtime, and their scripts go over one multiplexed
//! connection. What this must never cost: a waiter that misses its
//! handoff, two holders, a wait slower than alone, a key left behind. And
//! where the shared listener dies, waiters listen alone as before.

mod support;
#[path = "support/waiters.rs"]
mod waiters;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{eventually, RedisServer};
use waiters::{blocked_in_blpop, lock_at};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Only the fence (and tombstones of dropped acquires) is left of `name`.
fn assert_nothing_left(server: &RedisServer, name: &str) {
    let (tag, fence) = (format!("{{{name}}}"), format!("lockyard:{{{name}}}:fence"));
    eventually(MS(2000), "nothing held or queued", || {
        server
            .keys()
            .iter()
            .filter(|key| key.contains(&tag))
            .all(|key| *key == fence || key.contains(":gone:"))
    });
}

/// `count` tasks wait on `name`, each taking the lock once and holding it
/// a moment; returns the order they got it in (by task number) once all
/// are queued, with the check that no two ever overlapped.
async fn contend(server: &RedisServer, url: &str, name: &str, count: u32) -> (Vec<u32>, usize) {
    let holder = lock_at(url, name);
    let held = holder.acquire_async(None).await.unwrap();
    let inside = Arc::new(AtomicU32::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for number in 0..count {
        let (lock, inside, order) = (lock_at(url, name), inside.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock
                .acquire_async(Some(Duration::from_secs(60)))
                .await
                .unwrap();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            order.lock().unwrap().push(number);
            tokio::task::yield_now().await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.release_async().await.unwrap();
        }));
        // Queued one after another, so that the order is known.
        tokio::time::sleep(MS(2)).await;
    }
    tokio::time::sleep(MS(300)).await;
    let listening = blocked_in_blpop(server);
    held.release_async().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("every waiter gets the lock")
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    (order, listening)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_waiters_share_a_few_connections_and_keep_their_order() {
    let server = RedisServer::start();
    let before = server.clients();
    let (order, listening) = contend(&server, &server.url(), "shared", 300).await;
    assert_eq!(
        order,
        (0..300).collect::<Vec<_>>(),
        "served in arrival order"
    );
    // 64 waiters per BLPOP: five listeners, where there were 300.
    assert!(
        (1..=8).contains(&listening),
        "{listening} connections in BLPOP for 300 waiters"
    );
    let after = server.clients();
    assert!(
        after <= before + 16 + 8,
        "{after} clients for 300 waiters ({before} before)"
    );
    assert_nothing_left(&server, "shared");
}

#[tokio::test(flavor = "current_thread")]
async fn a_waiter_joining_a_blpop_already_out_hears_its_handoff_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    // A blocking call first: this process learns the server is no Cluster,
    // so that the waiters of both locks share one BLPOP.
    let probe = lock_at(&url, "probe");
    tokio::task::spawn_blocking(move || drop(probe.try_acquire().unwrap()))
        .await
        .unwrap();
    let (held_a, held_b) = (lock_at(&url, "a"), lock_at(&url, "b"));
    let guard_a = held_a.acquire_async(None).await.unwrap();
    let guard_b = held_b.acquire_async(None).await.unwrap();
    let first = tokio::spawn({
        let lock = lock_at(&url, "a");
        async move {
            lock.acquire_async(Some(Duration::from_secs(10)))
                .await
                .map(drop)
        }
    });
    tokio::time::sleep(MS(200)).await;
    let second = tokio::spawn({
        let lock = lock_at(&url, "b");
        async move {
            let guard = lock
                .acquire_async(Some(Duration::from_secs(10)))
                .await
                .unwrap();
            let got = Instant::now();
            guard.release_async().await.unwrap();
            got
        }
    });
    // The second waiter's list joined the first's BLPOP: one BLPOP for both.
    tokio::time::sleep(MS(100)).await;
    assert_eq!(blocked_in_blpop(&server), 1, "one BLPOP for both waiters");
    let released = Instant::now();
    guard_b.release_async().await.unwrap();
    let got = second.await.unwrap();
    // Alone, a waiter missing from the BLPOP would hear only at its next
    // recheck, up to half a second later.
    assert!(
        got - released < MS(100),
        "the handoff took {:?}",
        got - released
    );
    guard_a.release_async().await.unwrap();
    first.await.unwrap().unwrap();
    for name in ["a", "b"] {
        assert_nothing_left(&server, name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_whose_listener_is_killed_listen_alone_and_all_get_the_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = lock_at(&url, "killed");
    let held = holder.acquire_async(None).await.unwrap();
    let got = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (lock, got) = (lock_at(&url, "killed"), got.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock
                .acquire_async(Some(Duration::from_secs(30)))
                .await
                .unwrap();
            got.fetch_add(1, Ordering::SeqCst);
            guard.release_async().await.unwrap();
        }));
    }
    tokio::time::sleep(MS(300)).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut server.raw().unwrap())
        .unwrap();
    assert!(killed >= 1);
    tokio::time::sleep(MS(100)).await;
    let started = Instant::now();
    held.release_async().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every waiter gets the lock")
            .unwrap();
    }
    assert_eq!(got.load(Ordering::SeqCst), 40);
    // Each handoff is a round trip or a recheck (half a second) at worst.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_nothing_left(&server, "killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_client_command_shares_too_and_is_served_in_order() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("limited")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-client")
        .query(&mut server.raw().unwrap())
        .unwrap();
    let url = server.url().replace("redis://", "redis://limited:secret@");
    let (order, _) = contend(&server, &url, "limited", 30).await;
    assert_eq!(
        order,
        (0..30).collect::<Vec<_>>(),
        "served in arrival order"
    );
    assert_nothing_left(&server, "limited");
}

#[tokio::test(flavor = "current_thread")]
async fn waiters_cancelled_while_their_listener_pops_leave_nothing_and_the_lock_moves_on() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = lock_at(&url, "cancelled");
    for round in 0..40u64 {
        let held = holder.acquire_async(None).await.unwrap();
        let mut waiters = Vec::new();
        for _ in 0..5 {
            let lock = lock_at(&url, "cancelled");
            waiters.push(tokio::spawn(async move {
                lock.acquire_async(Some(Duration::from_secs(10)))
                    .await
                    .map(drop)
            }));
        }
        tokio::time::sleep(MS(20)).await;
        let releasing = held.release_async();
        // Cut at every moment around the handoff: before, during, after.
        let cut = tokio::time::sleep(Duration::from_micros(round * 97 % 1500));
        let (released, ()) = tokio::join!(releasing, cut);
        released.unwrap();
        waiters[0].abort();
        waiters[2].abort();
        for waiter in waiters {
            let _ = waiter.await;
        }
        // Whatever was handed to a cancelled waiter came back.
        let again = tokio::time::timeout(MS(3000), holder.acquire_async(None))
            .await
            .expect("the lock moved on")
            .unwrap();
        again.release_async().await.unwrap();
    }
    let list = || -> String {
        let mut raw = server.raw().unwrap();
        redis::cmd("CLIENT").arg("LIST").query(&mut raw).unwrap()
    };
    let started = Instant::now();
    while blocked_in_blpop(&server) > 0 {
        assert!(started.elapsed() < MS(3000), "a BLPOP is left: {}", list());
        tokio::time::sleep(MS(10)).await;
    }
    assert_nothing_left(&server, "cancelled");
}
