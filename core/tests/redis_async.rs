//! The `_async` twins of the Redis Lock on the caller's own tokio runtime,
//! against a real redis-server: tasks are holders, waits hold no thread and
//! never block the executor, and a dropped future or guard leaves nothing
//! held or queued.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockyard::redis::Lock;
use lockyard::Error;
use support::{eventually, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;
/// How soon a dropped wait's give-up must have reached Redis.
const GIVE_UP_TIME: Duration = Duration::from_millis(1000);

fn lock(server: &RedisServer, name: &str) -> Arc<Lock> {
    Arc::new(Lock::builder(server.url(), name).build().unwrap())
}

/// Only the fencing counter, which outlives every grant by design, and
/// the tombstones of acquires dropped while on their way to the server
/// (which turn them away should they still arrive), each expiring within
/// a minute. Looked for well within a waiter's lease (2 s), after which a
/// forgotten place would leave by itself.
fn assert_only_the_fence_is_left(server: &RedisServer, name: &str) {
    let fence = format!("lockyard:{{{name}}}:fence");
    eventually(GIVE_UP_TIME, "nothing held or queued", || {
        server
            .keys()
            .iter()
            .all(|key| *key == fence || is_tombstone(key))
    });
    assert_tombstones_expire(server);
}

fn is_tombstone(key: &str) -> bool {
    key.contains(":wake:") && key.ends_with(":gone")
}

fn assert_tombstones_expire(server: &RedisServer) {
    for key in server.keys().iter().filter(|key| is_tombstone(key)) {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query(&mut server.raw().unwrap())
            .unwrap();
        assert!(ttl > 0 && ttl <= 60_000, "{key} lives on ({ttl} ms)");
    }
}

fn queued(server: &RedisServer, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("lockyard:{{{name}}}:queue"))
        .query(&mut server.raw().unwrap())
        .unwrap()
}

/// `tasks` tasks queue up one after another behind a held lock, then each
/// holds it in turn: none overlaps another, and they are served in the
/// order they arrived.
async fn contend(server: &RedisServer, name: &str, tasks: u32) {
    let lock = lock(server, name);
    let first = lock.acquire_async(None).await.unwrap();
    let inside = Arc::new(AtomicU32::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for task in 0..tasks {
        let (lock, inside, order) = (lock.clone(), inside.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = lock.acquire_async(None).await.unwrap();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            order.lock().unwrap().push(task);
            tokio::task::yield_now().await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.release_async().await.unwrap();
        }));
        // Arrival order: the next one starts once this one is queued.
        let deadline = Instant::now() + MS(5000);
        while queued(server, name) < task as usize + 1 {
            assert!(Instant::now() < deadline, "task {task} never queued");
            tokio::time::sleep(MS(1)).await;
        }
    }
    assert!(first.release_async().await.unwrap());
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let served = order.lock().unwrap().clone();
    assert_eq!(
        served,
        (0..tasks).collect::<Vec<_>>(),
        "not in arrival order"
    );
    assert_only_the_fence_is_left(server, name);
}

#[tokio::test(flavor = "current_thread")]
async fn two_hundred_tasks_on_one_thread_take_turns_in_arrival_order() {
    let server = RedisServer::start();
    contend(&server, "turns", 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_on_a_multi_thread_runtime_take_turns_in_arrival_order() {
    let server = RedisServer::start();
    contend(&server, "turns-mt", 50).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_ticker_keeps_ticking_while_a_hundred_tasks_wait() {
    let server = RedisServer::start();
    let lock = lock(&server, "ticker");
    let held = lock.acquire_async(None).await.unwrap();
    let waiters: Vec<_> = (0..100)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let guard = lock.acquire_async(None).await.unwrap();
                guard.release_async().await.unwrap();
            })
        })
        .collect();
    let started = Instant::now();
    let mut last = Instant::now();
    let mut longest = Duration::ZERO;
    while started.elapsed() < MS(1500) {
        tokio::time::sleep(MS(10)).await;
        longest = longest.max(last.elapsed());
        last = Instant::now();
    }
    assert_eq!(queued(&server, "ticker"), 100, "every task waits");
    assert!(longest < MS(50), "the executor was blocked for {longest:?}");
    held.release_async().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_only_the_fence_is_left(&server, "ticker");
}

#[tokio::test(flavor = "current_thread")]
async fn a_wait_that_runs_out_is_a_timeout_and_leaves_no_place() {
    let server = RedisServer::start();
    let (holder, waiter) = (lock(&server, "late"), lock(&server, "late"));
    let held = holder.acquire_async(None).await.unwrap();
    let started = Instant::now();
    let err = tokio::spawn(async move { waiter.acquire_async(Some(MS(300))).await.map(drop) })
        .await
        .unwrap()
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(waited >= MS(300) && waited < MS(1000), "{waited:?}");
    assert_eq!(queued(&server, "late"), 0);
    held.release_async().await.unwrap();
    assert_only_the_fence_is_left(&server, "late");
}

#[tokio::test(flavor = "current_thread")]
async fn each_task_is_a_holder() {
    let server = RedisServer::start();
    let lock = lock(&server, "tasks");
    let held = lock.acquire_async(None).await.unwrap();
    let err = lock.try_acquire_async().await.map(|_| ()).unwrap_err();
    assert!(
        matches!(err, Error::AlreadyLocked(_)),
        "the same task again: {err}"
    );
    let other = lock.clone();
    let tried = tokio::spawn(async move { other.try_acquire_async().await.unwrap().is_none() });
    assert!(tried.await.unwrap(), "another task must not get it");
    held.check_health().unwrap();
    assert!(held.healthy());
    let token = held.fencing_token();
    assert!(held.release_async().await.unwrap());
    assert!(matches!(
        lock.release_async().await,
        Err(Error::NotLocked(_))
    ));

    let other = lock.clone();
    let next = tokio::spawn(async move {
        let guard = other.try_acquire_async().await.unwrap().expect("free now");
        guard.fencing_token()
    });
    assert!(next.await.unwrap() > token);
    assert_only_the_fence_is_left(&server, "tasks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moves_between_threads_and_its_drop_releases_in_the_background() {
    let server = RedisServer::start();
    let lock = lock(&server, "moved");
    let other = lock.clone();
    let token = tokio::spawn(async move {
        let guard = other.acquire_async(None).await.unwrap();
        let token = guard.fencing_token();
        // Across an await the task may resume on the other thread.
        for _ in 0..20 {
            tokio::task::yield_now().await;
            guard.check_health().unwrap();
        }
        drop(guard);
        token
    })
    .await
    .unwrap();
    let guard = lock.acquire_async(Some(MS(2000))).await.unwrap();
    assert!(guard.fencing_token() > token);
    drop(guard);
    assert_only_the_fence_is_left(&server, "moved");
}

/// Drops the acquire at many points of its life (before it was sent, while
/// its script runs, while it listens, as it is handed the lock): whichever
/// await it stopped at, nothing stays held or queued, and the lock goes on
/// to the next waiter.
#[tokio::test(flavor = "current_thread")]
async fn a_dropped_acquire_leaves_nothing_held_or_queued() {
    let server = RedisServer::start();
    let (holder, waiter) = (lock(&server, "dropped"), lock(&server, "dropped"));
    for round in 0..60u64 {
        let held = holder.acquire_async(None).await.unwrap();
        let release_after = Duration::from_micros(round * 150);
        let releasing = async {
            tokio::time::sleep(release_after).await;
            held.release_async().await.unwrap();
        };
        let cut_after = Duration::from_micros((59 - round) * 150);
        let acquiring = tokio::time::timeout(cut_after, waiter.acquire_async(None));
        let (acquired, ()) = tokio::join!(acquiring, releasing);
        drop(acquired);
        assert_only_the_fence_is_left(&server, "dropped");
        // Whatever happened, the lock is free for someone else now.
        let other = holder.try_acquire_async().await.unwrap();
        assert!(other.is_some(), "round {round}: the lock stayed taken");
        drop(other);
    }
    assert_only_the_fence_is_left(&server, "dropped");
}

#[tokio::test(flavor = "current_thread")]
async fn a_release_dropped_before_its_answer_still_releases() {
    let server = RedisServer::start();
    let lock = lock(&server, "half-released");
    for _ in 0..20 {
        let guard = lock.acquire_async(Some(MS(2000))).await.unwrap();
        let mut releasing = std::pin::pin!(guard.release_async());
        // Polled once: the request is on its way, then the future is gone.
        let _ = futures_poll_once(releasing.as_mut()).await;
    }
    assert_only_the_fence_is_left(&server, "half-released");
}

async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = future => Some(out),
        () = std::future::ready(()) => None,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_thousand_cancelled_acquires_leak_no_task_or_connection() {
    let server = RedisServer::start();
    let (holder, waiter) = (lock(&server, "leak"), lock(&server, "leak"));
    let held = holder.acquire_async(None).await.unwrap();
    // Warm up: the caller's pool holds a connection or two from now on.
    let _ = tokio::time::timeout(MS(50), waiter.acquire_async(None)).await;
    assert_only_the_fence_is_left_but(&server, "leak", 1);
    let metrics = tokio::runtime::Handle::current().metrics();
    let (tasks, clients) = (metrics.num_alive_tasks(), server.clients());
    for round in 0..1000u64 {
        let waiter = waiter.clone();
        let task = tokio::spawn(async move { waiter.acquire_async(None).await.map(drop) });
        tokio::time::sleep(Duration::from_micros(round % 7 * 300)).await;
        task.abort();
        let _ = task.await;
    }
    // The waiters' shared listener lingers a second, then ends.
    eventually_async(MS(5000), "tasks back to the baseline", || {
        metrics.num_alive_tasks() <= tasks
    })
    .await;
    eventually_async(MS(5000), "connections back to the baseline", || {
        server.clients() <= clients + 16
    })
    .await;
    assert_only_the_fence_is_left_but(&server, "leak", 1);
    held.release_async().await.unwrap();
    assert_only_the_fence_is_left(&server, "leak");
    assert!(
        server.clients() <= clients + 16,
        "{} clients",
        server.clients()
    );
}

/// [`eventually`] for async tests: the runtime's other tasks run while
/// it waits (on a current-thread runtime they could not otherwise).
async fn eventually_async(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < limit, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Nothing queued, one holder: the holder's keys and the fence.
fn assert_only_the_fence_is_left_but(server: &RedisServer, name: &str, holders: usize) {
    eventually(GIVE_UP_TIME, "only the holder left", || {
        queued(server, name) == 0
    });
    let held: usize = redis::cmd("ZCARD")
        .arg(format!("lockyard:{{{name}}}:holders"))
        .query(&mut server.raw().unwrap())
        .unwrap();
    assert_eq!(held, holders);
    let keys = server.keys();
    let wakes = keys
        .iter()
        .filter(|k| k.contains(":wake:") && !is_tombstone(k));
    assert_eq!(wakes.count(), 0, "wake-up lists left: {keys:?}");
    assert_tombstones_expire(server);
}

#[test]
fn sync_and_async_holders_exclude_each_other_in_arrival_order() {
    let server = RedisServer::start();
    let sync_lock = lock(&server, "mixed");
    let held = sync_lock.acquire(None).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let async_lock = lock(&server, "mixed");
    let (first, recorded) = (async_lock.clone(), order.clone());
    let task = runtime.spawn(async move {
        let guard = first.acquire_async(None).await.unwrap();
        recorded.lock().unwrap().push("async");
        tokio::time::sleep(MS(100)).await;
        guard.release_async().await.unwrap();
    });
    let driver = std::thread::spawn(move || runtime.block_on(task).unwrap());
    eventually(MS(3000), "the task queued", || {
        queued(&server, "mixed") == 1
    });
    let (second, recorded) = (sync_lock.clone(), order.clone());
    let thread = std::thread::spawn(move || {
        let guard = second.acquire(None).unwrap();
        recorded.lock().unwrap().push("sync");
        drop(guard);
    });
    eventually(MS(3000), "the thread queued", || {
        queued(&server, "mixed") == 2
    });
    drop(held);
    driver.join().unwrap();
    thread.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["async", "sync"]);
    assert_only_the_fence_is_left(&server, "mixed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_group_among_tasks_never_goes_over_its_limit() {
    let server = RedisServer::start();
    let group = Arc::new(
        lockyard::redis::WaitGroup::builder(server.url(), "quota", 3)
            .build()
            .unwrap(),
    );
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..24)
        .map(|_| {
            let (group, inside, most) = (group.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..3 {
                    let slot = group.acquire_async(None).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    slot.check_health().unwrap();
                    tokio::time::sleep(MS(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(slot.release_async().await.unwrap());
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "over (or never at) the limit"
    );
    assert_eq!(group.count_async().await.unwrap(), 0);
    assert_only_the_fence_is_left(&server, "quota");
}

#[tokio::test(flavor = "current_thread")]
async fn a_wait_group_waits_adds_and_frees_across_tasks() {
    let server = RedisServer::start();
    let group = Arc::new(
        lockyard::redis::WaitGroup::builder(server.url(), "jobs", 2)
            .build()
            .unwrap(),
    );
    let token = group.add_async(Some(MS(1000))).await.unwrap();
    let second = group.add_async(Some(MS(1000))).await.unwrap();
    assert_eq!(group.count_async().await.unwrap(), 2);
    let err = group.add_async(Some(MS(200))).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(
        !group.wait_async(Some(MS(200))).await.unwrap(),
        "slots held"
    );

    // A wait dropped while it watches leaves no watcher behind.
    let watchers = || -> usize {
        redis::cmd("HLEN")
            .arg("lockyard:{jobs}:watchers")
            .query(&mut server.raw().unwrap())
            .unwrap()
    };
    {
        let waiting = group.wait_async(None);
        tokio::pin!(waiting);
        let deadline = Instant::now() + MS(3000);
        while watchers() == 0 {
            tokio::select! {
                _ = &mut waiting => panic!("slots are held: no wait may end"),
                () = tokio::time::sleep(MS(5)) => {}
            }
            assert!(Instant::now() < deadline, "the wait never watched");
        }
    }
    eventually(GIVE_UP_TIME, "the dropped watcher gone", || watchers() == 0);

    let waiter = group.clone();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        assert!(waiter.wait_async(Some(MS(5000))).await.unwrap());
        started.elapsed()
    });
    let freer = group.clone();
    tokio::spawn(async move {
        tokio::time::sleep(MS(200)).await;
        assert!(freer.done_async(&token).await.unwrap());
        assert!(!freer.done_async(&token).await.unwrap(), "freed twice");
        assert!(freer.done_async(&second).await.unwrap());
    })
    .await
    .unwrap();
    let waited = waiting.await.unwrap();
    assert!(waited >= MS(150) && waited < MS(2000), "{waited:?}");
    assert!(!group.done_async("not-a-token").await.unwrap());
    assert_only_the_fence_is_left(&server, "jobs");
}
