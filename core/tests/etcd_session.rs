//! etcd sessions against a real etcd member: locks under a session ride on
//! its lease, `destroy()` frees them at once, and a lost session's names
//! stay barred for its lock_delay.

mod etcd_support;

use std::time::{Duration, Instant};

use etcd_support::EtcdServer;
use lockyard::etcd::{Behavior, Lock, Session};
use lockyard::Error;

fn session(server: &EtcdServer, ttl: u64, lock_delay: u64) -> Session {
    Session::builder(server.url())
        .ttl(Duration::from_secs(ttl))
        .lock_delay(Duration::from_secs(lock_delay))
        .build()
        .unwrap()
}

fn lock_under(server: &EtcdServer, name: &str, session: &Session, value: &str) -> Lock {
    Lock::builder(server.url(), name)
        .session(session)
        .value(value)
        .build()
        .unwrap()
}

fn plain_lock(server: &EtcdServer, name: &str) -> Lock {
    Lock::builder(server.url(), name)
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[test]
fn a_lock_under_a_session_rides_on_its_lease_and_destroy_frees_it_at_once() {
    let server = EtcdServer::start();
    let session = session(&server, 5, 10);
    let lock = lock_under(&server, "job", &session, "worker-3");
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(guard.check_health().is_ok() && session.healthy());
    assert_eq!(
        lockyard::etcd::holder(&server.url(), "job")
            .unwrap()
            .as_deref(),
        Some("worker-3")
    );
    // The key and its bar: nothing else is written.
    assert_eq!(server.keys().len(), 2, "{:?}", server.keys());
    let other = plain_lock(&server, "job");
    assert!(other.try_acquire().unwrap().is_none());

    session.destroy().unwrap();
    assert!(!session.healthy());
    assert!(
        guard.check_health().is_err(),
        "a lock under a destroyed session"
    );
    // No lock_delay after a clean destroy.
    let started = Instant::now();
    let taken = other.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!guard.release().unwrap(), "its session was destroyed");
    drop(taken);
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    // Left: the plain lock's lease, until it is dropped.
    assert_eq!(server.leases().len(), 1, "{:?}", server.leases());
    let err = lock.try_acquire().err().unwrap();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

#[test]
fn a_clean_release_leaves_no_bar_and_the_sessions_own_locks_follow_at_once() {
    let server = EtcdServer::start();
    let session = session(&server, 5, 30);
    let lock = lock_under(&server, "relay", &session, "a");
    let same_session = lock_under(&server, "relay", &session, "b");
    let guard = lock.acquire(None).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            same_session
                .acquire(Some(Duration::from_secs(5)))
                .map(|g| g.fencing_token())
        });
        std::thread::sleep(Duration::from_millis(300));
        let token = guard.fencing_token();
        drop(guard);
        let next = waiter.join().unwrap().unwrap();
        assert!(next > token);
    });
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    let other = plain_lock(&server, "relay");
    let started = Instant::now();
    drop(other.acquire(Some(Duration::from_secs(5))).unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a released name is not barred"
    );
}

#[test]
fn a_lost_sessions_names_stay_barred_for_its_lock_delay_then_open() {
    let server = EtcdServer::start();
    let (ttl, lock_delay) = (2, 4);
    let session = session(&server, ttl, lock_delay);
    let lock = lock_under(&server, "barred", &session, "nightly");
    let guard = lock.acquire(None).unwrap();
    let token = guard.fencing_token();
    let other = plain_lock(&server, "barred");
    // The session is lost: etcd drops its lease, and its key with it.
    let lost_at = Instant::now();
    assert!(
        server
            .ctl(&["lease", "revoke", &server.lease_granted_with(ttl)])
            .0
    );
    let waiter = std::thread::spawn(move || {
        other
            .acquire(Some(Duration::from_secs(20)))
            .map(|g| (g.fencing_token(), lost_at.elapsed()))
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !session.healthy() && guard.check_health().is_err(),
        "the keep-alive found the lease gone"
    );
    assert_eq!(
        lockyard::etcd::holder(&server.url(), "barred")
            .unwrap()
            .as_deref(),
        Some("nightly"),
        "behavior release: the value stays readable while barred"
    );
    let state = lockyard::etcd::inspect(&server.url(), "barred").unwrap();
    assert!(state.holders.is_empty() && state.lock_delay.is_some());
    let third = plain_lock(&server, "barred");
    assert!(third.try_acquire().unwrap().is_none(), "barred");
    let (next, waited) = waiter.join().unwrap().unwrap();
    assert!(next > token);
    // The bar lease (ttl + lock_delay) runs out from its last renewal,
    // at most ttl/3 before the loss.
    let least = Duration::from_secs(ttl + lock_delay) - Duration::from_secs(ttl) / 3;
    assert!(
        waited >= least - Duration::from_millis(500) && waited < least + Duration::from_secs(3),
        "the waiter got the name {waited:?} after the session was lost"
    );
    assert!(!guard.release().unwrap());
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn behavior_delete_keeps_no_value_in_the_bar_and_force_release_lifts_the_bar() {
    let server = EtcdServer::start();
    let session = Session::builder(server.url())
        .ttl(Duration::from_secs(2))
        .lock_delay(Duration::from_secs(30))
        .behavior(Behavior::Delete)
        .build()
        .unwrap();
    let lock = lock_under(&server, "glass", &session, "secret");
    let guard = lock.acquire(None).unwrap();
    assert!(
        server
            .ctl(&["lease", "revoke", &server.lease_granted_with(2)])
            .0
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        lockyard::etcd::holder(&server.url(), "glass").unwrap(),
        None
    );
    let other = plain_lock(&server, "glass");
    assert!(other.try_acquire().unwrap().is_none(), "barred for 30 s");
    lockyard::etcd::force_release(&server.url(), "glass").unwrap();
    assert!(
        other.try_acquire().unwrap().is_some(),
        "the glass is broken"
    );
    drop(guard);
}

#[test]
fn bad_sessions_are_config_errors() {
    let server = EtcdServer::start();
    for built in [
        Session::builder(server.url())
            .ttl(Duration::from_millis(500))
            .build(),
        Session::builder(server.url())
            .lock_delay(Duration::from_secs(31 * 24 * 3600))
            .build(),
        Session::builder("redis://127.0.0.1:6379").build(),
    ] {
        assert!(matches!(built, Err(Error::Config(_))), "{:?}", built.err());
    }
    let session = session(&server, 5, 0);
    let elsewhere = Lock::builder("etcd://127.0.0.1:1", "x")
        .session(&session)
        .build();
    assert!(matches!(elsewhere, Err(Error::Config(_))));
    // Without a lock_delay nothing bars the name.
    let lock = lock_under(&server, "free", &session, "v");
    drop(lock.acquire(None).unwrap());
    assert_eq!(server.keys().len(), 0, "{:?}", server.keys());
}

#[test]
fn a_destroy_called_during_another_returns_only_once_the_session_is_gone() {
    let server = EtcdServer::start();
    let session = std::sync::Arc::new(session(&server, 5, 10));
    let lock = lock_under(&server, "job", &session, "worker-3");
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    // The member stalls for a while, as a busy or slow one would.
    server.signal("STOP");
    let first = std::thread::spawn({
        let session = session.clone();
        move || session.destroy()
    });
    while session.healthy() {
        std::thread::yield_now();
    }
    let left = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(800));
            server.signal("CONT");
        });
        session.destroy().unwrap();
        server.keys()
    });
    assert!(first.join().unwrap().is_ok());
    drop(guard);
    assert_eq!(
        left,
        Vec::<String>::new(),
        "destroy returned while the session's keys were still in etcd"
    );
}
