//! The `_async` twins of the GCS lock on the caller's own tokio runtime,
//! against the faithful in-process store: tasks are holders, a waiting
//! task holds no thread and never blocks the executor, and a dropped
//! future or guard leaves nothing held.

mod gcs_support;
mod no_tokio;

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gcs_support::{builder, FaithfulStore, Fault, Op};
use lockyard::gcs::Lock;
use lockyard::Error;
use no_tokio::block_on_without_tokio;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock(store: &Arc<FaithfulStore>) -> Arc<Lock> {
    Arc::new(builder(store).build().unwrap())
}

async fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(MS(10)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_uncontended_cycle_is_one_create_and_one_delete() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    let guard = lock.acquire_async(Some(MS(1000))).await.unwrap();
    assert_eq!(
        store.object().unwrap().version.generation as u64,
        guard.fencing_token()
    );
    guard.check_health().unwrap();
    assert!(lock.locked_async().await.unwrap());
    assert!(guard.release_async().await.unwrap());
    assert!(store.object().is_none());
    assert_eq!(
        (
            store.creates.load(Ordering::SeqCst),
            store.deletes.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    assert!(!lock.locked_async().await.unwrap());
}

#[tokio::test(flavor = "current_thread")]
async fn tasks_on_one_thread_take_turns_and_the_executor_keeps_running() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    let inside = Arc::new(AtomicU32::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            loop {
                ticks.lock().unwrap().push(Instant::now());
                tokio::time::sleep(MS(10)).await;
            }
        }
    });
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (lock, inside, tokens) = (lock.clone(), inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire_async(Some(MS(20_000))).await.unwrap();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            tokens.lock().unwrap().push(guard.fencing_token());
            tokio::time::sleep(MS(20)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.release_async().await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    ticker.abort();
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 8);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let ticks = ticks.lock().unwrap().clone();
    let longest = ticks.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(longest < MS(50), "the executor stalled for {longest:?}");
    assert!(store.object().is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn each_task_is_a_holder_and_a_wait_that_runs_out_is_a_timeout() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    let guard = lock.acquire_async(None).await.unwrap();
    assert!(matches!(
        lock.acquire_async(Some(Duration::ZERO)).await,
        Err(Error::AlreadyLocked(_))
    ));
    let other = tokio::spawn({
        let lock = lock.clone();
        async move {
            let tried = lock.try_acquire_async().await.unwrap().is_none();
            let waited = lock.acquire_async(Some(MS(300))).await;
            let not_held = matches!(lock.release_async().await, Err(Error::NotLocked(_)));
            (
                tried,
                matches!(waited, Err(Error::Timeout { .. })),
                not_held,
            )
        }
    });
    assert_eq!(other.await.unwrap(), (true, true, true));
    drop(guard);
    eventually(MS(2000), "the dropped guard released", || {
        store.object().is_none()
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_wait_dropped_at_any_point_leaves_nothing_held() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    // Slow requests make every drop land while a step is on its way; the
    // step then ends on its own (its create may land after the drop).
    for cut in [0, 1, 3, 7, 15, 30, 60, 120] {
        store.inject(Op::Create, Fault::Slow(MS(40)), 1);
        store.inject(Op::Get, Fault::Slow(MS(40)), 1);
        let cut_off = tokio::time::timeout(MS(cut), lock.acquire_async(None)).await;
        if let Ok(guard) = cut_off {
            guard.unwrap().release_async().await.unwrap();
        }
        // Outlasts the slow requests still on their way.
        tokio::time::sleep(MS(150)).await;
        eventually(MS(3000), "a dropped wait left nothing", || {
            store.object().is_none()
        })
        .await;
        assert!(!lock.locked_according_to_internal_state());
    }
    // A dropped wait behind a holder took nothing from it either.
    let holder = store.put("someone-else", 60.0);
    let cut_off = tokio::time::timeout(MS(200), lock.acquire_async(None)).await;
    assert!(cut_off.is_err());
    tokio::time::sleep(MS(100)).await;
    assert_eq!(
        store.object().unwrap().version.generation,
        holder.version.generation
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_create_whose_reply_is_lost_is_cleaned_up_when_the_wait_is_dropped() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    // The create lands but its reply is lost; the retry then waits slowly.
    store.inject(Op::Create, Fault::LoseReply, 1);
    store.inject(Op::Create, Fault::Slow(MS(500)), 1);
    let cut_off = tokio::time::timeout(MS(150), lock.acquire_async(None)).await;
    assert!(cut_off.is_err());
    eventually(
        MS(6000),
        "the create of the dropped wait was removed",
        || store.object().is_none(),
    )
    .await;
    assert!(!lock.locked_according_to_internal_state());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_and_async_holders_exclude_each_other() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    let inside = Arc::new(AtomicU32::new(0));
    let sync = {
        let (lock, inside) = (lock.clone(), inside.clone());
        tokio::task::spawn_blocking(move || {
            for _ in 0..5 {
                let guard = lock.acquire(Some(MS(20_000))).unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                std::thread::sleep(MS(15));
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().unwrap();
            }
        })
    };
    for _ in 0..5 {
        let guard = lock.acquire_async(Some(MS(20_000))).await.unwrap();
        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
        tokio::time::sleep(MS(15)).await;
        inside.fetch_sub(1, Ordering::SeqCst);
        guard.release_async().await.unwrap();
    }
    sync.await.unwrap();
    assert!(store.object().is_none());
}

/// The wait runs on lockyard's runtime, which the caller only awaits: any
/// executor will do.
#[test]
fn an_acquire_awaited_outside_a_tokio_runtime_works() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    let guard = block_on_without_tokio(lock.acquire_async(Some(MS(1000)))).unwrap();
    assert!(store.object().is_some());
    assert!(block_on_without_tokio(guard.release_async()).unwrap());
    assert!(store.object().is_none());
}

/// The wait ends (granted) while its caller is not looking; the caller's
/// future is then dropped without being polled again: the hold on its way
/// is given back, not dropped with the channel it sat in.
#[tokio::test(flavor = "current_thread")]
async fn a_grant_its_caller_never_took_is_given_back() {
    let store = FaithfulStore::new();
    let lock = lock(&store);
    loop {
        let mut acquiring = std::pin::pin!(lock.acquire_async(Some(MS(1000))));
        let polled = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match acquiring.as_mut().poll(cx) {
                std::task::Poll::Ready(guard) => Some(guard),
                std::task::Poll::Pending => None,
            })
        })
        .await;
        if let Some(guard) = polled {
            // Granted within the first poll already: again.
            guard.unwrap().release_async().await.unwrap();
            continue;
        }
        // The wait runs on lockyard's runtime meanwhile, and is granted.
        std::thread::sleep(MS(300));
        assert!(store.object().is_some());
        break;
    }
    eventually(MS(2000), "the untaken grant was given back", || {
        store.object().is_none()
    })
    .await;
    assert!(!lock.locked_according_to_internal_state());
}
