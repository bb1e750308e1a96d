//! Durations out of range (issue 16, item 10): every ttl, lock_delay,
//! refresh interval, connect timeout and wait timeout past its documented
//! maximum is a `Config` error when it is given, never a panic (an
//! `Instant` overflow) and never a lease other than the one asked for (a
//! ttl in ms wrapping around u64).

mod support;

use std::time::Duration;

use lockyard::redis::{seconds, Election, Lock, Session, WaitGroup};
use lockyard::{Error, MAX_PERIOD, MAX_WAIT};
use support::RedisServer;

/// 1e19 s: a Duration, but past what an `Instant` can be moved by.
fn huge() -> Duration {
    Duration::from_secs_f64(1e19)
}

/// What the scripts got as ttl_ms before: u64::MAX ms wraps to small values.
fn ms_max() -> Duration {
    Duration::from_millis(u64::MAX)
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 24 * 3600)
}

fn assert_config<T>(outcome: lockyard::Result<T>, what: &str) {
    match outcome {
        Err(Error::Config(message)) => assert!(!message.is_empty()),
        Err(other) => panic!("{what}: expected a Config error, got {other}"),
        Ok(_) => panic!("{what}: expected a Config error, got Ok"),
    }
}

#[test]
fn lease_periods_past_30_days_are_config_errors_at_build() {
    let url = "redis://127.0.0.1:1/0"; // never reached: build touches no server
    for too_long in [days(31), ms_max(), huge()] {
        assert_config(Lock::builder(url, "l").ttl(too_long).build(), "Lock ttl");
        assert_config(
            WaitGroup::builder(url, "w", 2).ttl(too_long).build(),
            "WaitGroup ttl",
        );
        assert_config(
            Lock::builder(url, "l").connect_timeout(too_long).build(),
            "Lock connect_timeout",
        );
        assert_config(
            WaitGroup::builder(url, "w", 2)
                .connect_timeout(too_long)
                .build(),
            "WaitGroup connect_timeout",
        );
        assert_config(Session::builder(url).ttl(too_long).build(), "Session ttl");
        assert_config(
            Session::builder(url).lock_delay(too_long).build(),
            "Session lock_delay",
        );
        assert_config(
            Session::builder(url).connect_timeout(too_long).build(),
            "Session connect_timeout",
        );
    }
    assert!(Lock::builder(url, "l").ttl(MAX_PERIOD).build().is_ok());
}

#[test]
fn a_default_wait_past_100_years_is_a_config_error_at_build() {
    let url = "redis://127.0.0.1:1/0";
    for too_long in [ms_max(), huge(), Duration::MAX] {
        assert_config(
            Lock::builder(url, "l").timeout(Some(too_long)).build(),
            "Lock timeout",
        );
    }
    assert!(Lock::builder(url, "l")
        .timeout(Some(MAX_WAIT))
        .build()
        .is_ok());
    assert!(Lock::builder(url, "l").timeout(None).build().is_ok());
}

#[test]
fn waits_past_100_years_are_config_errors_not_panics() {
    let server = RedisServer::start();
    let lock = Lock::builder(server.url(), "huge-wait").build().unwrap();
    let group = WaitGroup::builder(server.url(), "huge-wait-group", 2)
        .build()
        .unwrap();
    for too_long in [huge(), ms_max(), Duration::MAX] {
        assert_config(lock.acquire(Some(too_long)), "Lock::acquire");
        assert_config(group.acquire(Some(too_long)), "WaitGroup::acquire");
        assert_config(group.add(Some(too_long), &|| false), "WaitGroup::add");
        assert_config(group.wait(Some(too_long)), "WaitGroup::wait");
    }
    // Nothing was left held or queued by the refused calls.
    assert!(!lock.locked().unwrap());
    assert_eq!(group.count().unwrap(), 0);
    // The longest allowed wait is an ordinary wait.
    assert!(lock.acquire(Some(MAX_WAIT)).is_ok());
    assert!(group.wait(Some(MAX_WAIT)).unwrap());
}

#[test]
fn elections_refuse_waits_past_100_years() {
    let server = RedisServer::start();
    let session = Session::builder(server.url()).build().unwrap();
    let election = Election::new(&server.url(), "huge-campaign", &session).unwrap();
    assert_config(election.campaign("a", Some(huge())), "Election::campaign");
    assert!(election.leader().unwrap().is_none(), "nothing was granted");
    let mut observer = election.observe();
    assert_config(
        observer.next_change(Some(huge()), &|| false),
        "Observer::next_change",
    );
}

/// The bindings' float conversion: what cannot be a Duration is refused
/// there; what can is left to the builders' limits above.
#[test]
fn seconds_from_a_binding_are_checked_before_any_limit() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 1e300] {
        assert_config(seconds("ttl", bad), "seconds");
    }
    // 2^64 ms: a valid Duration, refused by the ttl limit, not wrapped
    // into a 380 ms lease.
    let wraps = seconds("ttl", 18446744073709551.616).unwrap();
    assert_config(
        Lock::builder("redis://127.0.0.1:1/0", "l")
            .ttl(wraps)
            .build(),
        "ttl of 2^64 ms",
    );
}
