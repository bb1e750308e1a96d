//! The Redis WaitGroup (counting semaphore) against a real redis-server.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lockyard::redis::WaitGroup;
use lockyard::Error;
use support::{eventually, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn group(server: &RedisServer, name: &str, limit: u32) -> WaitGroup {
    WaitGroup::builder(server.url(), name, limit)
        .build()
        .unwrap()
}

#[test]
fn concurrency_reaches_the_limit_and_never_exceeds_it() {
    let server = RedisServer::start();
    let group = Arc::new(group(&server, "quota", 3));
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (group, inside, most) = (group.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                for _ in 0..15 {
                    let _slot = group.acquire(None).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(MS(3));
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(most.load(Ordering::SeqCst), 3);
    assert_eq!(group.count().unwrap(), 0);
}

#[test]
fn every_worker_gets_a_fair_share() {
    let server = RedisServer::start();
    let group = Arc::new(group(&server, "fair", 3));
    let start = Arc::new(Barrier::new(8));
    let until = Instant::now() + Duration::from_secs(2);
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (group, start) = (group.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut held = 0u32;
                while Instant::now() < until {
                    let _slot = group.acquire(None).unwrap();
                    std::thread::sleep(MS(5));
                    held += 1;
                }
                held
            })
        })
        .collect();
    let counts: Vec<u32> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let fair = counts.iter().sum::<u32>() as f64 / counts.len() as f64;
    for count in &counts {
        assert!(f64::from(*count) >= fair / 2.0, "starved: {counts:?}");
    }
}

#[test]
fn done_works_from_another_process_and_the_holder_learns_of_it() {
    let server = RedisServer::start();
    let here = WaitGroup::builder(server.url(), "shared", 2)
        .ttl(MS(900))
        .build()
        .unwrap();
    let elsewhere = group(&server, "shared", 2);
    let token = here.add(None, &|| false).unwrap();
    assert_eq!(elsewhere.count().unwrap(), 1);
    assert!(elsewhere.done(&token).unwrap());
    assert!(
        !elsewhere.done(&token).unwrap(),
        "a second done finds nothing"
    );
    assert_eq!(here.count().unwrap(), 0);
    eventually(Duration::from_secs(2), "the holder notices", || {
        !here.healthy(&token)
    });
    assert!(matches!(
        here.check_health(&token),
        Err(Error::LockUnhealthy { .. })
    ));
}

#[test]
fn done_with_an_unknown_or_malformed_token_is_false_and_frees_nothing() {
    let server = RedisServer::start();
    let group = group(&server, "strict", 2);
    let slot = group.acquire(None).unwrap();
    for token in [
        "",
        "not-a-uuid",
        "00000000-0000-4000-8000-000000000000",
        "\u{0}\n*",
    ] {
        assert!(!group.done(token).unwrap(), "{token:?}");
    }
    assert_eq!(group.count().unwrap(), 1);
    slot.check_health().unwrap();
}

#[test]
fn add_times_out_while_full_and_leaves_no_trace() {
    let server = RedisServer::start();
    let group = group(&server, "full", 1);
    let slot = group.acquire(None).unwrap();
    let started = Instant::now();
    let err = group.add(Some(MS(200)), &|| false).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(started.elapsed() < MS(800));
    drop(slot);
    assert_eq!(server.keys(), ["lockyard:{full}:fence"]);
}

#[test]
fn wait_returns_when_the_last_slot_is_freed() {
    let server = RedisServer::start();
    let group = Arc::new(group(&server, "drain", 3));
    let tokens: Vec<String> = (0..3)
        .map(|_| group.add(None, &|| false).unwrap())
        .collect();
    assert!(!group.wait(Some(MS(100))).unwrap(), "slots are still held");
    let waiter = {
        let group = group.clone();
        std::thread::spawn(move || {
            assert!(group.wait(None).unwrap());
            Instant::now()
        })
    };
    std::thread::sleep(MS(100));
    for token in &tokens[..2] {
        group.done(token).unwrap();
    }
    std::thread::sleep(MS(100));
    assert!(!waiter.is_finished(), "wait returned while a slot was held");
    let freed_at = Instant::now();
    group.done(&tokens[2]).unwrap();
    let woke_at = waiter.join().unwrap();
    assert!(
        woke_at - freed_at < MS(100),
        "woken late: {:?}",
        woke_at - freed_at
    );
    assert_eq!(server.keys(), ["lockyard:{drain}:fence"]);
}

#[test]
fn a_crashed_holders_slot_comes_free_after_its_ttl() {
    let server = RedisServer::start();
    let group = group(&server, "crash", 1);
    // What a holder that died right after its grant leaves behind.
    let mut raw = server.raw().unwrap();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let deadline = secs * 1000 + micros / 1000 + 600;
    redis::cmd("ZADD")
        .arg("lockyard:{crash}:holders")
        .arg(deadline)
        .arg("dead")
        .query::<()>(&mut raw)
        .unwrap();
    let started = Instant::now();
    assert!(group.add(Some(Duration::ZERO), &|| false).is_err());
    let slot = group.acquire(Some(Duration::from_secs(3))).unwrap();
    assert!(
        started.elapsed() >= MS(450),
        "free too early: {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < MS(1500),
        "free too late: {:?}",
        started.elapsed()
    );
    slot.check_health().unwrap();
}

#[test]
fn slots_lost_to_a_redis_restart_turn_unhealthy() {
    let server = RedisServer::start();
    let group = WaitGroup::builder(server.url(), "amnesia", 2)
        .ttl(MS(900))
        .build()
        .unwrap();
    let slot = group.acquire(None).unwrap();
    let fence = slot.fencing_token();
    redis::cmd("FLUSHALL")
        .query::<()>(&mut server.raw().unwrap())
        .unwrap();
    eventually(Duration::from_secs(2), "the refresher notices", || {
        !slot.healthy()
    });
    let next = group.acquire(None).unwrap();
    assert!(next.fencing_token() > fence);
}

#[test]
fn bad_input_is_rejected_before_touching_redis() {
    let server = RedisServer::start();
    let url = server.url();
    let cases = [
        ("limit 0", WaitGroup::builder(&url, "x", 0).build()),
        ("empty name", WaitGroup::builder(&url, "", 3).build()),
        (
            "zero ttl",
            WaitGroup::builder(&url, "x", 3).ttl(Duration::ZERO).build(),
        ),
        ("bad url", WaitGroup::builder("redis://:x", "x", 3).build()),
    ];
    for (case, result) in cases {
        assert!(matches!(result, Err(Error::Config(_))), "{case}");
    }
    assert!(server.keys().is_empty());
}

/// The limit is the group's, not each client's: it is recorded on the
/// server with the first slot, and a client built with another limit is
/// refused while any slot is held, naming both.
#[test]
fn a_client_with_another_limit_is_refused_while_slots_are_held() {
    let server = RedisServer::start();
    let two = group(&server, "recorded", 2);
    let five = group(&server, "recorded", 5);
    let first = two.acquire(Some(MS(0))).unwrap();
    let refused = five.acquire(Some(MS(0))).err();
    match &refused {
        Some(Error::Config(message)) => {
            assert!(message.contains('2') && message.contains('5'), "{message}");
        }
        other => panic!("expected a ConfigError, got {other:?}"),
    }
    let second = two.acquire(Some(MS(0))).unwrap();
    assert!(matches!(five.acquire(Some(MS(0))), Err(Error::Config(_))));
    assert_eq!(two.count().unwrap(), 2, "a third slot was granted");
    drop((first, second));
    // Once no slot is held, the next client's limit is the group's.
    let _slot = five.acquire(Some(MS(0))).unwrap();
    assert!(matches!(two.acquire(Some(MS(0))), Err(Error::Config(_))));
}

/// A Lock and a WaitGroup of one name would share the same keys (a held
/// Lock would take one of the group's slots): the second one is refused.
#[test]
fn a_lock_and_a_wait_group_of_one_name_refuse_each_other() {
    let server = RedisServer::start();
    let lock = lockyard::redis::Lock::builder(server.url(), "both")
        .build()
        .unwrap();
    let slots = group(&server, "both", 3);
    let held = lock.try_acquire().unwrap().expect("free at first");
    assert!(matches!(slots.acquire(Some(MS(0))), Err(Error::Config(_))));
    drop(held);
    let slot = slots.acquire(Some(MS(0))).unwrap();
    assert!(matches!(lock.try_acquire(), Err(Error::Config(_))));
    drop(slot);
    assert!(lock.try_acquire().unwrap().is_some());
}
