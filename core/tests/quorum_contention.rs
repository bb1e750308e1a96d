//! The quorum read/write lock under contention on 2 to 6 real redis-server
//! nodes: a denied attempt is "someone else holds it", never "the nodes are
//! down", so contenders time out or wait, even where n/2 denials (fewer
//! than a quorum of answers) already rule a write quorum out.

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lockyard::quorum::RwLock;
use lockyard::wait::InTime;
use lockyard::Error;
use support::RedisServer;

/// `n` nodes and two separate holders of the same name on them.
fn contenders(n: usize, name: &str) -> (Vec<RedisServer>, Arc<RwLock>, Arc<RwLock>) {
    let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let build = || {
        Arc::new(
            RwLock::builder(urls.clone(), name)
                .ttl(Duration::from_secs(10))
                .build()
                .unwrap(),
        )
    };
    let (holder, contender) = (build(), build());
    (servers, holder, contender)
}

/// Every contended attempt, with or without a wait, says "not now":
/// Ok(false) from the acquire calls, [`Error::Timeout`] from the guards.
fn contended_attempts_time_out(n: usize) {
    let (_servers, holder, contender) = contenders(n, "contended");
    let wait = Duration::from_millis(150);
    let writing = holder.write(None).unwrap();
    for _ in 0..5 {
        for timeout in [Duration::ZERO, wait] {
            let started = Instant::now();
            let write = contender
                .acquire_write_interruptibly(Some(timeout), &|| false)
                .in_time();
            assert!(matches!(write, Ok(false)), "{n} nodes, write: {write:?}");
            assert!(started.elapsed() >= timeout, "{n} nodes: gave up early");
            let read = contender
                .acquire_read_interruptibly(Some(timeout), &|| false)
                .in_time();
            assert!(matches!(read, Ok(false)), "{n} nodes, read: {read:?}");
        }
        let guarded = contender.write(Some(wait)).err();
        assert!(
            matches!(guarded, Some(Error::Timeout { .. })),
            "{n} nodes: {guarded:?}"
        );
    }
    drop(writing);

    let reading = holder.read(None).unwrap();
    for _ in 0..5 {
        let write = contender
            .acquire_write_interruptibly(Some(wait), &|| false)
            .in_time();
        assert!(matches!(write, Ok(false)), "{n} nodes, write: {write:?}");
        let guarded = contender.write(Some(Duration::ZERO)).err();
        assert!(
            matches!(guarded, Some(Error::Timeout { .. })),
            "{n} nodes: {guarded:?}"
        );
    }
    drop(reading);
}

/// A write with no timeout waits for the holder, however long it holds,
/// and gets the lock once it lets go.
fn a_contended_write_without_timeout_waits_for_the_holder(n: usize) {
    let (_servers, holder, contender) = contenders(n, "waited");
    let held_for = Duration::from_millis(700);
    let writing = holder.write(None).unwrap();
    let started = Instant::now();
    let waiter = thread::spawn(move || {
        let outcome = contender.write(None).map(drop);
        (outcome, started.elapsed())
    });
    thread::sleep(held_for);
    assert!(writing.release().unwrap());
    let (outcome, waited) = waiter.join().unwrap();
    assert!(outcome.is_ok(), "{n} nodes: {outcome:?} after {waited:?}");
    assert!(waited >= held_for, "{n} nodes: got in after {waited:?}");
    assert!(
        waited < held_for + Duration::from_secs(2),
        "{n} nodes: {waited:?}"
    );
}

#[test]
fn contended_writers_and_readers_time_out_on_2_nodes() {
    contended_attempts_time_out(2);
}

#[test]
fn contended_writers_and_readers_time_out_on_3_nodes() {
    contended_attempts_time_out(3);
}

#[test]
fn contended_writers_and_readers_time_out_on_4_nodes() {
    contended_attempts_time_out(4);
}

#[test]
fn contended_writers_and_readers_time_out_on_5_nodes() {
    contended_attempts_time_out(5);
}

#[test]
fn contended_writers_and_readers_time_out_on_6_nodes() {
    contended_attempts_time_out(6);
}

#[test]
fn a_write_without_timeout_waits_for_the_holder_on_2_nodes() {
    a_contended_write_without_timeout_waits_for_the_holder(2);
}

#[test]
fn a_write_without_timeout_waits_for_the_holder_on_3_nodes() {
    a_contended_write_without_timeout_waits_for_the_holder(3);
}

#[test]
fn a_write_without_timeout_waits_for_the_holder_on_4_nodes() {
    a_contended_write_without_timeout_waits_for_the_holder(4);
}

#[test]
fn a_write_without_timeout_waits_for_the_holder_on_5_nodes() {
    a_contended_write_without_timeout_waits_for_the_holder(5);
}

#[test]
fn a_write_without_timeout_waits_for_the_holder_on_6_nodes() {
    a_contended_write_without_timeout_waits_for_the_holder(6);
}
