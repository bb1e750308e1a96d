//! The `_async` twins of the etcd lock and wait group against a real etcd
//! member: tasks are holders, served in arrival order; a waiting task
//! holds no thread and never stalls its executor; blocking and async
//! holders exclude each other; and a future dropped at any point, or a
//! guard dropped in a task, leaves nothing held or queued.

mod etcd_support;
mod no_tokio;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_support::{group_at, lock_at, EtcdServer};
use lockyard::etcd::{Election, Lock, Session, WaitGroup};
use lockyard::Error;
use no_tokio::block_on_without_tokio;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock(server: &EtcdServer, name: &str) -> Arc<Lock> {
    Arc::new(lock_at(&server.url(), name, 5))
}

fn group(server: &EtcdServer, name: &str, limit: u32) -> Arc<WaitGroup> {
    Arc::new(group_at(&server.url(), name, limit, 5))
}

/// Polls `condition` every 20 ms without blocking the executor.
async fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(MS(20)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_uncontended_cycle_holds_fences_and_leaves_nothing() {
    let server = EtcdServer::start();
    let lock = lock(&server, "deploy");
    let other = lock_at(&server.url(), "deploy", 5);
    let guard = lock.acquire_async(Some(MS(5000))).await.unwrap();
    guard.check_health().unwrap();
    let token = guard.fencing_token();
    assert!(lock.locked_async().await.unwrap());
    assert!(other.try_acquire_async().await.unwrap().is_none());
    assert_eq!(server.keys().len(), 1, "a failed try leaves no key");
    assert!(matches!(
        lock.acquire_async(Some(MS(100))).await,
        Err(Error::AlreadyLocked(_))
    ));
    assert!(guard.release_async().await.unwrap());
    assert!(!lock.locked_async().await.unwrap());
    let again = other.try_acquire_async().await.unwrap().expect("free");
    assert!(again.fencing_token() > token, "tokens go up");
    assert!(again.release_async().await.unwrap());
    assert!(server.keys().is_empty());
    assert!(matches!(
        lock.release_async().await,
        Err(Error::NotLocked(_))
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn tasks_on_one_thread_take_turns_in_arrival_order_and_the_executor_keeps_running() {
    let server = EtcdServer::start();
    let lock = lock(&server, "counter");
    let inside = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = lock.acquire_async(None).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (lock, inside, order) = (lock.clone(), inside.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire_async(Some(MS(30_000))).await.unwrap();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            order.lock().unwrap().push(i);
            tokio::time::sleep(MS(5)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.release_async().await.unwrap();
        }));
        // Each waiter's key is in line before the next one asks.
        let queued = i + 2;
        eventually(MS(5000), "the waiter is in line", || {
            server.keys().len() == queued
        })
        .await;
    }
    // While 20 tasks wait, the one thread keeps ticking.
    let mut longest = Duration::ZERO;
    for _ in 0..20 {
        let before = Instant::now();
        tokio::time::sleep(MS(10)).await;
        longest = longest.max(before.elapsed());
    }
    assert!(longest < MS(60), "the executor stalled for {longest:?}");
    first.release_async().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    assert!(server.keys().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_and_async_holders_exclude_each_other() {
    let server = EtcdServer::start();
    let lock = lock(&server, "shared");
    let blocking = lock.clone();
    let (held, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(Mutex::new(false)),
    );
    let (told, released) = (held.clone(), release.clone());
    let thread = std::thread::spawn(move || {
        let guard = blocking.acquire(Some(MS(5000))).unwrap();
        told.notify_one();
        while !*released.lock().unwrap() {
            std::thread::sleep(MS(10));
        }
        drop(guard);
    });
    held.notified().await;
    assert!(lock.try_acquire_async().await.unwrap().is_none());
    assert!(matches!(
        lock.acquire_async(Some(MS(200))).await,
        Err(Error::Timeout { .. })
    ));
    *release.lock().unwrap() = true;
    let guard = lock.acquire_async(Some(MS(5000))).await.unwrap();
    thread.join().unwrap();
    // The thread cannot take it while the task holds it.
    let blocking = lock.clone();
    let tried = tokio::task::spawn_blocking(move || blocking.try_acquire().unwrap().is_none());
    assert!(tried.await.unwrap(), "a thread got in beside a task");
    drop(guard);
    eventually(MS(5000), "the dropped guard's key is gone", || {
        server.keys().is_empty()
    })
    .await;
}

/// Drops `future` after it has been polled for `after`: a caller that
/// gave up at that point.
async fn cut_off<F: Future>(after: Duration, future: F) -> bool {
    tokio::time::timeout(after, future).await.is_err()
}

#[tokio::test(flavor = "current_thread")]
async fn a_wait_dropped_at_any_point_leaves_no_key_and_no_holder() {
    let server = EtcdServer::start();
    let holder = lock(&server, "cut");
    let waiter = lock(&server, "cut");
    let held = holder.acquire_async(None).await.unwrap();
    // Cut-offs from before the first request to well after the key is in
    // line, and a try in flight.
    for step in 0..30 {
        assert!(cut_off(MS(step * 3), waiter.acquire_async(None)).await);
        if step % 5 == 0 {
            let _ = cut_off(MS(step), waiter.try_acquire_async()).await;
        }
    }
    eventually(MS(5000), "only the holder's key is left", || {
        server.keys().len() == 1
    })
    .await;
    assert!(held.release_async().await.unwrap());
    // Nothing of the dropped waits holds or queues: the lock is free, and
    // the waiter's task may acquire again.
    let again = waiter.try_acquire_async().await.unwrap().expect("free");
    drop(again);
    eventually(MS(5000), "no key is left", || server.keys().is_empty()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn an_acquire_dropped_as_it_is_granted_gives_the_place_back() {
    let server = EtcdServer::start();
    let holder = lock(&server, "race");
    let waiter = lock(&server, "race");
    // The holder lets go while the waiter's future is dropped at every
    // moment around the grant: each time, the lock ends free.
    for delay in 0..20 {
        let held = holder.acquire_async(Some(MS(5000))).await.unwrap();
        let waiting = waiter.acquire_async(Some(MS(5000)));
        let releasing = async {
            tokio::time::sleep(MS(50)).await;
            held.release_async().await.unwrap();
            tokio::time::sleep(MS(delay)).await;
        };
        tokio::select! {
            biased;
            () = releasing => {}
            acquired = waiting => drop(acquired.unwrap()),
        }
        eventually(MS(5000), "the lock is free again", || {
            server.keys().is_empty()
        })
        .await;
    }
}

#[test]
fn an_acquire_awaited_outside_a_tokio_runtime_works() {
    let server = EtcdServer::start();
    let lock = lock(&server, "anywhere");
    let guard = block_on_without_tokio(lock.acquire_async(Some(MS(5000)))).unwrap();
    assert_eq!(server.keys().len(), 1);
    assert!(block_on_without_tokio(guard.release_async()).unwrap());
    assert!(server.keys().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn tasks_never_hold_more_slots_than_the_limit() {
    let server = EtcdServer::start();
    let quota = group(&server, "quota", 3);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..9 {
        let (quota, inside, most) = (quota.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..2 {
                let slot = quota.acquire_async(Some(MS(30_000))).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                slot.check_health().unwrap();
                tokio::time::sleep(MS(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(slot.release_async().await.unwrap());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "over the limit, or never at it"
    );
    assert_eq!(quota.count_async().await.unwrap(), 0);
    assert!(server.keys().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn tokens_are_added_adopted_and_done_across_groups() {
    let server = EtcdServer::start();
    let adder = group(&server, "jobs", 2);
    let worker = group(&server, "jobs", 2);
    let first = adder.add_async(None).await.unwrap();
    let second = adder.add_async(None).await.unwrap();
    assert!(matches!(
        adder.add_async(MS(200)).await,
        Err(Error::Timeout { .. })
    ));
    assert_eq!(adder.add_async(Duration::ZERO).await.ok(), None);
    assert_eq!(worker.count_async().await.unwrap(), 2);
    assert!(!worker.wait_async(Some(MS(200))).await.unwrap());
    assert!(worker.adopt_async(&first).await.unwrap());
    assert!(worker.healthy(&first));
    assert!(!worker.adopt_async("not-a-token").await.unwrap());
    assert!(worker.done_async(&first).await.unwrap());
    assert!(!worker.done_async(&first).await.unwrap(), "done once");
    // A token this group never held is freed from here all the same.
    assert!(worker.done_async(&second).await.unwrap());
    assert!(worker.wait_async(Some(MS(1000))).await.unwrap());
    assert!(server.keys().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_group_wait_dropped_at_any_point_leaves_no_slot() {
    let server = EtcdServer::start();
    let quota = group(&server, "cut-slots", 1);
    let held = quota.acquire_async(None).await.unwrap();
    for step in 0..20 {
        assert!(cut_off(MS(step * 3), quota.add_async(None)).await);
        assert!(cut_off(MS(step * 3), quota.wait_async(None)).await);
    }
    eventually(MS(5000), "only the held slot's key is left", || {
        server.keys().len() == 1
    })
    .await;
    drop(held);
    eventually(MS(5000), "no key is left", || server.keys().is_empty()).await;
    assert!(quota.wait_async(Some(MS(1000))).await.unwrap());
}

#[test]
fn tasks_return_to_baseline_after_many_cancelled_waits() {
    let server = EtcdServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let holder = lock(&server, "leaks");
        let waiter = lock(&server, "leaks");
        // The leases' keep-alive tasks start with the first grants.
        drop(waiter.acquire_async(None).await.unwrap());
        let held = holder.acquire_async(None).await.unwrap();
        eventually(MS(5000), "the first grant's key is gone", || {
            server.keys().len() == 1
        })
        .await;
        let baseline = lockyard::live_tasks();
        let mut waits = tokio::task::JoinSet::new();
        for i in 0..300u64 {
            let waiter = waiter.clone();
            waits.spawn(async move {
                assert!(cut_off(MS(20 + i % 40), waiter.acquire_async(None)).await);
            });
        }
        while let Some(joined) = waits.join_next().await {
            joined.unwrap();
        }
        eventually(MS(15_000), "only the holder's key is left", || {
            server.keys().len() == 1
        })
        .await;
        // Each lock object's HTTP pool may keep 4 idle connections (a task
        // each) for its next requests, and closes the rest.
        eventually(MS(10_000), "tasks return to baseline", || {
            lockyard::live_tasks() <= baseline + 2 * 4
        })
        .await;
        assert!(held.release_async().await.unwrap());
    });
}

fn session(server: &EtcdServer) -> Session {
    etcd_support::session_at(&server.url(), 5, 0, 5)
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_is_built_and_destroyed_by_awaiting_and_frees_its_locks() {
    let server = EtcdServer::start();
    let session = Session::builder(server.url())
        .ttl(Duration::from_secs(5))
        .build_async()
        .await
        .unwrap();
    session.check_health().unwrap();
    let lock = Lock::builder(server.url(), "task-7")
        .session(&session)
        .value("worker-3")
        .build()
        .unwrap();
    let guard = lock.acquire_async(Some(MS(5000))).await.unwrap();
    assert_eq!(
        lockyard::etcd::holder(&server.url(), "task-7").unwrap(),
        Some("worker-3".to_owned())
    );
    session.destroy_async().await.unwrap();
    assert!(!session.healthy() && !guard.healthy());
    assert!(server.keys().is_empty(), "the session's keys went with it");
    assert!(server.leases().is_empty(), "{:?}", server.leases());
    session.destroy_async().await.unwrap();
    assert!(matches!(
        lock.acquire_async(Some(MS(100))).await,
        Err(Error::AlreadyLocked(_) | Error::Config(_))
    ));
    drop(guard);
    assert!(matches!(
        Session::builder("etcd://127.0.0.1:1")
            .connect_timeout(MS(200))
            .build_async()
            .await,
        Err(Error::Backend { .. })
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_build_dropped_midway_leaves_no_lease() {
    let server = EtcdServer::start();
    for step in 0..10 {
        let building = Session::builder(server.url())
            .ttl(Duration::from_secs(30))
            .build_async();
        let _ = cut_off(MS(step * 2), building).await;
    }
    eventually(MS(5000), "no lease is left", || server.leases().is_empty()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn campaigns_resigns_and_observers_by_awaiting() {
    let server = EtcdServer::start();
    let (sa, sb) = (session(&server), session(&server));
    let a = Election::new(&server.url(), "scheduler", &sa).unwrap();
    let b = Arc::new(Election::new(&server.url(), "scheduler", &sb).unwrap());
    let mut observer = a.observe();
    let first = observer.next_change_async(MS(5000)).await.unwrap();
    assert_eq!(first.map(|term| term.value), Some(None), "nobody leads");
    assert!(a.campaign_async("node-a", Some(MS(5000))).await.unwrap());
    assert!(a.is_leader());
    let token_a = a.fencing_token().unwrap();
    assert!(matches!(
        a.campaign_async("node-a", None).await,
        Err(Error::AlreadyLocked(_))
    ));
    assert!(!b.campaign_async("node-b", Some(MS(200))).await.unwrap());
    assert_eq!(b.leader_async().await.unwrap().as_deref(), Some("node-a"));
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.campaign_async("node-b", Some(MS(10_000))).await }
    });
    eventually(MS(5000), "b is in line", || server.keys().len() == 2).await;
    let seen = observer.next_change_async(MS(5000)).await.unwrap().unwrap();
    assert_eq!(
        (seen.value.as_deref(), seen.fencing_token),
        (Some("node-a"), token_a)
    );
    // Waits cut off while nothing changes (b only joined the line).
    for step in 0..5 {
        assert!(cut_off(MS(step * 5), observer.next_change_async(None)).await);
    }
    assert!(a.resign_async().await.unwrap());
    assert!(waiting.await.unwrap().unwrap());
    assert!(matches!(a.resign_async().await, Err(Error::NotLocked(_))));
    let ended = observer.next_change_async(MS(5000)).await.unwrap().unwrap();
    assert_eq!((ended.value, ended.fencing_token), (None, token_a));
    let undelivered = observer.next_change_async(MS(5000)).await.unwrap().unwrap();
    observer.unread(undelivered.clone());
    let next = observer.next_change_async(MS(5000)).await.unwrap().unwrap();
    assert_eq!(next, undelivered, "a change handed back comes again");
    assert_eq!(next.value.as_deref(), Some("node-b"));
    assert!(next.fencing_token > token_a);
    assert_eq!(observer.next_change_async(MS(100)).await.unwrap(), None);
    assert!(b.resign_async().await.unwrap());
    assert!(server.keys().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn an_observer_cut_off_as_changes_arrive_loses_none() {
    let server = EtcdServer::start();
    let s = session(&server);
    let election = Election::new(&server.url(), "handovers", &s).unwrap();
    let mut observer = election.observe();
    let mut seen = vec![observer.next_change_async(MS(5000)).await.unwrap().unwrap()];
    let mut tokens = Vec::new();
    for round in 0..8u64 {
        assert!(election
            .campaign_async("leader", Some(MS(5000)))
            .await
            .unwrap());
        tokens.push(election.fencing_token().unwrap());
        assert!(election.resign_async().await.unwrap());
        // Cut the next wait off at shifting moments around the changes.
        if let Ok(Ok(Some(term))) =
            tokio::time::timeout(MS(round * 2), observer.next_change_async(None)).await
        {
            seen.push(term);
        }
    }
    while let Some(term) = observer.next_change_async(MS(500)).await.unwrap() {
        seen.push(term);
    }
    // Every term's start and end, in order: none lost, none twice.
    let mut expected = vec![(None, 0)];
    for token in &tokens {
        expected.push((Some("leader".to_owned()), *token));
        expected.push((None, *token));
    }
    let seen: Vec<_> = seen
        .into_iter()
        .map(|t| (t.value, t.fencing_token))
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "current_thread")]
async fn a_campaign_dropped_at_any_point_leaves_no_key() {
    let server = EtcdServer::start();
    let (sa, sb) = (session(&server), session(&server));
    let a = Election::new(&server.url(), "cut-campaigns", &sa).unwrap();
    let b = Election::new(&server.url(), "cut-campaigns", &sb).unwrap();
    assert!(a.campaign_async("node-a", None).await.unwrap());
    for step in 0..20 {
        assert!(cut_off(MS(step * 3), b.campaign_async("node-b", None)).await);
    }
    eventually(MS(5000), "only the leader's key is left", || {
        server.keys().len() == 1
    })
    .await;
    assert!(a.resign_async().await.unwrap());
    assert!(b
        .campaign_async("node-b", Some(Duration::ZERO))
        .await
        .unwrap());
    assert!(b.resign_async().await.unwrap());
}
