//! Holds nobody waits for: those of a holder whose owner ended (a Ruby
//! Thread that died holding a lock), and those of a lock dropped where
//! blocking is not allowed. Both are given back in the background.

mod support;

use std::time::{Duration, Instant};

use lockyard::redis::{Lock, Session};
use lockyard::wait::InTime;
use lockyard::{as_holder, owners};
use support::RedisServer;

fn lock(server: &RedisServer, name: &str) -> Lock {
    Lock::builder(server.url(), name)
        .ttl(Duration::from_secs(2))
        .refresh_interval(Duration::from_millis(600))
        .build()
        .unwrap()
}

/// How long another lock object waits for `name` (its hold, were it kept,
/// is refreshed every 0.6 s: a lease running out cannot win this).
fn wait_to_take(server: &RedisServer, name: &str) -> Duration {
    let started = Instant::now();
    let other = lock(server, name);
    drop(other.acquire(Some(Duration::from_millis(1500))).unwrap());
    started.elapsed()
}

#[test]
fn an_ended_owner_s_holds_are_released_in_the_background() {
    let server = RedisServer::start();
    let lock = lock(&server, "owned");
    let (fiber, thread) = (0x0fee_0001, 0x0fee_0002);
    assert!(as_holder(fiber, || lock
        .acquire_interruptibly(None, &|| false)
        .in_time())
    .unwrap());
    owners::note_owner(fiber, thread);
    assert!(owners::owners_holding().contains(&thread));
    assert!(owners::owner_ended(thread + 1).is_empty(), "another owner");

    let started = Instant::now();
    assert_eq!(owners::owner_ended(thread), [r#"lock "owned""#]);
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "never waits"
    );
    assert!(!as_holder(fiber, || lock.healthy()));
    assert!(!as_holder(fiber, || lock.owned()).unwrap());
    assert!(wait_to_take(&server, "owned") < Duration::from_secs(1));
    assert!(!owners::owners_holding().contains(&thread));
}

#[test]
fn an_owner_s_released_holder_is_forgotten() {
    let server = RedisServer::start();
    let lock = lock(&server, "let go");
    let (fiber, thread) = (0x0fee_0011, 0x0fee_0012);
    assert!(as_holder(fiber, || lock
        .acquire_interruptibly(None, &|| false)
        .in_time())
    .unwrap());
    owners::note_owner(fiber, thread);
    assert!(as_holder(fiber, || lock.release()).unwrap());
    assert!(!owners::owners_holding().contains(&thread));
    assert!(owners::owner_ended(thread).is_empty());
}

#[test]
fn releasing_in_the_background_never_waits_on_the_server() {
    let server = RedisServer::start();
    let lock = lock(&server, "dropped");
    // Held without a guard, as a binding holds it.
    std::mem::forget(lock.acquire(None).unwrap());
    server.signal("STOP");
    let started = Instant::now();
    lock.release_all_in_background();
    drop(lock);
    let took = started.elapsed();
    server.signal("CONT");
    assert!(took < Duration::from_millis(100), "took {took:?}");
    assert!(wait_to_take(&server, "dropped") < Duration::from_secs(1));
}

#[test]
fn a_session_destroyed_in_the_background_frees_its_locks_without_waiting() {
    let server = RedisServer::start();
    let session = Session::builder(server.url())
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let under = Lock::builder(server.url(), "under a session")
        .session(&session)
        .build()
        .unwrap();
    std::mem::forget(under.acquire(None).unwrap());
    server.signal("STOP");
    let started = Instant::now();
    session.destroy_in_background();
    assert!(!session.healthy());
    drop(session);
    let took = started.elapsed();
    server.signal("CONT");
    assert!(took < Duration::from_millis(100), "took {took:?}");
    assert!(wait_to_take(&server, "under a session") < Duration::from_secs(1));
}
