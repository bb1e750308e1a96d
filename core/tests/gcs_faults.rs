//! The GCS lock under transient faults (issue 21): lost replies, bursts of
//! 503s, slow requests, injected by the faithful in-process store between
//! the lock and its object. "Lost" must rest on an answer the server gave;
//! "could not ask" is retried until the caller's timeout (acquire) or the
//! lease deadline (refresh, release).

mod gcs_support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gcs_support::{builder, FaithfulStore, Fault, Op};
use lockyard::Error;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Issue 21, case 3: a refresh lands but its reply is lost; the next
/// refresh gets 412 and the read that would show the object is still ours
/// gets a 503. That is "could not ask", not "taken over".
#[test]
fn a_503_on_the_read_after_a_lost_refresh_reply_is_not_a_loss() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(50)).build().unwrap();
    assert!(lock.acquire_interruptibly(None, &|| false).unwrap());
    store.inject(Op::Update, Fault::LoseReply, 1);
    store.inject(Op::Get, Fault::Unavailable, 1);
    thread::sleep(MS(400));
    assert!(lock.healthy(), "{:?}", lock.check_health());
    assert!(
        store.gets.load(Ordering::SeqCst) >= 2,
        "the read was retried"
    );
    assert!(lock.release().unwrap(), "the object was ours all along");
    assert!(store.object().is_none());
}

/// A refresh that cannot read its object keeps trying until the lease runs
/// out, then says so; it never claims a takeover it did not see.
#[test]
fn a_refresh_that_cannot_read_says_the_lease_ran_out_not_taken_over() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(50)).build().unwrap();
    assert!(lock.acquire_interruptibly(None, &|| false).unwrap());
    store.inject(Op::Update, Fault::LoseReply, 1);
    store.inject(Op::Get, Fault::Unavailable, 1000);
    thread::sleep(MS(1800));
    let problem = lock.check_health().unwrap_err().to_string();
    assert!(!problem.contains("another holder"), "{problem}");
    assert!(problem.contains("503"), "{problem}");
}

/// Issue 21, case 4: a create lands with its reply lost, then 503s go on
/// for longer than the old five tries (1.5 s): acquire keeps trying within
/// its timeout and gets the lock.
#[test]
fn a_burst_of_503s_during_acquire_is_retried_until_the_timeout() {
    let store = FaithfulStore::new();
    store.inject(Op::Create, Fault::LoseReply, 1);
    store.inject(Op::Create, Fault::Unavailable, 7);
    let lock = builder(&store).build().unwrap();
    let started = Instant::now();
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(20)), &|| false);
    assert!(acquired.unwrap(), "after {:?}", started.elapsed());
    assert!(started.elapsed() > MS(1500), "{:?}", started.elapsed());
    assert_eq!(store.object().unwrap().identity, Some(lock.identity()));
    assert!(lock.healthy());
    assert!(lock.release().unwrap());
}

/// Issue 21, case 4, the other half: when the 503s outlast the timeout,
/// acquire reports the backend error and first removes the object its lost
/// create left, instead of blocking everyone for a whole TTL.
#[test]
fn an_acquire_that_gives_up_removes_the_object_its_lost_create_left() {
    let store = FaithfulStore::new();
    store.inject(Op::Create, Fault::LoseReply, 1);
    store.inject(Op::Create, Fault::Unavailable, 1000);
    let lock = builder(&store)
        .ttl(Duration::from_secs(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = lock
        .acquire_interruptibly(Some(Duration::from_secs(3)), &|| false)
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(err.to_string().contains("503"), "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(store.object(), None, "the landed create was cleaned up");
}

/// Issue 21, case 5: our delete lands, its reply is lost, the retry gets
/// 404. The lock was ours until we deleted it: release says true.
#[test]
fn a_delete_whose_reply_was_lost_counts_as_released() {
    let store = FaithfulStore::new();
    let lock = builder(&store).build().unwrap();
    assert!(lock.acquire_interruptibly(None, &|| false).unwrap());
    store.inject(Op::Delete, Fault::LoseReply, 1);
    assert!(lock.release().unwrap());
    assert!(store.object().is_none());
}

/// A release during a 503 burst keeps trying (within the lease) instead of
/// leaving the object for its TTL.
#[test]
fn a_release_during_a_503_burst_is_retried_within_the_lease() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    assert!(lock.acquire_interruptibly(None, &|| false).unwrap());
    store.inject(Op::Delete, Fault::Unavailable, 6);
    assert!(lock.release().unwrap());
    assert!(store.object().is_none());
    assert_eq!(store.deletes.load(Ordering::SeqCst), 7);
}

/// Issue 20, item 6: the create landed but the clock-correction write after
/// it keeps failing. The object is given back deliberately, never left
/// under our identity until its TTL.
#[test]
fn a_failed_clock_correction_gives_the_created_object_back() {
    let store = FaithfulStore::new();
    store.set_skew(3600.0);
    store.inject(Op::Update, Fault::Unavailable, 1000);
    let lock = builder(&store)
        .ttl(Duration::from_secs(300))
        .build()
        .unwrap();
    let err = lock
        .acquire_interruptibly(Some(MS(500)), &|| false)
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert_eq!(store.object(), None, "nothing left under our identity");
    assert!(!lock.owned_according_to_internal_state());
}

/// Issue 20, item 6, when the correction is refused: someone found the
/// object stale by the server's clock and took it over. Ours is gone, the
/// new holder's stays, and we wait like anyone.
#[test]
fn a_refused_clock_correction_leaves_the_new_holder_alone() {
    let store = FaithfulStore::new();
    store.set_skew(3600.0);
    // The correction hangs long enough for a waiter to judge our object
    // stale by the server's clock and take it over.
    store.inject(Op::Update, Fault::Slow(MS(400)), 1);
    let lock = Arc::new(builder(&store).build().unwrap());
    let acquirer = {
        let lock = lock.clone();
        thread::spawn(move || lock.acquire_interruptibly(Some(MS(800)), &|| false))
    };
    thread::sleep(MS(100));
    let object = store.object().unwrap();
    store.remove();
    let theirs = store.put("someone-else", 60.0);
    assert_ne!(object.version, theirs.version);
    assert!(!acquirer.join().unwrap().unwrap(), "timed out waiting");
    assert_eq!(
        store.object(),
        Some(theirs),
        "the new holder's object stays"
    );
}
