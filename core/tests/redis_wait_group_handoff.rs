//! A WaitGroup slot handed to another process: the adder takes it, a worker
//! adopts its token and frees it. Two groups on one server stand for the two
//! processes (each refreshes only what it took or adopted).

mod support;

use std::time::{Duration, Instant};

use lockyard::redis::WaitGroup;
use lockyard::Error;
use support::{eventually, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;
const TTL: Duration = Duration::from_millis(600);

fn group(server: &RedisServer, name: &str, limit: u32) -> WaitGroup {
    WaitGroup::builder(server.url(), name, limit)
        .ttl(TTL)
        .build()
        .unwrap()
}

/// How long the slot of `token` stays counted, polled every 20 ms.
fn held_for(observer: &WaitGroup, limit: Duration) -> Duration {
    let started = Instant::now();
    while observer.count().unwrap() > 0 {
        assert!(started.elapsed() < limit, "still held after {limit:?}");
        std::thread::sleep(MS(20));
    }
    started.elapsed()
}

#[test]
fn a_dropped_group_leaves_its_added_slots_to_run_out_after_the_ttl() {
    let server = RedisServer::start();
    let observer = group(&server, "left", 2);
    let adder = group(&server, "left", 2);
    let token = adder.add(None, &|| false).unwrap();
    drop(adder);
    assert_eq!(observer.count().unwrap(), 1, "freed by the drop");
    let held = held_for(&observer, MS(2000));
    assert!(held >= MS(400), "freed early: {held:?}");
    assert!(!observer.done(&token).unwrap(), "ran out already");
    assert_eq!(server.keys(), ["lockyard:{left}:fence"]);
}

#[test]
fn an_adopted_slot_outlives_its_adder_until_done() {
    let server = RedisServer::start();
    let adder = group(&server, "handoff", 1);
    let worker = group(&server, "handoff", 1);
    let token = adder.add(None, &|| false).unwrap();
    let fence = adder.fencing_token(&token).unwrap();
    assert!(worker.adopt(&token).unwrap());
    assert_eq!(worker.fencing_token(&token), Some(fence));
    drop(adder);
    std::thread::sleep(TTL * 3);
    worker.check_health(&token).unwrap();
    let other = group(&server, "handoff", 1);
    assert!(
        matches!(
            other.add(Some(Duration::ZERO), &|| false),
            Err(Error::Timeout { .. })
        ),
        "one slot too many while the worker runs"
    );
    assert!(worker.done(&token).unwrap());
    assert_eq!(other.count().unwrap(), 0);
    assert!(!worker.healthy(&token));
    assert_eq!(server.keys(), ["lockyard:{handoff}:fence"]);
}

#[test]
fn adopting_a_slot_that_is_done_or_ran_out_is_false() {
    let server = RedisServer::start();
    let adder = group(&server, "gone", 2);
    let worker = group(&server, "gone", 2);
    let done = adder.add(None, &|| false).unwrap();
    assert!(adder.done(&done).unwrap());
    assert!(!worker.adopt(&done).unwrap());
    let ran_out = adder.add(None, &|| false).unwrap();
    drop(adder);
    held_for(&worker, MS(2000));
    assert!(!worker.adopt(&ran_out).unwrap());
    assert!(!worker.adopt("not-a-token").unwrap());
    assert!(!worker.healthy(&ran_out));
    assert!(matches!(
        worker.check_health(&ran_out),
        Err(Error::NotLocked(_))
    ));
    assert_eq!(server.keys(), ["lockyard:{gone}:fence"]);
}

#[test]
fn the_adder_stops_refreshing_a_slot_adopted_elsewhere() {
    let server = RedisServer::start();
    let adder = group(&server, "moved", 2);
    let token = adder.add(None, &|| false).unwrap();
    let worker = group(&server, "moved", 2);
    assert!(worker.adopt(&token).unwrap());
    // The worker dies without done: only its refreshes kept the slot alive.
    drop(worker);
    let held = held_for(&adder, MS(2000));
    assert!(held >= MS(400), "freed early: {held:?}");
    assert!(
        !adder.healthy(&token),
        "the adder still counts it as its own"
    );
    assert!(matches!(
        adder.check_health(&token),
        Err(Error::LockUnhealthy { .. })
    ));
    assert_eq!(server.keys(), ["lockyard:{moved}:fence"]);
}

#[test]
fn done_from_the_adder_frees_an_adopted_slot() {
    let server = RedisServer::start();
    let adder = group(&server, "either", 2);
    let worker = group(&server, "either", 2);
    let token = adder.add(None, &|| false).unwrap();
    assert!(worker.adopt(&token).unwrap());
    assert!(adder.done(&token).unwrap());
    assert_eq!(worker.count().unwrap(), 0);
    eventually(MS(2000), "the adopter notices", || !worker.healthy(&token));
    assert_eq!(server.keys(), ["lockyard:{either}:fence"]);
}

#[test]
fn a_block_still_frees_its_slot_when_it_ends() {
    let server = RedisServer::start();
    let group = group(&server, "block", 1);
    let token = group.enter(None, &|| false).unwrap();
    assert!(group.leave(&token).unwrap());
    let slot = group.acquire(Some(Duration::ZERO)).unwrap();
    drop(slot);
    assert_eq!(group.count().unwrap(), 0);
}
