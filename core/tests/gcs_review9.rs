//! Review 9 of the GCS lock's `_async` twins (commits 0562866 and 617d3ff):
//! tests named `finding_*` reproduce problems found at 617d3ff and fail
//! there; the others are edges that were checked and held at 617d3ff,
//! kept as coverage.

mod gcs_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// FINDING: with `thread_safe(false)` every task of the process writes the
/// same identity, and `PerHolder::acquire_async` does not keep a second
/// task from waiting while a first one waits. When the lock frees up, the
/// first task creates the object and holds it; the second one's next look
/// finds an object "of its own identity", takes it for an abandoned hold of
/// this instance, deletes it, creates its own, and only then finds the
/// holder 0 taken and gives that back (AlreadyLocked). The first task still
/// holds the lock and reports it healthy, but there is no object on the
/// server any more: anyone can take it, and two hold it at once.
#[tokio::test(flavor = "current_thread")]
async fn finding_two_waiting_tasks_of_a_thread_unsafe_lock_delete_each_others_hold() {
    let store = FaithfulStore::new();
    let lock = Arc::new(
        builder(&store)
            .thread_safe(false)
            .ttl(Duration::from_secs(30))
            .build()
            .unwrap(),
    );
    let someone = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let theirs = someone.acquire_async(Some(MS(1000))).await.unwrap();

    let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel::<Option<u64>>();
    let done = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (lock, held_tx, done) = (lock.clone(), held_tx.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            match lock.acquire_async(Some(MS(5000))).await {
                Ok(guard) => {
                    held_tx.send(Some(guard.fencing_token())).unwrap();
                    done.notified().await;
                    let _ = guard.release_async().await;
                }
                Err(Error::AlreadyLocked(_)) => held_tx.send(None).unwrap(),
                Err(other) => panic!("unexpected error: {other}"),
            }
        }));
    }
    // Both wait behind `someone`.
    tokio::time::sleep(MS(200)).await;
    assert!(theirs.release_async().await.unwrap());
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let outcome = tokio::time::timeout(MS(5000), held_rx.recv()).await;
        outcomes.push(outcome.expect("both waits ended").unwrap());
    }
    let winner = outcomes
        .iter()
        .flatten()
        .copied()
        .next()
        .expect("one task holds the lock");
    // Let the loser's give-back (in the background) run its course.
    tokio::time::sleep(MS(300)).await;
    assert!(lock.healthy(), "the winner's hold is reported healthy");
    let on_server = store.object().map(|o| o.version.generation as u64);
    // Anyone else now takes the lock the winner still holds.
    let intruder = someone.try_acquire_async().await.unwrap();
    let intruded = intruder.is_some();
    if let Some(guard) = intruder {
        let _ = guard.release_async().await;
    }
    done.notify_waiters();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        on_server,
        Some(winner),
        "the winning task holds generation {winner}, but the server has {on_server:?}"
    );
    assert!(
        !intruded,
        "two holders: another lock took the object while a task held it"
    );
}

/// FINDING: `Requests::call` and the blocking wait now run under
/// `block_on_interruptibly`, so an interrupt (Ctrl-C, Thread#raise in the
/// bindings) cuts a create that is on its way to the server. The acquire
/// then "removes what it left" with one read right away, before the create
/// lands, finds nothing, and returns Interrupted; the create lands a moment
/// later and the object (ours, refreshed by nobody) blocks everyone until
/// its TTL. Before 0562866 the request in flight ran to its reply and the
/// clean-up saw what it did.
#[test]
fn finding_a_blocking_acquire_interrupted_while_its_create_is_on_its_way_leaves_the_object() {
    let store = FaithfulStore::new();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    late.next_create_lands_after(MS(400));
    let started = Instant::now();
    let interrupted = || started.elapsed() >= MS(100);
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(10)), &interrupted);
    assert!(
        matches!(acquired, Err(Error::Interrupted(_))),
        "{acquired:?}"
    );
    assert!(!lock.locked_according_to_internal_state());
    // The create lands at 400 ms; the clean-up has 5 s to see it.
    std::thread::sleep(MS(1500));
    let left = store.object();
    assert!(
        left.is_none(),
        "an interrupted acquire left its object behind (blocks others for its ttl): {left:?}"
    );
}

/// FINDING: the same for a dropped `acquire_async` future: the drop guard
/// `Acquiring` reads the object once, at once, on a blocking thread, while
/// the create it cut short is still on its way; the create lands after
/// that read and nobody removes it.
#[tokio::test(flavor = "current_thread")]
async fn finding_an_async_acquire_dropped_while_its_create_is_on_its_way_leaves_the_object() {
    let store = FaithfulStore::new();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    late.next_create_lands_after(MS(400));
    let cut_off = tokio::time::timeout(MS(100), lock.acquire_async(None)).await;
    assert!(
        cut_off.is_err(),
        "the acquire was cut off before its create landed"
    );
    assert!(!lock.locked_according_to_internal_state());
    // The create lands at 400 ms; the clean-up then has 6 s to remove it.
    tokio::time::sleep(MS(600)).await;
    let removed = eventually(Duration::from_secs(6), || store.object().is_none()).await;
    assert!(
        removed,
        "a dropped acquire left its object behind (blocks others for its ttl): {:?}",
        store.object()
    );
}

/// FINDING: a create lands but its reply is lost, and its retry is on its
/// way when the wait is dropped. The drop guard reads the first create's
/// object, proves it ours by the nonce and deletes it, which makes room
/// for the retry: it lands after the clean-up (`ifGenerationMatch=0`
/// passes again) and nobody removes it. The existing test
/// `a_create_whose_reply_is_lost_is_cleaned_up_when_the_wait_is_dropped`
/// passes only because the faithful store's `Slow` fault drops a request
/// together with its caller; over HTTP (the Python test of the same name
/// shows it) the retry reaches the server.
#[tokio::test(flavor = "current_thread")]
async fn finding_a_wait_dropped_while_the_retry_of_a_lost_create_is_on_its_way_leaves_the_object() {
    let store = FaithfulStore::new();
    let late = LandsLate::new(&store);
    let lock = builder(&store)
        .store(late.clone())
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    store.inject(Op::Create, Fault::LoseReply, 1);
    late.create_lands_after_skipping(1, MS(500));
    let cut_off = tokio::time::timeout(MS(250), lock.acquire_async(None)).await;
    assert!(cut_off.is_err(), "the wait was dropped during the retry");
    assert!(!lock.locked_according_to_internal_state());
    // The retry reaches the server at about 600 ms.
    tokio::time::sleep(MS(700)).await;
    let removed = eventually(Duration::from_secs(6), || store.object().is_none()).await;
    assert!(
        removed,
        "the dropped wait's retried create left an object: {:?}",
        store.object()
    );
}

/// FINDING: the first create of a lock whose server clock is off writes
/// `expires_at` by the local clock and corrects it with a PATCH before
/// counting the object as ours. A wait dropped while that PATCH is on its
/// way is cleaned up by `remove_leftover`: one read, then a delete of the
/// version it read. When the cut-off PATCH lands between the two (modelled
/// by the store's `ThenTheHoldersLateWriteLands`: the read answers the
/// create's revision, then the PATCH lands), the delete meets a 412, which
/// `remove_leftover_async` ignores (it even logs that it gave the object
/// back): the object, ours and refreshed by nobody, stays until its TTL.
/// `Engine::release` follows such late writes of ours; the clean-up does
/// not.
#[tokio::test(flavor = "current_thread")]
async fn finding_a_wait_dropped_during_the_clock_correction_leaves_the_object_if_that_write_lands_late(
) {
    let store = FaithfulStore::new();
    store.set_skew(5.0);
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    // The correction is on its way when the wait is dropped...
    store.inject(Op::Update, Fault::Slow(MS(500)), 1);
    // ...and lands right after the clean-up's read.
    store.inject(Op::Get, Fault::ThenTheHoldersLateWriteLands, 1);
    let cut_off = tokio::time::timeout(MS(150), lock.acquire_async(None)).await;
    assert!(
        cut_off.is_err(),
        "the wait was dropped during the correction"
    );
    assert_eq!(store.creates.load(Ordering::SeqCst), 1);
    assert!(store.updates.load(Ordering::SeqCst) >= 1);
    let removed = eventually(Duration::from_secs(6), || store.object().is_none()).await;
    assert!(
        removed,
        "the dropped wait's object stays until its ttl: {:?}",
        store.object()
    );
}

/// FINDING at 617d3ff: on a runtime built without its time driver the
/// acquire got past `check_on_tokio` and panicked deep in `tokio::time`.
/// Since the fix, the wait runs on lockyard's runtime and the caller only
/// awaits its outcome: it works on such a runtime (and on any executor).
#[test]
fn an_acquire_awaited_on_a_runtime_without_timers_works() {
    let store = FaithfulStore::new();
    let lock = builder(&store).build().unwrap();
    let outcome = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let guard = lock.acquire_async(Some(MS(1000))).await?;
                    guard.release_async().await
                })
            })
            .join()
    });
    let released = outcome.expect("acquire_async panicked");
    assert!(released.unwrap());
    assert!(store.object().is_none());
}

/// Holds at 617d3ff: dropped while the clock correction's reply is late
/// (the PATCH landed), the wait's clean-up reads the corrected revision,
/// which the writer's nonce proves ours, and deletes it.
#[tokio::test(flavor = "current_thread")]
async fn a_wait_dropped_while_the_corrections_reply_is_late_removes_the_object() {
    let store = FaithfulStore::new();
    store.set_skew(5.0);
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    store.inject(Op::Update, Fault::LateReply(MS(500)), 1);
    let cut_off = tokio::time::timeout(MS(150), lock.acquire_async(None)).await;
    assert!(cut_off.is_err());
    assert_eq!(
        store.object().map(|o| o.version.metageneration),
        Some(2),
        "the correction landed before the drop"
    );
    assert!(
        eventually(Duration::from_secs(6), || store.object().is_none()).await,
        "{:?}",
        store.object()
    );
    assert!(!lock.locked_according_to_internal_state());
}

/// Holds at 617d3ff: a blocking acquire interrupted while the reply of a
/// create that landed is late removes the object before returning
/// Interrupted, and a later acquire of the same lock works at once.
#[test]
fn a_blocking_acquire_interrupted_while_its_creates_reply_is_late_removes_the_object() {
    let store = FaithfulStore::new();
    let lock = builder(&store)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    store.inject(Op::Create, Fault::LateReply(MS(600)), 1);
    let started = Instant::now();
    let interrupt = AtomicBool::new(false);
    let interrupted = || interrupt.load(Ordering::SeqCst) || started.elapsed() >= MS(100);
    let acquired = lock.acquire_interruptibly(Some(Duration::from_secs(10)), &interrupted);
    assert!(
        matches!(acquired, Err(Error::Interrupted(_))),
        "{acquired:?}"
    );
    assert!(
        started.elapsed() < MS(500),
        "the interrupt waited for the reply"
    );
    // Since the fix of the findings above, the wait goes on in the
    // background until the create's reply comes, and gives the object back.
    let deadline = Instant::now() + MS(3000);
    while store.object().is_some() {
        assert!(Instant::now() < deadline, "{:?}", store.object());
        std::thread::sleep(MS(20));
    }
    let guard = lock.try_acquire().unwrap().expect("free again");
    assert!(guard.release().unwrap());
}

/// Holds at 617d3ff: a waiting task holds no thread. Sixty tasks wait
/// behind a holder on a current-thread runtime; the process gains no
/// thread per waiter (lockyard's own runtime and blocking threads aside).
#[tokio::test(flavor = "current_thread")]
async fn sixty_waiting_tasks_hold_no_thread() {
    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").map_or(0, |dir| dir.count())
    }
    let store = FaithfulStore::new();
    let lock = Arc::new(
        builder(&store)
            .ttl(Duration::from_secs(30))
            .build()
            .unwrap(),
    );
    let guard = lock.acquire_async(None).await.unwrap();
    // Warm up lockyard's runtime thread and blocking pool.
    assert!(lock.locked_async().await.unwrap());
    let before = threads();
    let mut waiters = Vec::new();
    for _ in 0..60 {
        let lock = lock.clone();
        waiters.push(tokio::spawn(async move {
            lock.acquire_async(Some(MS(800))).await.map(drop)
        }));
    }
    tokio::time::sleep(MS(300)).await;
    let during = threads();
    for waiter in waiters {
        assert!(matches!(waiter.await.unwrap(), Err(Error::Timeout { .. })));
    }
    assert!(
        during <= before + 4,
        "{before} threads before, {during} while 60 tasks wait"
    );
    assert!(guard.release_async().await.unwrap());
    assert!(store.object().is_none());
}
