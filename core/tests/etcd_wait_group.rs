//! The etcd wait group against a real etcd member: the limit across
//! threads and groups, tokens freed and adopted from other groups (each
//! group keeps its own lease, so two groups stand for two processes), and
//! slots that outlive a dropped group until their ttl.

mod etcd_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_support::EtcdServer;
use lockyard::etcd::WaitGroup;
use lockyard::Error;

const TTL: Duration = Duration::from_secs(2);

fn group(server: &EtcdServer, name: &str, limit: u32) -> WaitGroup {
    WaitGroup::builder(server.url(), name, limit)
        .ttl(TTL)
        .build()
        .unwrap()
}

/// How long slots stay counted, polled every 50 ms, failing after `limit`.
fn held_for(observer: &WaitGroup, limit: Duration) -> Duration {
    let started = Instant::now();
    while observer.count().unwrap() > 0 {
        assert!(started.elapsed() < limit, "still held after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

#[test]
fn threads_never_hold_more_slots_than_the_limit() {
    let server = EtcdServer::start();
    let quota = Arc::new(group(&server, "quota", 3));
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..9)
        .map(|_| {
            let (quota, inside, most) = (quota.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                let mut tokens = Vec::new();
                for _ in 0..3 {
                    let slot = quota.acquire(Some(Duration::from_secs(60))).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    slot.check_health().unwrap();
                    tokens.push(slot.fencing_token());
                    std::thread::sleep(Duration::from_millis(30));
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
                tokens
            })
        })
        .collect();
    let mut tokens: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "over the limit, or never at it"
    );
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 27, "fencing tokens are unique");
    assert_eq!(quota.count().unwrap(), 0);
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn a_token_is_done_from_another_group_once() {
    let server = EtcdServer::start();
    let adder = group(&server, "jobs", 2);
    let worker = group(&server, "jobs", 2);
    let first = adder.add(None, &|| false).unwrap();
    let second = adder.add(None, &|| false).unwrap();
    assert_eq!(worker.count().unwrap(), 2);
    assert!(adder.fencing_token(&first).unwrap() < adder.fencing_token(&second).unwrap());
    let err = adder.add(Duration::ZERO, &|| false).unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(server.keys().len(), 2, "a failed try leaves no key");
    assert!(worker.done(&first).unwrap());
    assert!(!worker.done(&first).unwrap(), "done twice");
    assert!(!worker.done("not-a-token").unwrap());
    assert!(!worker.done("").unwrap());
    assert_eq!(adder.count().unwrap(), 1);
    assert!(adder.done(&second).unwrap());
    assert!(!adder.healthy(&second));
    assert!(matches!(
        adder.check_health(&second),
        Err(Error::NotLocked(_))
    ));
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn a_waiter_gets_the_slot_freed_by_done() {
    let server = EtcdServer::start();
    let quota = group(&server, "one", 1);
    let token = quota.add(None, &|| false).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let slot = quota.acquire(Some(Duration::from_secs(10))).unwrap();
            slot.fencing_token()
        });
        std::thread::sleep(Duration::from_millis(300));
        let freed = Instant::now();
        assert!(quota.done(&token).unwrap());
        let fence = waiter.join().unwrap();
        assert!(freed.elapsed() < Duration::from_secs(2), "woken late");
        assert!(fence > 0);
    });
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn an_adopted_slot_outlives_the_adder_and_has_one_adopter() {
    let server = EtcdServer::start();
    let observer = group(&server, "handoff", 2);
    let adder = group(&server, "handoff", 2);
    let worker = group(&server, "handoff", 2);
    let other = group(&server, "handoff", 2);
    let token = adder.add(None, &|| false).unwrap();
    let fence = adder.fencing_token(&token).unwrap();
    assert!(worker.adopt(&token).unwrap());
    assert!(worker.adopt(&token).unwrap(), "adopting again is a no-op");
    assert_eq!(worker.fencing_token(&token), Some(fence), "the fence stays");
    assert!(!other.adopt(&token).unwrap(), "a slot has one adopter");
    drop(adder);
    std::thread::sleep(TTL * 2);
    assert_eq!(observer.count().unwrap(), 1, "the worker keeps it alive");
    assert!(worker.healthy(&token));
    assert!(worker.done(&token).unwrap());
    assert_eq!(observer.count().unwrap(), 0);
    assert!(!worker.adopt(&token).unwrap(), "gone once done");
    assert!(!worker.adopt("nonsense").unwrap());
}

#[test]
fn a_dropped_group_leaves_added_slots_to_run_out_and_frees_its_blocks() {
    let server = EtcdServer::start();
    let observer = group(&server, "left", 3);
    let adder = group(&server, "left", 3);
    adder.add(None, &|| false).unwrap();
    adder.enter(None, &|| false).unwrap();
    drop(adder);
    assert_eq!(
        observer.count().unwrap(),
        1,
        "the block's slot is freed at once"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        observer.count().unwrap(),
        1,
        "an added slot is never freed early"
    );
    let took = held_for(&observer, Duration::from_secs(10));
    assert!(
        took + Duration::from_millis(500) >= TTL,
        "freed after {took:?}"
    );
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn wait_returns_once_no_slot_is_held() {
    let server = EtcdServer::start();
    let quota = group(&server, "drain", 2);
    assert!(
        quota.wait(Some(Duration::ZERO)).unwrap(),
        "idle at the start"
    );
    let a = quota.add(None, &|| false).unwrap();
    let b = quota.add(None, &|| false).unwrap();
    assert!(!quota.wait(Some(Duration::from_millis(300))).unwrap());
    let started = Instant::now();
    let err = quota
        .wait_interruptibly(None, &|| started.elapsed() > Duration::from_millis(200))
        .unwrap_err();
    assert!(matches!(err, Error::Interrupted(_)), "{err}");
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            quota.done(&a).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            quota.done(&b).unwrap();
        });
        let started = Instant::now();
        assert!(quota.wait(Some(Duration::from_secs(10))).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(400));
    });
}

#[test]
fn bad_options_are_config_errors() {
    let url = "etcd://127.0.0.1:1";
    for built in [
        WaitGroup::builder(url, "q", 0).build(),
        WaitGroup::builder(url, "", 1).build(),
        WaitGroup::builder(url, "q", 1).ttl(Duration::ZERO).build(),
        WaitGroup::builder(url, "q", 1)
            .ttl(Duration::from_secs(u64::MAX))
            .build(),
        WaitGroup::builder("redis://127.0.0.1:6379", "q", 1).build(),
        WaitGroup::builder("etcd://", "q", 1).build(),
    ] {
        assert!(matches!(built, Err(Error::Config(_))), "{:?}", built.err());
    }
}

#[test]
fn a_name_held_for_one_limit_is_refused_for_another_and_inspected_with_its_own() {
    let server = EtcdServer::start();
    let lock = lockyard::etcd::Lock::builder(server.url(), "mixed")
        .ttl(TTL)
        .build()
        .unwrap();
    let three = group(&server, "mixed", 3);
    let two = group(&server, "mixed", 2);
    let guard = lock.acquire(None).unwrap();
    let err = three.add(None, &|| false).unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("held as a lock")),
        "{err}"
    );
    assert_eq!(server.keys().len(), 1, "a refused entry leaves no key");
    drop(guard);
    let token = two.add(None, &|| false).unwrap();
    let err = three.add(Duration::ZERO, &|| false).unwrap_err();
    assert!(
        matches!(&err, Error::Config(m) if m.contains("limit 2")),
        "{err}"
    );
    let err = lock.acquire(Some(Duration::from_secs(1))).err().unwrap();
    assert!(matches!(err, Error::Config(_)), "{err}");
    let second = two.add(None, &|| false).unwrap();
    let state = lockyard::etcd::inspect(&server.url(), "mixed").unwrap();
    assert_eq!(
        (state.limit, state.holders.len(), state.waiters),
        (Some(2), 2, 0)
    );
    assert_eq!(
        lockyard::etcd::force_release(&server.url(), "mixed").unwrap(),
        2
    );
    assert!(!two.done(&token).unwrap() && !two.done(&second).unwrap());
    let third = three.add(None, &|| false).unwrap();
    assert!(three.done(&third).unwrap());
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}
