//! The algorithm against in-memory nodes with injected faults.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use super::memory::MemoryNode;
use super::node::NetLocker;
use super::RwLock;
use crate::error::Error;
use crate::wait::InTime;

const RESOURCE: &str = "shared";

fn nodes(n: usize) -> Vec<Arc<MemoryNode>> {
    (0..n)
        .map(|i| MemoryNode::new(&format!("mem{i}")))
        .collect()
}

fn lock_on(nodes: &[Arc<MemoryNode>], ttl: Duration) -> Arc<RwLock> {
    let dyn_nodes: Vec<Arc<dyn NetLocker>> = nodes
        .iter()
        .map(|n| n.clone() as Arc<dyn NetLocker>)
        .collect();
    let names: Vec<String> = dyn_nodes.iter().map(|n| n.name().to_owned()).collect();
    Arc::new(
        RwLock::builder(names, RESOURCE)
            .ttl(ttl)
            .build_on(dyn_nodes)
            .unwrap(),
    )
}

/// Waits up to 2 s for `condition`.
fn eventually(condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "condition never held"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn grants(nodes: &[Arc<MemoryNode>]) -> Vec<usize> {
    nodes.iter().map(|n| n.grants(RESOURCE)).collect()
}

/// Runs `f` on a new thread (a separate holder) and returns its result.
fn on_other_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    thread::spawn(f).join().unwrap()
}

#[test]
fn bad_node_lists_are_config_errors() {
    let cases: Vec<Vec<String>> = vec![
        vec![],
        (0..33)
            .map(|p| format!("redis://127.0.0.1:{}", 1000 + p))
            .collect(),
        vec![
            "redis://127.0.0.1:7001".into(),
            "redis://127.0.0.1:7001/0".into(),
        ],
        vec!["redis://127.0.0.1:7001".into(), "not a url".into()],
    ];
    for urls in cases {
        let err = RwLock::builder(urls.clone(), "x").build().err().unwrap();
        assert!(matches!(err, Error::Config(_)), "{urls:?}: {err}");
    }
    let err = RwLock::builder(["redis://127.0.0.1:7001"], "")
        .build()
        .err()
        .unwrap();
    assert!(matches!(err, Error::Config(_)));
}

#[test]
fn one_writer_or_many_readers() {
    let nodes = nodes(5);
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let writing = lock.write(Some(Duration::ZERO)).unwrap();
    let (l, z) = (lock.clone(), Some(Duration::ZERO));
    assert!(!on_other_thread(move || l
        .acquire_write_interruptibly(z, &|| false)
        .in_time()
        .unwrap()));
    let l = lock.clone();
    assert!(!on_other_thread(move || l
        .acquire_read_interruptibly(z, &|| false)
        .in_time()
        .unwrap()));
    assert!(writing.release().unwrap());
    eventually(|| grants(&nodes) == [0; 5]);

    let reading = lock.read(Some(Duration::ZERO)).unwrap();
    let l = lock.clone();
    assert!(on_other_thread(move || {
        let shared = l
            .acquire_read_interruptibly(z, &|| false)
            .in_time()
            .unwrap();
        l.release().unwrap();
        shared
    }));
    let l = lock.clone();
    assert!(!on_other_thread(move || l
        .acquire_write_interruptibly(z, &|| false)
        .in_time()
        .unwrap()));
    drop(reading);
    let l = lock.clone();
    assert!(on_other_thread(move || {
        let got = l
            .acquire_write_interruptibly(z, &|| false)
            .in_time()
            .unwrap();
        l.release().unwrap();
        got
    }));
}

#[test]
fn a_thread_cannot_hold_twice() {
    let lock = lock_on(&nodes(3), Duration::from_secs(30));
    let _reading = lock.read(None).unwrap();
    assert!(matches!(lock.write(None), Err(Error::AlreadyLocked(_))));
    assert!(matches!(lock.read(None), Err(Error::AlreadyLocked(_))));
    assert_eq!(lock.fencing_token().unwrap(), None);
}

#[test]
fn a_minority_of_nodes_down_changes_nothing() {
    let nodes = nodes(5);
    nodes[0].set_down(true);
    nodes[3].set_down(true);
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let guard = lock.write(Some(Duration::from_secs(1))).unwrap();
    assert!(guard.fencing_token().unwrap() > 0);
    guard.check_health().unwrap();
    assert!(guard.release().unwrap());
    drop(lock.read(Some(Duration::from_secs(1))).unwrap());
}

#[test]
fn a_majority_down_fails_naming_how_many_answered() {
    let nodes = nodes(5);
    for node in &nodes[..3] {
        node.set_down(true);
    }
    let lock = lock_on(&nodes, Duration::from_secs(30));
    // A try-once fails at once (well before a retry's backoff); a wait
    // retries until its timeout. (The try-once runs on lockyard's runtime
    // since the wait became async: a millisecond was too tight on a busy
    // machine.)
    for (timeout, within) in [(0, 100), (300, 1000)] {
        let started = Instant::now();
        let err = lock
            .write(Some(Duration::from_millis(timeout)))
            .err()
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(timeout));
        assert!(started.elapsed() < Duration::from_millis(within));
        match err {
            Error::Backend { message, .. } => {
                assert!(
                    message.contains("only 2 of 5 nodes answered, 3 needed"),
                    "{message}"
                );
                assert!(message.contains("connection refused"), "{message}");
            }
            other => panic!("expected a backend error, got {other}"),
        }
    }
    eventually(|| grants(&nodes) == [0; 5]);
}

#[test]
fn a_wait_without_timeout_outlasts_a_majority_down() {
    let nodes = nodes(3);
    nodes[0].set_down(true);
    nodes[1].set_down(true);
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let l = lock.clone();
    let waiter = std::thread::spawn(move || l.write(None).map(drop));
    std::thread::sleep(Duration::from_millis(300));
    nodes[0].set_down(false);
    nodes[1].set_down(false);
    let got = waiter.join().unwrap();
    assert!(got.is_ok(), "{got:?}");
}

#[test]
fn grants_that_arrive_after_the_attempt_gave_up_are_released() {
    let nodes = nodes(5);
    for node in &nodes[..3] {
        node.set_delay(Duration::from_millis(700));
    }
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let started = Instant::now();
    // Slow is not down: the caller's deadline ends the wait, as a timeout.
    let got = lock.write(Some(Duration::from_millis(300)));
    assert!(matches!(got, Err(Error::Timeout { .. })), "{:?}", got.err());
    assert!(
        started.elapsed() < Duration::from_millis(650),
        "the attempt has a deadline"
    );
    // The late grants land at 700 ms; their releases, as slow, by 1.4 s.
    thread::sleep(Duration::from_millis(1000));
    eventually(|| grants(&nodes) == [0; 5]);
}

#[test]
fn a_slow_minority_does_not_slow_the_lock_and_its_late_grants_join_the_hold() {
    let nodes = nodes(5);
    nodes[4].set_delay(Duration::from_millis(300));
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let started = Instant::now();
    let guard = lock.write(None).unwrap();
    assert!(started.elapsed() < Duration::from_millis(100));
    thread::sleep(Duration::from_millis(400));
    assert_eq!(grants(&nodes), [1; 5], "the late grant joined the hold");
    drop(guard);
    eventually(|| grants(&nodes) == [0; 5]);
}

#[test]
fn fencing_tokens_increase_even_when_one_node_runs_ahead() {
    let nodes = nodes(5);
    nodes[4].set_fence(1_000_000);
    // With two nodes down the write quorum must include the one ahead.
    nodes[0].set_down(true);
    nodes[1].set_down(true);
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let first = lock.write(None).unwrap();
    let ahead = first.fencing_token().unwrap();
    assert!(ahead > 1_000_000);
    drop(first);
    nodes[0].set_down(false);
    nodes[1].set_down(false);
    nodes[4].set_down(true);
    let second = lock.write(None).unwrap();
    assert!(second.fencing_token().unwrap() > ahead);
}

#[test]
fn a_refresh_that_loses_quorum_makes_the_hold_unhealthy() {
    let nodes = nodes(5);
    let lock = lock_on(&nodes, Duration::from_millis(600));
    let guard = lock.write(None).unwrap();
    thread::sleep(Duration::from_millis(300));
    assert!(guard.healthy(), "refreshed past its first ttl/2");
    for node in &nodes[..3] {
        node.set_down(true);
    }
    thread::sleep(Duration::from_millis(700));
    assert!(!guard.healthy());
    assert!(matches!(
        guard.check_health(),
        Err(Error::LockUnhealthy { .. })
    ));
}

#[test]
fn a_crashed_holders_grants_expire_by_ttl() {
    let nodes = nodes(3);
    let lock = lock_on(&nodes, Duration::from_millis(300));
    let l = lock.clone();
    // A hold whose refresher stops: the thread "crashes" without releasing.
    on_other_thread(move || {
        l.acquire_write_interruptibly(None, &|| false).unwrap();
        l.abandon();
    });
    let started = Instant::now();
    drop(lock.write(Some(Duration::from_secs(2))).unwrap());
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[test]
fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let nodes = nodes(5);
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(3));
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let (lock, stop, start) = (lock.clone(), stop.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                thread::sleep(Duration::from_millis(25 * i));
                // Overlapping reads: at every moment some reader holds.
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(guard) = lock.read(Some(Duration::from_millis(100))) {
                        thread::sleep(Duration::from_millis(50));
                        drop(guard);
                    }
                }
            })
        })
        .collect();
    start.wait();
    thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    let writing = lock.write(Some(Duration::from_secs(3)));
    assert!(
        writing.is_ok(),
        "writer starved for {:?}",
        started.elapsed()
    );
    drop(writing);
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.join().unwrap();
    }
}

#[test]
fn an_interrupted_wait_leaves_nothing_held() {
    let nodes = nodes(5);
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let _writing = lock.write(None).unwrap();
    let l = lock.clone();
    let started = Instant::now();
    let outcome = on_other_thread(move || {
        let asked = Instant::now();
        l.acquire_read_interruptibly(None, &|| asked.elapsed() > Duration::from_millis(200))
    });
    assert!(matches!(outcome, Err(Error::Interrupted(_))));
    assert!(started.elapsed() < Duration::from_millis(400));
    assert_eq!(grants(&nodes), [1; 5]);
}

#[test]
fn a_contended_write_on_two_nodes_is_denied_not_failed() {
    let nodes = nodes(2);
    // The second denial comes later than the first: one denial alone
    // already rules out a write quorum of 2.
    nodes[1].set_delay(Duration::from_millis(50));
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let _writing = lock.write(None).unwrap();
    let l = lock.clone();
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let got = on_other_thread(move || l.acquire_write_interruptibly(Some(wait), &|| false));
    assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
    assert!(started.elapsed() >= wait);
}

#[test]
fn denials_from_too_few_reachable_nodes_are_a_backend_error() {
    let nodes = nodes(4);
    let lock = lock_on(&nodes, Duration::from_secs(30));
    let _writing = lock.write(None).unwrap();
    nodes[0].set_down(true);
    nodes[1].set_down(true);
    nodes[3].set_delay(Duration::from_millis(50));
    let l = lock.clone();
    let got = on_other_thread(move || {
        l.acquire_write_interruptibly(Some(Duration::from_secs(1)), &|| false)
    });
    match got {
        Err(Error::Backend { message, .. }) => assert!(
            message.contains("only 2 of 4 nodes answered, 3 needed"),
            "{message}"
        ),
        other => panic!("expected a backend error, got {other:?}"),
    }
}
