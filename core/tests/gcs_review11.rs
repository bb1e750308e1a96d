//! Review 11 of the GCS lock's waits (commit 5cc02cd: a stopped wait's
//! clean-up re-reads for 5 s when its create got no answer; a release's
//! first try always sent). Tests whose doc starts with "FINDING:"
//! reproduce problems found at a54015b and fail there.
//!
//! The common thread: `create_unanswered` (and `create_in_doubt`) describe
//! only the create's *last* try. A create whose first try was cut off by
//! the request timeout is retried; the retry's answer (a 412 from someone
//! else's object, or a 200) or the read after it clears the doubt, although
//! the first try is still on its way to the server and lands whenever it
//! arrives (over HTTP a request cut off by the client is not taken back).
//! When it lands after the object was freed, it writes an object of ours
//! that nobody refreshes or deletes: everyone else waits out its whole TTL.

mod gcs_support;

use std::time::{Duration, Instant};

use gcs_support::lands_late::LandsLate;
use gcs_support::{builder, FaithfulStore};
use lockyard::Error;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Polls (up to `limit`) until the store holds no object.
fn gone_within(store: &FaithfulStore, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while store.object().is_some() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(MS(20));
    }
    true
}

/// FINDING: a timed-out acquire leaves the object of its first create try.
/// Someone holds the lock. Our acquire's first create is cut off by the
/// request timeout (300 ms) while still on its way; the retry meets their
/// object (412), so `try_create` sets `create_unanswered = false`, and the
/// read after it clears `create_in_doubt`. The acquire times out (Ok(None)
/// from `wait_for_lock`: no clean-up at all). They release; our first try
/// then lands (1.5 s) and creates an object of our identity that nobody
/// refreshes or deletes: everyone waits out its TTL (30 s here).
#[test]
fn finding_a_timed_out_acquires_first_create_try_lands_after_its_retry_met_another_holder() {
    let store = FaithfulStore::new();
    let someone = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let theirs = someone.acquire(Some(Duration::from_secs(1))).unwrap();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .request_timeout(MS(300))
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    late.next_create_lands_after(MS(1500));
    let acquired = lock.acquire(Some(MS(800)));
    assert!(
        matches!(acquired, Err(Error::Timeout { .. })),
        "{:?}",
        acquired.map(|_| ())
    );
    assert!(theirs.release().unwrap());
    assert!(
        store.object().is_none(),
        "released; our first try has not landed yet"
    );
    // Our first try lands at 1.5 s; the clean-up window (5 s) is generous.
    std::thread::sleep(MS(1000));
    assert!(
        gone_within(&store, Duration::from_secs(5)),
        "a timed-out acquire's first create try landed after it gave up and stays, \
         refreshed by nobody, for its ttl: {:?}",
        store.object()
    );
    let next = someone.try_acquire().unwrap();
    assert!(next.is_some(), "the lock is blocked by the leftover");
}

/// FINDING: the same for an interrupted (or dropped) wait: once the read
/// after the retry's 412 cleared `create_in_doubt`, the stopped wait
/// cleans nothing up, and its first create try lands after the holder
/// released.
#[test]
fn finding_an_interrupted_waits_first_create_try_lands_after_its_retry_met_another_holder() {
    let store = FaithfulStore::new();
    let someone = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let theirs = someone.acquire(Some(Duration::from_secs(1))).unwrap();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .request_timeout(MS(300))
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    late.next_create_lands_after(MS(1500));
    let started = Instant::now();
    let interrupted = || started.elapsed() >= MS(700);
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(10)), &interrupted);
    assert!(
        matches!(acquired, Err(Error::Interrupted(_))),
        "{acquired:?}"
    );
    assert!(theirs.release().unwrap());
    assert!(
        store.object().is_none(),
        "released; our first try has not landed yet"
    );
    std::thread::sleep(MS(1000));
    assert!(
        gone_within(&store, Duration::from_secs(5)),
        "an interrupted wait's first create try landed after it stopped and stays, \
         refreshed by nobody, for its ttl: {:?}",
        store.object()
    );
}

/// FINDING: the same after a successful acquire and release. The first
/// create try is cut off by the request timeout; the retry creates the
/// object and the caller holds it; it releases (the delete lands). The
/// first try then lands on the freed name: an object of our identity,
/// held by nobody, refreshed by nobody, that blocks everyone for its TTL.
/// Neither the hold nor its release remembers that a try of its create
/// was never answered.
#[test]
fn finding_a_released_holds_first_create_try_lands_after_the_release() {
    let store = FaithfulStore::new();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .request_timeout(MS(300))
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    late.next_create_lands_after(MS(1200));
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(guard.release().unwrap());
    assert!(store.object().is_none());
    std::thread::sleep(MS(1000));
    assert!(
        gone_within(&store, Duration::from_secs(5)),
        "a released hold's first create try landed after the release and stays, \
         refreshed by nobody, for its ttl: {:?}",
        store.object()
    );
    let someone = builder(&store).build().unwrap();
    assert!(
        someone.try_acquire().unwrap().is_some(),
        "blocked by the leftover"
    );
}

/// FINDING: a timeout is no longer honoured when the create's last try got
/// no answer. `try_acquire` (no time to wait) rides out a blip for
/// `SHORTEST_RETRY` (2 s), as documented; every create answered 503
/// (transient, so `create_unanswered` is set) then sends the failed wait
/// into `remove_leftover`, which re-reads every 200 ms until
/// `LEFTOVER_CLEANUP` (5 s) runs out although every read shows the name
/// free: the caller (blocking, or an async task) gets its error only after
/// about 7 s. The same for any acquire whose timeout ends while the
/// bucket is flaky: 5 s more than asked for.
#[test]
fn finding_a_try_acquire_against_a_flaky_bucket_waits_out_the_whole_leftover_clean_up() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    store.inject(
        gcs_support::Op::Create,
        gcs_support::Fault::Unavailable,
        1000,
    );
    let started = Instant::now();
    let tried = lock.try_acquire();
    let took = started.elapsed();
    assert!(tried.is_err(), "{:?}", tried.map(|g| g.is_some()));
    assert!(
        took < Duration::from_secs(4),
        "try_acquire took {took:?} (SHORTEST_RETRY is 2 s): the failed wait re-read a free \
         name for the clean-up's 5 s before answering"
    );
}

/// FINDING: a stopped wait's clean-up stops at the first object of ours it
/// removes, although an earlier try of the same create is still on its
/// way. The first try is cut off by the request timeout (lands at 1.5 s);
/// the second lands but its reply is lost; the wait is interrupted in the
/// pause after it. `remove_leftover` finds the second try's object,
/// deletes it and returns; the first try then lands on the freed name and
/// stays for its TTL.
#[test]
fn finding_a_stopped_waits_clean_up_ends_before_its_first_create_try_landed() {
    let store = FaithfulStore::new();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .request_timeout(MS(300))
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    late.next_create_lands_after(MS(1500));
    store.inject(gcs_support::Op::Create, gcs_support::Fault::LoseReply, 1);
    let started = Instant::now();
    let interrupted = || started.elapsed() >= MS(500);
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(10)), &interrupted);
    assert!(
        matches!(acquired, Err(Error::Interrupted(_))),
        "{acquired:?}"
    );
    std::thread::sleep(MS(1500));
    assert!(
        gone_within(&store, Duration::from_secs(5)),
        "the first create try landed after the stopped wait's clean-up removed the \
         second's, and stays for its ttl: {:?}",
        store.object()
    );
}
