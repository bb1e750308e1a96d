//! The operator tools (`inspect`, `force_release`) against a real redis-server.

mod support;

use std::time::Duration;

use lockyard::redis::{force_release, inspect, Lock, WaitGroup};
use support::{eventually, RedisServer};

#[test]
fn inspect_shows_holders_waiters_and_writes_nothing() {
    let server = RedisServer::start();
    let free = inspect(&server.url(), "deploy").unwrap();
    assert!(!free.held());
    assert_eq!((free.waiters, free.lock_delay, free.limit), (0, None, None));
    assert!(
        server.keys().is_empty(),
        "inspect wrote {:?}",
        server.keys()
    );

    let lock = Lock::builder(server.url(), "deploy")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let guard = lock.acquire(None).unwrap();
    let held = inspect(&server.url(), "deploy").unwrap();
    assert_eq!(held.holders.len(), 1);
    assert_eq!(held.holders[0].fencing_token, guard.fencing_token());
    assert_eq!(
        held.holders[0].holder.split('#').next(),
        Some(&*lock.identity())
    );
    assert!(held.holders[0].expires_in > Duration::from_secs(8));
    assert_eq!(held.limit, Some(1));
    drop(guard);
    assert!(!inspect(&server.url(), "deploy").unwrap().held());
}

#[test]
fn force_release_makes_the_holder_unhealthy_and_fences_keep_increasing() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(600);
    let holder = Lock::builder(server.url(), "deploy")
        .ttl(ttl)
        .build()
        .unwrap();
    let guard = holder.acquire(None).unwrap();
    let old_fence = guard.fencing_token();

    assert_eq!(force_release(&server.url(), "deploy").unwrap(), 1);
    // Its next refresh (every ttl/9) finds the grant gone.
    eventually(ttl, "the former holder turns unhealthy", || {
        !guard.healthy()
    });

    let next = Lock::builder(server.url(), "deploy").build().unwrap();
    let next_guard = next.try_acquire().unwrap().expect("the name is free");
    assert!(next_guard.fencing_token() > old_fence);
    assert!(!guard.release().unwrap(), "the old grant was gone");
    assert!(next_guard.healthy());
}

#[test]
fn force_release_admits_a_waiter_and_frees_every_slot() {
    let server = RedisServer::start();
    let group = WaitGroup::builder(server.url(), "quota", 2)
        .build()
        .unwrap();
    let _slots = [group.acquire(None).unwrap(), group.acquire(None).unwrap()];
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let group = WaitGroup::builder(url, "quota", 2).build().unwrap();
        group.add(Some(Duration::from_secs(5)), &|| false).is_ok()
    });
    eventually(Duration::from_secs(2), "the waiter queues", || {
        inspect(&server.url(), "quota").unwrap().waiters == 1
    });
    assert_eq!(force_release(&server.url(), "quota").unwrap(), 2);
    assert!(waiter.join().unwrap(), "the waiter was admitted");
}
