//! The GCS lock under transient faults (issue 21): lost replies, bursts of
//! 503s, slow requests, injected by the faithful in-process store between
//! the lock and its object. "Lost" must rest on an answer the server gave;
//! "could not ask" is retried until the caller's timeout (acquire) or the
//! lease deadline (refresh, release). And the other side of a lost reply:
//! a metadata change someone else made is never taken for our own (issue
//! 14).

mod gcs_support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gcs_support::{builder, FaithfulStore, Fault, Op};
use lockyard::gcs::StoreError;
use lockyard::wait::InTime;
use lockyard::Error;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Issue 21, case 3: a refresh lands but its reply is lost; the next
/// refresh gets 412 and the read that would show the object is still ours
/// gets a 503. That is "could not ask", not "taken over".
#[test]
fn a_503_on_the_read_after_a_lost_refresh_reply_is_not_a_loss() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(50)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
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
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
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
    let acquired = lock
        .acquire_interruptibly(Some(Duration::from_secs(20)), &|| false)
        .in_time();
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
        .in_time()
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(err.to_string().contains("503"), "{err}");
    assert!(err.is_transient(), "{err}");
    let cause = std::error::Error::source(&err).expect("the store's error");
    assert!(
        matches!(cause.downcast_ref(), Some(StoreError::Transient(_))),
        "{cause:?}"
    );
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
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
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
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
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
        .in_time()
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
        thread::spawn(move || {
            lock.acquire_interruptibly(Some(MS(800)), &|| false)
                .in_time()
        })
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

/// Until the lease runs out (every later refresh hanging until its request
/// timeout, so no failure is counted), checks that the holder never says
/// healthy while the server's clock already shows its object stale: while
/// another holder could take it over.
fn never_healthy_past_expiry(store: &FaithfulStore, lock: &lockyard::gcs::Lock) {
    let started = Instant::now();
    let mut healthy_samples = 0;
    while started.elapsed() < Duration::from_secs(8) {
        // The server's `Date` first: a lease healthy after it was live at it.
        let date = store.now().floor();
        let healthy = lock.healthy();
        let expires_at = store.object().unwrap().expires_at.unwrap();
        if !healthy {
            assert!(healthy_samples > 0, "healthy after the faults");
            return;
        }
        healthy_samples += 1;
        assert!(
            date <= expires_at,
            "healthy while stale by the server's clock ({date} > {expires_at})"
        );
        thread::sleep(MS(10));
    }
    panic!("still healthy though no refresh landed for 8 s");
}

/// A lock whose refreshes give up after 3 s, and whose lease lasts 4 s.
fn patient_lock(store: &Arc<FaithfulStore>) -> lockyard::gcs::Lock {
    builder(store)
        .ttl(Duration::from_secs(4))
        .refresh_interval(MS(300))
        .request_timeout(Duration::from_secs(3))
        .build()
        .unwrap()
}

/// Issue 19, case 6: a refresh whose reply comes back 2 s late (the server
/// stamped it at once). Taking the late `Date` for the server's clock of
/// the moment the reply arrived makes the next `expires_at` 2 s early,
/// while the holder counts its lease from when that write was sent.
#[test]
fn a_reply_delayed_2_s_never_leaves_the_holder_healthy_past_its_expiry() {
    let store = FaithfulStore::new();
    let lock = patient_lock(&store);
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.inject(Op::Update, Fault::LateReply(Duration::from_secs(2)), 1);
    store.inject(Op::Update, Fault::Pass, 1);
    store.inject(Op::Update, Fault::Slow(Duration::from_secs(10)), 100);
    while store.updates.load(Ordering::SeqCst) < 2 {
        thread::sleep(MS(5));
    }
    never_healthy_past_expiry(&store, &lock);
}

/// Issue 19, case 6: the server's clock 7.3 s behind ours, and a reply
/// 1.5 s late: the first object is corrected, and from then on the
/// holder's deadline follows the server's clock, never ours.
#[test]
fn a_skewed_server_and_a_late_reply_never_leave_the_holder_healthy_past_its_expiry() {
    let store = FaithfulStore::new();
    store.set_skew(-7.3);
    let lock = patient_lock(&store);
    store.inject(Op::Update, Fault::Pass, 1);
    store.inject(Op::Update, Fault::LateReply(MS(1500)), 1);
    store.inject(Op::Update, Fault::Pass, 1);
    store.inject(Op::Update, Fault::Slow(Duration::from_secs(10)), 100);
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    while store.updates.load(Ordering::SeqCst) < 3 {
        thread::sleep(MS(5));
    }
    never_healthy_past_expiry(&store, &lock);
}

/// Holds the lock with refreshes every 200 ms, lets someone else PATCH the
/// object's metadata, and checks the gem's answer: unhealthy within one
/// refresh, with the reason in `last_refresh_error`, and an unlock that
/// leaves the changed object alone.
fn someone_else_changes_the_metadata(change: impl FnOnce(&mut lockyard::gcs::LockObject)) {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(200)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    let changed = store.patch_by_someone_else(change);
    let started = Instant::now();
    while lock.healthy() && started.elapsed() < MS(1000) {
        thread::sleep(MS(10));
    }
    assert!(
        started.elapsed() < MS(400),
        "still healthy {:?} after the change",
        started.elapsed()
    );
    assert!(matches!(
        lock.check_health(),
        Err(Error::LockUnhealthy { .. })
    ));
    let reason = lock.last_refresh_error().unwrap();
    assert!(reason.contains("changed by someone else"), "{reason}");
    assert!(!lock.release().unwrap(), "it was lost before the release");
    assert_eq!(store.object(), Some(changed), "the changed object stays");
}

#[test]
fn a_new_expires_at_written_by_someone_else_makes_the_holder_unhealthy() {
    someone_else_changes_the_metadata(|object| {
        object.expires_at = Some(object.expires_at.unwrap() + 3600.0);
    });
}

/// Not a takeover (that is a new generation): an edit of our object.
#[test]
fn a_new_identity_written_by_someone_else_makes_the_holder_unhealthy() {
    someone_else_changes_the_metadata(|object| object.identity = Some("ops".into()));
}

/// A custom key of someone else's (not modelled by the store) changes
/// nothing we wrote but the metageneration: still not ours.
#[test]
fn a_custom_key_written_by_someone_else_makes_the_holder_unhealthy() {
    someone_else_changes_the_metadata(|_| {});
}

/// Someone else writes between our refreshes and we release before the
/// next one notices: the delete's 412 and a read show the change, and the
/// object is left alone.
#[test]
fn a_release_after_someone_else_changed_the_metadata_leaves_the_object() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(10))
        .refresh_interval(Duration::from_secs(2))
        .build()
        .unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    let changed = store.patch_by_someone_else(|object| object.expires_at = Some(0.0));
    assert!(!lock.release().unwrap());
    assert_eq!(store.object(), Some(changed));
}

/// Every refresh lands and loses its reply, so the refresher never learns
/// its new metageneration; the release's delete meets a 412, and a read
/// shows a revision our own write made: ours to delete.
#[test]
fn a_release_after_refreshes_whose_replies_were_lost_deletes_the_object() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(100)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.inject(Op::Update, Fault::LoseReply, 1000);
    thread::sleep(MS(700));
    let object = store.object().unwrap();
    assert!(object.version.metageneration >= 3, "{object:?}");
    assert!(lock.release().unwrap());
    assert!(store.object().is_none());
}

/// A refresh whose reply was lost, then someone else's change on top of
/// our own revision: our nonce is still there, but no longer on the
/// revision it made.
#[test]
fn someone_elses_change_after_our_lost_refresh_reply_is_not_taken_for_ours() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(200)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.inject(Op::Update, Fault::LoseReply, 1);
    // Fail every later write, so our lost write stays the last of ours.
    store.inject(Op::Update, Fault::Unavailable, 1000);
    while store.object().unwrap().version.metageneration < 2 {
        thread::sleep(MS(5));
    }
    let changed = store.patch_by_someone_else(|_| {});
    assert!(!lock.release().unwrap());
    assert_eq!(store.object(), Some(changed));
}

/// Review: a release that meets two writes of its own hold. A refresh
/// lands with its reply lost (metageneration 2); the next one meets a 412,
/// reads its own revision 2 and PATCHes it, and that request times out
/// while still on its way (the faithful store cannot keep a request in
/// flight, so it fails at once and is made to land later). The release's
/// delete meets a 412 and reads revision 2; the late PATCH then lands
/// (revision 3, our nonce), the second delete meets a 412 too, and the
/// read shows revision 3: ours, by our nonce. Every revision the reads
/// showed was ours, so the release must go on deleting: a release that
/// gave up after two tries answered false ("no longer ours") and left our
/// object, refreshed by nobody, blocking everyone until it went stale.
#[test]
fn a_release_that_meets_two_late_writes_of_its_own_still_deletes_its_object() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(10))
        .refresh_interval(MS(100))
        .build()
        .unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.inject(Op::Update, Fault::LoseReply, 1);
    // The next refresh: its 412 (no fault), then the PATCH that will land late.
    store.inject(Op::Update, Fault::Pass, 1);
    store.inject(Op::Update, Fault::Reset, 1);
    store.inject(Op::Update, Fault::Unavailable, 1000);
    // The refresh's own read, then the release's.
    store.inject(Op::Get, Fault::Pass, 1);
    store.inject(Op::Get, Fault::ThenTheHoldersLateWriteLands, 1);
    while store.updates.load(Ordering::SeqCst) < 3 {
        thread::sleep(MS(5));
    }
    assert_eq!(store.object().unwrap().version.metageneration, 2);
    let released = lock.release().unwrap();
    let left = store.object();
    assert!(
        released && left.is_none(),
        "release answered {released} and left our own object {left:?}"
    );
}

/// Review: a delete the server refuses for good (HTTP 403: a principal
/// without `storage.objects.delete`, an object under a hold) leaves the
/// object, unchanged and ours: that is an error to report. A release that
/// read the object then saw our own revision, took it for "changed by
/// someone else" and answered false, as if the lock had been lost.
#[test]
fn a_delete_refused_for_good_is_a_backend_error_not_a_lost_lock() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(10))
        .refresh_interval(Duration::from_secs(3))
        .build()
        .unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    let ours = store.object().unwrap();
    store.inject(Op::Delete, Fault::Refused, 1);
    let released = lock.release();
    assert_eq!(store.object(), Some(ours), "the refused delete left it");
    assert!(
        matches!(&released, Err(Error::Backend { message, .. }) if message.contains("403")),
        "{released:?}"
    );
}
