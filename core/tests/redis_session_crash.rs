//! Workers under a session that crash or pause, as separate processes:
//! this test binary re-runs itself as the worker (see `worker_process`).

mod support;

use std::time::{Duration, Instant};

use lockyard::redis::{Behavior, Lock, Session};
use support::{Helper, RedisServer};

const WORKER_ENV: &str = "LOCKYARD_TEST_SESSION_WORKER";
const MS: fn(u64) -> Duration = Duration::from_millis;

/// Not a test on its own: when WORKER_ENV is set ("<url> <name> <ttl ms>
/// <lock_delay ms>"), takes the lock under a fresh session, says "held",
/// and on each line of stdin reports the session's and the lock's health.
#[test]
fn worker_process() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let session = Session::builder(parts[0])
        .ttl(MS(parts[2].parse().unwrap()))
        .lock_delay(MS(parts[3].parse().unwrap()))
        .behavior(Behavior::Release)
        .build()
        .unwrap();
    let lock = Lock::builder(parts[0], parts[1])
        .session(&session)
        .value("worker")
        .build()
        .unwrap();
    let guard = lock.try_acquire().unwrap().expect("the task is free");
    println!("held {}", guard.fencing_token());
    for _ in std::io::stdin().lines() {
        println!("healthy {} {}", session.healthy(), guard.healthy());
    }
}

struct Worker(Helper);

impl Worker {
    fn start(server: &RedisServer, name: &str, ttl_ms: u64, delay_ms: u64) -> Worker {
        let spec = format!("{} {name} {ttl_ms} {delay_ms}", server.url());
        let mut helper = Helper::start("worker_process", WORKER_ENV, spec);
        helper.expect("held ");
        Worker(helper)
    }

    /// (session healthy, lock healthy)
    fn health(&mut self) -> (bool, bool) {
        let answer = self.0.ask("healthy ");
        let (session, lock) = answer.split_once(' ').unwrap();
        (session == "true", lock == "true")
    }
}

fn rival(server: &RedisServer, name: &str) -> (Session, Lock) {
    let session = Session::builder(server.url())
        .ttl(MS(5000))
        .build()
        .unwrap();
    let lock = Lock::builder(server.url(), name)
        .session(&session)
        .build()
        .unwrap();
    (session, lock)
}

#[test]
fn a_killed_workers_task_is_free_after_ttl_plus_lock_delay_and_not_before() {
    let server = RedisServer::start();
    let (ttl, delay) = (600, 700);
    let mut worker = Worker::start(&server, "task", ttl, delay);
    // Outlives its TTL many times over while it runs.
    std::thread::sleep(MS(3 * ttl));
    assert_eq!(worker.health(), (true, true));
    let (_session, lock) = rival(&server, "task");
    assert!(
        lock.try_acquire().unwrap().is_none(),
        "taken from a live worker"
    );
    worker.0.signal("-KILL");
    let _ = worker.0.child.wait();
    let killed_at = Instant::now();
    let mut free_at = None;
    while killed_at.elapsed() < MS(4000) {
        if let Some(guard) = lock.try_acquire().unwrap() {
            free_at = Some(killed_at.elapsed());
            drop(guard);
            break;
        }
        std::thread::sleep(MS(20));
    }
    let waited = free_at.expect("never freed");
    // Its last renewal was at most ttl/2 before the kill.
    assert!(
        waited >= MS(ttl / 2 + delay - 50),
        "free before its lease + lock_delay: {waited:?}"
    );
    assert!(waited <= MS(ttl + delay + 400), "free too late: {waited:?}");
}

#[test]
fn a_paused_worker_finds_its_session_unhealthy_on_resume() {
    let server = RedisServer::start();
    let mut worker = Worker::start(&server, "paused", 400, 0);
    assert_eq!(worker.health(), (true, true));
    worker.0.signal("-STOP");
    std::thread::sleep(MS(1200));
    let (_session, lock) = rival(&server, "paused");
    let guard = lock
        .try_acquire()
        .unwrap()
        .expect("free once the lease ran out");
    worker.0.signal("-CONT");
    assert_eq!(worker.health(), (false, false));
    guard.check_health().unwrap();
}
