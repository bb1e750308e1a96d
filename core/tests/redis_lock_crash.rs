//! Holders that crash or pause, as separate processes: this test binary
//! re-runs itself as the holder (see `holder_process`).

mod support;

use std::time::{Duration, Instant};

use lockyard::redis::Lock;
use support::{Helper, RedisServer};

const HOLDER_ENV: &str = "LOCKYARD_TEST_HOLDER";

/// Not a test on its own: when HOLDER_ENV is set, acquires the lock it
/// names, reports its fencing token, and on each line of stdin reports its
/// health.
#[test]
fn holder_process() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let (url, rest) = spec.split_once(' ').unwrap();
    let (name, ttl_ms) = rest.split_once(' ').unwrap();
    let lock = Lock::builder(url, name)
        .ttl(Duration::from_millis(ttl_ms.parse().unwrap()))
        .build()
        .unwrap();
    let guard = lock.acquire(None).unwrap();
    println!("held {}", guard.fencing_token());
    for _ in std::io::stdin().lines() {
        println!("healthy {}", guard.healthy());
    }
}

struct Holder(Helper);

impl Holder {
    fn start(server: &RedisServer, name: &str, ttl_ms: u64) -> (Holder, u64) {
        let spec = format!("{} {name} {ttl_ms}", server.url());
        let mut helper = Helper::start("holder_process", HOLDER_ENV, spec);
        let fence = helper.expect("held ").parse().unwrap();
        (Holder(helper), fence)
    }

    fn healthy(&mut self) -> bool {
        self.0.ask("healthy ") == "true"
    }
}

#[test]
fn a_killed_holders_lock_is_free_after_its_ttl_and_not_before() {
    let server = RedisServer::start();
    let (mut holder, _) = Holder::start(&server, "crash", 1500);
    let lock = Lock::builder(server.url(), "crash").build().unwrap();
    holder.0.signal("-KILL");
    let _ = holder.0.child.wait();
    let killed_at = Instant::now();
    assert!(
        lock.try_acquire().unwrap().is_none(),
        "free right after the crash"
    );
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    let waited = killed_at.elapsed();
    assert!(
        waited > Duration::from_millis(1000),
        "free too early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(2500),
        "free too late: {waited:?}"
    );
    drop(guard);
}

#[test]
fn a_paused_holder_is_taken_over_and_knows_it_on_resume() {
    let server = RedisServer::start();
    let (mut holder, paused_fence) = Holder::start(&server, "pause", 1000);
    assert!(holder.healthy());
    holder.0.signal("-STOP");
    let lock = Lock::builder(server.url(), "pause").build().unwrap();
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(
        guard.fencing_token() > paused_fence,
        "the new holder's token must be larger"
    );
    holder.0.signal("-CONT");
    assert!(
        !holder.healthy(),
        "a resumed holder must not believe it still holds the lock"
    );
    guard.check_health().unwrap();
}
