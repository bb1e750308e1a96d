//! Review 10 of the GCS lock's redesigned waits (commit 49e60bb: every
//! wait a task on lockyard's runtime, stopped by its caller going away;
//! one acquire per holder at a time): tests whose doc starts with
//! "FINDING:" reproduce problems found at 49e60bb and fail there; the
//! others are edges that were checked and held at 49e60bb, kept as
//! coverage.

mod gcs_support;

use std::time::{Duration, Instant};

use gcs_support::lands_late::LandsLate;
use gcs_support::{builder, FaithfulStore, Fault, Op};
use lockyard::Error;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Waits (up to `limit`) until `condition` holds; false if it never did.
async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(MS(10)).await;
    }
    true
}

/// FINDING: a stopped wait "awaits a request already on its way" only up
/// to the request timeout. Here the create is still on its way when the
/// caller's future is dropped (100 ms); at the request timeout (300 ms)
/// `with_timeout` cuts it off as transient, the stopped wait ends at its
/// pause and `remove_leftover` reads once: nothing yet, so it is done.
/// The create reaches the server at 1.2 s and lands: an object of ours,
/// refreshed by nobody, blocks everyone for its whole TTL although
/// `LEFTOVER_CLEANUP` (5 s) had time left to see it. The review-9 finding
/// `finding_an_async_acquire_dropped_while_its_create_is_on_its_way_...`
/// again, for any create slower than the request timeout (20 s by default,
/// against an `EXIT_WAIT` of 10 s, a Ctrl-C'd process does not even wait
/// that long).
#[tokio::test(flavor = "current_thread")]
async fn finding_a_stopped_waits_create_cut_off_by_the_request_timeout_lands_after_its_clean_up() {
    let store = FaithfulStore::new();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .request_timeout(MS(300))
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    late.next_create_lands_after(MS(1200));
    let cut_off = tokio::time::timeout(MS(100), lock.acquire_async(None)).await;
    assert!(
        cut_off.is_err(),
        "the acquire was cut off before its create landed"
    );
    assert!(!lock.locked_according_to_internal_state());
    // The create lands at 1.2 s, well inside the clean-up's 5 s.
    tokio::time::sleep(MS(1400)).await;
    let removed = eventually(Duration::from_secs(5), || store.object().is_none()).await;
    assert!(
        removed,
        "a dropped acquire whose create outlived the request timeout left its object \
         (blocks others for its ttl): {:?}",
        store.object()
    );
}

/// FINDING: `Requests::call` now looks at the interrupt before the first
/// try of a request, not only in the pauses between tries (7a62897 always
/// sent the first try). A release (or a `with` block's leave) whose
/// interrupt is already pending — a second Ctrl-C, or the Python binding's
/// `interrupted`, which answers true at once on a thread that may no
/// longer attach while the interpreter exits — has already stopped the
/// hold's refresher and taken it out of the holds, then sends no delete at
/// all: the object stays, refreshed by nobody and released by nobody,
/// for its whole TTL (5 minutes by default), and the holder cannot release
/// it again (NotLocked). The interrupt should end retries, not the one try
/// that gives the lock back.
#[test]
fn finding_a_release_whose_interrupt_is_already_pending_sends_no_delete() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    lock.acquire_interruptibly(Some(Duration::from_secs(1)), &|| false)
        .unwrap();
    let released = lock.release_interruptibly(&|| true);
    let left = store.object();
    assert!(
        left.is_none(),
        "an interrupted release sent no delete ({released:?}): the object stays for its ttl: \
         {left:?}"
    );
    assert!(matches!(released, Ok(true)), "{released:?}");
}

/// Holds at 49e60bb: the same thread re-acquires right after an interrupt,
/// while its old wait's read is still on its way. That read lands after
/// the new hold's create and shows an object of the thread's own identity,
/// which a wait takes for an abandoned hold of its own and deletes: the
/// stopped old wait sends nothing more, so the new hold stays.
#[test]
fn an_interrupted_waits_late_read_leaves_the_same_threads_new_hold_alone() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let someone = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let theirs = someone.acquire(Some(Duration::from_secs(1))).unwrap();
    // The old wait's create meets their object; its read then lands at 400 ms.
    store.inject(Op::Get, Fault::Slow(MS(400)), 1);
    let started = Instant::now();
    let interrupted = || started.elapsed() >= MS(100);
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(10)), &interrupted);
    assert!(
        matches!(acquired, Err(Error::Interrupted(_))),
        "{acquired:?}"
    );
    assert!(
        started.elapsed() < MS(300),
        "the interrupt waited for the read"
    );
    assert!(theirs.release().unwrap());
    let guard = lock.acquire(Some(Duration::from_secs(1))).unwrap();
    let token = guard.fencing_token();
    std::thread::sleep(MS(800));
    assert_eq!(
        store.object().map(|o| o.version.generation as u64),
        Some(token),
        "the old wait deleted the new hold of its own identity"
    );
    guard.check_health().unwrap();
    assert!(guard.release().unwrap());
}

/// Holds at 49e60bb: the same thread acquires again right after an
/// interrupt that came while its old wait's create had landed but its
/// reply was late (as Ruby's binding re-runs a call whose interrupt raised
/// nothing). The new acquire finds the old wait's object, of its own
/// identity, and clears it; the old wait, handed that hold once the reply
/// comes, gives it back by its exact version: one object stays, the new
/// hold's, with a newer token, healthy.
#[test]
fn an_interrupted_waits_late_hold_is_given_back_without_touching_the_new_one() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    store.inject(Op::Create, Fault::LateReply(MS(300)), 1);
    let started = Instant::now();
    let interrupted = || started.elapsed() >= MS(100);
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(10)), &interrupted);
    assert!(
        matches!(acquired, Err(Error::Interrupted(_))),
        "{acquired:?}"
    );
    let old = store.object().expect("the old wait's create landed");
    let guard = lock.acquire(Some(Duration::from_secs(2))).unwrap();
    let token = guard.fencing_token();
    assert!(token > old.version.generation as u64);
    std::thread::sleep(MS(1000));
    assert_eq!(
        store.object().map(|o| o.version.generation as u64),
        Some(token),
        "the old wait's give-back touched the new hold"
    );
    guard.check_health().unwrap();
    assert!(guard.release().unwrap());
    assert!(store.object().is_none());
}
