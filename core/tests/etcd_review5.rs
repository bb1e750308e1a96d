//! Review 5 (etcd sessions with lock_delay), adversarial: each test states
//! what must hold. Every test without a `// holds:` mark failed on the
//! session's first version (f596589), and its comment tells what that
//! version did; the commit that brings this file mends them. Each grant's
//! bar now carries its key's nonce, so every delete of a bar is
//! conditional on it being that grant's.

mod etcd_support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_support::{EtcdServer, Proxy};
use lockyard::etcd::{Lock, Session};

fn session(url: &str, ttl: u64, lock_delay: u64) -> Session {
    Session::builder(url)
        .ttl(Duration::from_secs(ttl))
        .lock_delay(Duration::from_secs(lock_delay))
        .build()
        .unwrap()
}

fn lock_under(url: &str, name: &str, session: &Session, value: &str) -> Lock {
    Lock::builder(url, name)
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

/// The session whose lease has `ttl` is lost: etcd drops its lease (and
/// its keys), as a partition longer than ttl would.
fn lose_session(server: &EtcdServer, ttl: u64) {
    let lease = server.lease_granted_with(ttl);
    assert!(server.ctl(&["lease", "revoke", &lease]).0);
}

/// A lost session's bar keeps every entry of the name waiting for
/// lock_delay, also a waiter second in line. Here the first in line (a
/// plain lock, barred) gives up; the second, watching the first's key,
/// takes the name at once without reading the bar (the no-read handoff is
/// skipped only when the key ahead is a session's), about 18 s before the
/// lock_delay ends: the lost holder and the second waiter hold at once.
#[test]
fn a_second_waiter_takes_a_barred_name_when_the_first_waiter_gives_up() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 2, 20);
    let lock = lock_under(&server.url(), "ahead", &session, "v");
    let guard = lock.acquire(None).unwrap();
    lose_session(&server, 2);
    let first = plain_lock(&server, "ahead");
    let second = plain_lock(&server, "ahead");
    std::thread::scope(|s| {
        let gave_up = s.spawn(|| first.acquire(Some(Duration::from_millis(1500))).is_err());
        std::thread::sleep(Duration::from_millis(400));
        let started = Instant::now();
        let got = second
            .acquire(Some(Duration::from_secs(5)))
            .map(|g| g.fencing_token());
        assert!(gave_up.join().unwrap(), "the first waiter is barred");
        assert!(
            got.is_err(),
            "the second waiter took the name {:?} after it queued, inside the \
             lost session's 20 s lock_delay",
            started.elapsed()
        );
    });
    drop(guard);
}

/// A bar exists while its lock holds, or for lock_delay after its session
/// was lost. A holder whose key was deleted (by an operator, a compaction
/// of the wrong range, ...) releases: its bar must go with it (or at worst
/// run out). Instead the release's Txn compares the key, fails, never
/// reaches the nested bar delete, and the bar stays on the bar lease that
/// the live session renews: the name is barred for everyone else for as
/// long as the session lives.
#[test]
fn a_holder_whose_key_was_deleted_leaves_its_bar_for_the_sessions_life() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 2, 2);
    let lock = lock_under(&server.url(), "cut", &session, "v");
    let guard = lock.acquire(None).unwrap();
    let key = server
        .keys()
        .into_iter()
        .find(|k| k.starts_with("lockyard/cut/"))
        .unwrap();
    assert!(server.ctl(&["del", &key]).0);
    let _ = guard.release();
    // Well past the bar lease's ttl + lock_delay (4 s).
    std::thread::sleep(Duration::from_secs(6));
    assert!(session.healthy());
    let other = plain_lock(&server, "cut");
    assert!(
        other.try_acquire().unwrap().is_some(),
        "nobody holds \"cut\" and no session was lost, yet it stays barred: {:?}",
        server.keys()
    );
}

/// `force_release` removes the holder of a name. While a lost session's
/// bar runs, nobody holds it: the first in line is a waiter the bar keeps
/// waiting. force_release must lift the bar and leave that waiter in line
/// (it then takes the name), removing no holder. Instead it deletes the
/// waiter's key as if it held (returns 1) and the waiter's acquire fails
/// with "the waiter's key ... is gone from etcd".
#[test]
fn force_release_during_lock_delay_deletes_a_waiter_instead_of_a_holder() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 2, 20);
    let lock = lock_under(&server.url(), "glass", &session, "v");
    let guard = lock.acquire(None).unwrap();
    lose_session(&server, 2);
    let waiter = plain_lock(&server, "glass");
    std::thread::scope(|s| {
        let waited = s.spawn(|| {
            waiter
                .acquire(Some(Duration::from_secs(10)))
                .map(|g| g.fencing_token())
        });
        std::thread::sleep(Duration::from_millis(500));
        let removed = lockyard::etcd::force_release(&server.url(), "glass").unwrap();
        let waited = waited.join().unwrap();
        assert!(
            waited.is_ok(),
            "the barred waiter lost its place: {:?}",
            waited.err().map(|e| e.to_string())
        );
        assert_eq!(removed, 0, "nobody held the name");
    });
    drop(guard);
}

/// A release that got no answer hands the bar key to the bar lease's
/// stray sweep, which deletes `lockyard/<name>.bar` whoever put it, at
/// every keep-alive for 20 s after its first delete. The next holder (here
/// session B) puts its own bar there; A's sweep deletes it, so when B is
/// lost its name is free at once instead of barred for B's 10 s
/// lock_delay.
#[test]
fn a_failed_release_sweeps_away_the_next_sessions_bar() {
    let server = EtcdServer::start();
    // Only the release (a Txn with a nested Txn) is held up.
    let proxy = Proxy::start(server.client_port, "request_txn");
    let url_a = format!("etcd://127.0.0.1:{}", proxy.port);
    let a = Session::builder(&url_a)
        .ttl(Duration::from_secs(3))
        .lock_delay(Duration::from_secs(10))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let lock_a = lock_under(&url_a, "relay", &a, "a");
    let guard = lock_a.acquire(None).unwrap();
    proxy.delay_ms.store(3000, Ordering::SeqCst);
    assert!(guard.release().is_err(), "no answer in time");
    proxy.delay_ms.store(0, Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(4)); // the delayed release lands
    assert!(server.keys().is_empty(), "{:?}", server.keys());

    let b = session(&server.url(), 4, 10);
    let lock_b = lock_under(&server.url(), "relay", &b, "b");
    let guard_b = lock_b.acquire(Some(Duration::from_secs(5))).unwrap();
    // A's keep-alive (every 1 s) sweeps its strays.
    std::thread::sleep(Duration::from_millis(2500));
    let keys = server.keys();
    lose_session(&server, 4);
    std::thread::sleep(Duration::from_millis(300));
    let other = plain_lock(&server, "relay");
    assert!(
        other.try_acquire().unwrap().is_none(),
        "session B was lost holding \"relay\": barred for 10 s; keys while B held: {keys:?}"
    );
    drop(guard_b);
    drop(a);
}

/// A put_bar whose reply is lost and whose resend gets no answer in time
/// fails the acquire; its key is handed to the sweep, but the bar it did
/// put stays on the bar lease, renewed while the session lives: the name
/// is barred for everyone else with nobody holding it.
#[test]
fn a_put_bar_without_an_answer_leaves_a_bar_for_the_sessions_life() {
    let server = EtcdServer::start();
    // Marks the put of the bar: the one request on the bar lease.
    let marker = Arc::new(Mutex::new("no request yet".to_owned()));
    let proxy = Proxy::start_marking(server.client_port, marker.clone());
    let url = format!("etcd://127.0.0.1:{}", proxy.port);
    let session = Session::builder(&url)
        .ttl(Duration::from_secs(1))
        .lock_delay(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let bars = i64::from_str_radix(&server.lease_granted_with(2), 16).unwrap();
    *marker.lock().unwrap() = format!("\"lease\":{bars}");
    let lock = lock_under(&url, "stuck", &session, "v");
    proxy.lose_next.store(true, Ordering::SeqCst);
    proxy.delay_ms.store(700, Ordering::SeqCst);
    let taken = lock.acquire(Some(Duration::from_secs(5)));
    proxy.delay_ms.store(0, Ordering::SeqCst);
    proxy.lose_next.store(false, Ordering::SeqCst);
    assert!(taken.is_err(), "put_bar got no answer in time");
    drop(taken);
    // Past the bar lease's ttl + lock_delay (2 s), twice.
    std::thread::sleep(Duration::from_secs(4));
    assert!(session.healthy());
    let other = plain_lock(&server, "stuck");
    assert!(
        other.try_acquire().unwrap().is_some(),
        "nobody holds \"stuck\", yet it is barred: {:?}",
        server.keys()
    );
}

/// lock_delay protects against a lost holder that may still be acting;
/// the bar must stand for lock_delay once the session is lost. The lost
/// process dropping its (already lost) session — what a worker does when
/// it sees it unhealthy — runs destroy(), which revokes the bar lease:
/// the name is free at once.
#[test]
fn dropping_a_lost_session_lifts_its_lock_delay() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 2, 20);
    let lock = lock_under(&server.url(), "late", &session, "v");
    let guard = lock.acquire(None).unwrap();
    lose_session(&server, 2);
    std::thread::sleep(Duration::from_millis(1200));
    assert!(!session.healthy(), "the keep-alive found the lease gone");
    drop(guard);
    drop(lock);
    drop(session);
    let other = plain_lock(&server, "late");
    assert!(
        other.try_acquire().unwrap().is_none(),
        "a session lost 1.2 s ago with a 20 s lock_delay no longer bars its name"
    );
}

/// `Lock::locked` says whether the name is taken. While a lost session's
/// bar runs no acquire can succeed, but `locked()` says false (it reads
/// only the line, not the bar).
#[test]
fn locked_is_false_while_the_name_is_barred() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 2, 20);
    let lock = lock_under(&server.url(), "shut", &session, "v");
    let guard = lock.acquire(None).unwrap();
    lose_session(&server, 2);
    let other = plain_lock(&server, "shut");
    assert!(other.try_acquire().unwrap().is_none(), "barred");
    assert!(
        other.locked().unwrap(),
        "locked() is false, yet try_acquire finds the name barred"
    );
    drop(guard);
}

/// A session's locks bar their names after a loss only while the bar
/// lease lives. When etcd no longer has it (revoked here; equally a bar
/// lease whose renewals kept failing while the session's succeeded, which
/// `renew_bars` ignores), the session must not go on as healthy: its
/// lock_delay is gone. Instead it reports healthy, while every acquire
/// under it fails at put_bar ("requested lease not found") and a lock
/// held at that moment holds on with no bar behind it.
#[test]
fn a_session_whose_bar_lease_is_gone_stays_healthy() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 2, 20);
    let lock = lock_under(&server.url(), "nobar", &session, "v");
    drop(lock.acquire(None).unwrap());
    let bar_lease = server.lease_granted_with(22);
    assert!(server.ctl(&["lease", "revoke", &bar_lease]).0);
    std::thread::sleep(Duration::from_millis(1500));
    let taken = lock.acquire(Some(Duration::from_secs(2))).map(|_| ());
    assert!(
        !session.healthy(),
        "the session cannot bar its names any more, yet reports healthy; \
         acquire under it: {:?}",
        taken.map_err(|e| e.to_string())
    );
}

// holds: a name ending in ".bar" is its own name, not the bar of another:
// "x" held under a session with a lock_delay (bar "lockyard/x.bar") leaves
// "x.bar" free, and destroy() leaves no key and no lease of the session.
#[test]
fn a_name_ending_in_bar_does_not_collide_and_destroy_leaves_nothing() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 3, 10);
    let x = lock_under(&server.url(), "x", &session, "v");
    let guard = x.acquire(None).unwrap();
    assert!(server.keys().contains(&"lockyard/x.bar".to_owned()));
    let x_bar = lock_under(&server.url(), "x.bar", &session, "w");
    let guard2 = x_bar.acquire(Some(Duration::from_secs(2))).unwrap();
    let plain = plain_lock(&server, "x.bar");
    assert!(plain.try_acquire().unwrap().is_none());
    assert_eq!(server.keys().len(), 4, "{:?}", server.keys());
    session.destroy().unwrap();
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    drop(plain);
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.leases().is_empty(), "{:?}", server.leases());
    drop((guard, guard2));
}

// holds: destroy() racing acquires in other threads: no acquire succeeds
// after destroy returned, and nothing of the session is left in etcd.
#[test]
fn destroy_racing_acquires_leaves_nothing() {
    let server = EtcdServer::start();
    let session = session(&server.url(), 3, 10);
    let locks: Vec<Lock> = (0..4)
        .map(|i| lock_under(&server.url(), &format!("race{i}"), &session, "v"))
        .collect();
    std::thread::scope(|s| {
        for lock in &locks {
            s.spawn(|| {
                let until = Instant::now() + Duration::from_secs(2);
                while Instant::now() < until {
                    if let Ok(guard) = lock.acquire(Some(Duration::from_millis(200))) {
                        drop(guard);
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        session.destroy().unwrap();
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    assert!(server.leases().is_empty(), "{:?}", server.leases());
}
