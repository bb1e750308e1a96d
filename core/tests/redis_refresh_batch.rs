//! Held locks' refreshes go out in pipelines, one per node for the
//! refreshes that fall due together, and lose nothing by it: every lock
//! stays held and healthy, through a server that forgot its scripts and
//! across a Cluster's nodes. The refresh exchange count is per process, so
//! these tests take turns.

mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lockyard::redis::{refresh_exchanges, Lock, Session};
use support::{RedisCluster, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;
/// The refresh period of these locks' lease: ttl / 9.
const TTL: Duration = Duration::from_millis(1800);
const EVERY: Duration = Duration::from_millis(200);

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn locks_named(url: &str, prefix: &str, count: usize) -> Vec<Lock> {
    (0..count)
        .map(|i| {
            Lock::builder(url, format!("{prefix}-{i}"))
                .ttl(TTL)
                .build()
                .unwrap()
        })
        .collect()
}

/// Acquires every lock of `locks`, and says how many cohorts their
/// refreshes fall in: locks taken within one step of the grid (a quarter
/// period) are refreshed together, and a slow machine spreads them over
/// more steps.
fn acquire_all(locks: &[Lock]) -> (Vec<lockyard::redis::LockGuard<'_>>, f64) {
    let acquiring = Instant::now();
    let guards = locks
        .iter()
        .map(|lock| lock.acquire(Some(MS(2000))).unwrap())
        .collect();
    let cohorts = (acquiring.elapsed().as_secs_f64() / (EVERY / 4).as_secs_f64()).ceil() + 1.0;
    (guards, cohorts)
}

#[test]
fn the_refreshes_of_locks_held_together_share_a_pipeline() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = RedisServer::start();
    let locks = locks_named(&server.url(), "many", 300);
    let (guards, cohorts) = acquire_all(&locks);
    let (exchanges, scripts) = (refresh_exchanges(), server.evalsha_calls());
    let held_for = Instant::now();
    // Ten periods: five times the ttl, so only refreshes keep them.
    std::thread::sleep(EVERY * 10);
    let periods = held_for.elapsed().as_secs_f64() / EVERY.as_secs_f64();
    let sent = refresh_exchanges() - exchanges;
    let refreshed = server.evalsha_calls() - scripts;
    for guard in &guards {
        guard.check_health().unwrap();
    }
    for (i, lock) in locks.iter().enumerate() {
        assert!(lock.locked().unwrap(), "many-{i} is no longer held");
    }
    assert!(
        refreshed as f64 >= 300.0 * (periods - 2.0),
        "{refreshed} refreshes in {periods:.1} periods of 300 locks"
    );
    // One pipeline per period and cohort: far below one exchange per lock
    // and period.
    assert!(
        (sent as f64) <= cohorts * (periods + 1.0),
        "{sent} refresh exchanges in {periods:.1} periods for 300 locks in {cohorts} cohorts"
    );
    assert!(
        (sent as f64) <= 300.0 * periods / 20.0,
        "{sent} refresh exchanges in {periods:.1} periods for 300 locks"
    );
    drop(guards);
    assert!(server.keys().iter().all(|key| !key.contains(":holders")));
}

#[test]
fn a_server_that_forgot_its_scripts_gets_them_in_the_pipeline() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = RedisServer::start();
    let locks = locks_named(&server.url(), "flushed", 100);
    let (guards, cohorts) = acquire_all(&locks);
    let exchanges = refresh_exchanges();
    let held_for = Instant::now();
    for _ in 0..5 {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query::<()>(&mut server.raw().unwrap())
            .unwrap();
        std::thread::sleep(EVERY * 2);
    }
    let periods = held_for.elapsed().as_secs_f64() / EVERY.as_secs_f64();
    for guard in &guards {
        guard.check_health().unwrap();
    }
    let sent = refresh_exchanges() - exchanges;
    // Each pipeline that met a flushed server is sent once more, and no
    // refresh goes alone.
    assert!(
        (sent as f64) <= 2.0 * cohorts * (periods + 1.0),
        "{sent} refresh exchanges in {periods:.1} periods for 100 locks in {cohorts} cohorts"
    );
}

#[test]
fn a_cluster_gets_a_pipeline_per_node() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = RedisCluster::start();
    let locks = locks_named(&cluster.url(0), "spread", 90);
    let (guards, cohorts) = acquire_all(&locks);
    let exchanges = refresh_exchanges();
    let held_for = Instant::now();
    std::thread::sleep(EVERY * 10);
    let periods = held_for.elapsed().as_secs_f64() / EVERY.as_secs_f64();
    let sent = refresh_exchanges() - exchanges;
    for guard in &guards {
        guard.check_health().unwrap();
    }
    let other_client = locks_named(&cluster.url(1), "spread", 90);
    for (i, lock) in other_client.iter().enumerate() {
        assert!(
            lock.try_acquire().unwrap().is_none(),
            "spread-{i}: two holders"
        );
    }
    assert!(
        (sent as f64) <= 3.0 * cohorts * (periods + 1.0),
        "{sent} refresh exchanges in {periods:.1} periods for 90 locks on 3 nodes in {cohorts} cohorts"
    );
    assert!(
        (sent as f64) <= 90.0 * periods / 5.0,
        "{sent} refresh exchanges in {periods:.1} periods for 90 locks on 3 nodes"
    );
}

#[test]
fn a_session_refreshes_its_locks_in_one_pipeline() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = RedisServer::start();
    let session = Session::builder(server.url()).ttl(TTL).build().unwrap();
    let locks: Vec<Lock> = (0..100)
        .map(|i| {
            Lock::builder(server.url(), format!("bound-{i}"))
                .session(&session)
                .build()
                .unwrap()
        })
        .collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|lock| lock.acquire(Some(MS(2000))).unwrap())
        .collect();
    let exchanges = refresh_exchanges();
    std::thread::sleep(TTL * 2);
    for guard in &guards {
        guard.check_health().unwrap();
    }
    session.check_health().unwrap();
    let sent = refresh_exchanges() - exchanges;
    // The session renews every ttl/3 or so: a handful of renewals, each
    // refreshing its 100 locks in a pipeline or two.
    assert!(
        sent <= 30,
        "{sent} refresh exchanges for 100 locks under one session"
    );
    assert!(
        sent >= 2,
        "the session refreshed its locks only {sent} times"
    );
}
