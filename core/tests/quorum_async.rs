//! The `_async` twins of the quorum RwLock on the caller's own tokio
//! runtime, over real redis-server processes: tasks are holders, sync and
//! async holders exclude each other, and a dropped future or guard leaves
//! nothing granted, queued or marked.

mod no_tokio;
mod support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use lockyard::quorum::RwLock;
use lockyard::Error;
use no_tokio::block_on_without_tokio;
use support::RedisServer;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

fn lock(servers: &[RedisServer], name: &str) -> Arc<RwLock> {
    Arc::new(
        RwLock::builder(urls(servers), name)
            .ttl(Duration::from_secs(5))
            .build()
            .unwrap(),
    )
}

/// Keys that are grants (or queue entries): everything but the fencing
/// counter, the restart guard, writer marks and the node list, which
/// expire or stay by design.
fn grants(servers: &[RedisServer]) -> Vec<String> {
    servers
        .iter()
        .flat_map(RedisServer::keys)
        .filter(|k| {
            ![":fence", ":alive", ":waiting", ":nodes"]
                .iter()
                .any(|kept| k.ends_with(kept))
        })
        .collect()
}

async fn eventually(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(MS(10)).await;
    }
}

/// Polls `future` up to `times` times, letting the runtime run between
/// polls, and drops it if it is not done by then.
async fn poll_times<F: Future>(future: F, times: usize) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    for _ in 0..times {
        let polled = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
        if let Poll::Ready(output) = polled {
            return Some(output);
        }
        tokio::time::sleep(MS(1)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_take_turns_as_writers_and_share_as_readers() {
    let servers = servers(3);
    let lock = lock(&servers, "turns");
    let (writing, reading, most_readers) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (lock, writing, reading, most) = (
            lock.clone(),
            writing.clone(),
            reading.clone(),
            most_readers.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                if i % 3 == 0 {
                    let guard = lock.write_async(Some(MS(20_000))).await.unwrap();
                    assert_eq!(writing.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(reading.load(Ordering::SeqCst), 0, "a writer with readers");
                    tokio::time::sleep(MS(2)).await;
                    writing.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release_async().await.unwrap());
                } else {
                    let guard = lock.read_async(Some(MS(20_000))).await.unwrap();
                    let now = reading.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert_eq!(writing.load(Ordering::SeqCst), 0, "a reader with a writer");
                    tokio::time::sleep(MS(5)).await;
                    reading.fetch_sub(1, Ordering::SeqCst);
                    drop(guard); // given back in the background
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        most_readers.load(Ordering::SeqCst) > 1,
        "readers never shared"
    );
    eventually(MS(3000), "every grant is given back", || {
        grants(&servers).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_task_is_one_holder_and_its_fencing_tokens_increase() {
    let servers = servers(3);
    let lock = lock(&servers, "holder");
    let first = lock.write_async(None).await.unwrap();
    let token = first.fencing_token_async().await.unwrap();
    assert_eq!(lock.fencing_token_async().await.unwrap(), Some(token));
    first.check_health().unwrap();
    let again = lock.read_async(Some(MS(0))).await;
    assert!(
        matches!(again, Err(Error::AlreadyLocked(_))),
        "{:?}",
        again.err()
    );
    // Another task of this process is another holder, and waits.
    let other = lock.clone();
    let waiting = tokio::spawn(async move {
        let guard = other.write_async(Some(MS(10_000))).await.unwrap();
        let token = guard.fencing_token_async().await.unwrap();
        guard.release_async().await.unwrap();
        token
    });
    tokio::time::sleep(MS(200)).await;
    assert!(!waiting.is_finished(), "two tasks held the write lock");
    assert!(lock.release_async().await.unwrap());
    drop(first); // released already: does nothing
    assert!(waiting.await.unwrap() > token);
    assert!(matches!(
        lock.release_async().await,
        Err(Error::NotLocked(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_and_async_holders_exclude_each_other() {
    let servers = servers(3);
    let lock = lock(&servers, "mixed");
    let blocking = lock.clone();
    let (held, release) = (
        Arc::new(std::sync::Barrier::new(2)),
        Arc::new(std::sync::Barrier::new(2)),
    );
    let (h, r) = (held.clone(), release.clone());
    let thread = std::thread::spawn(move || {
        let guard = blocking.write(None).unwrap();
        h.wait();
        r.wait();
        guard.release().unwrap()
    });
    tokio::task::block_in_place(|| held.wait());
    let denied = lock.read_async(Some(MS(300))).await;
    assert!(
        matches!(denied, Err(Error::Timeout { .. })),
        "{:?}",
        denied.err()
    );
    let reader = lock.clone();
    let reading = tokio::spawn(async move { reader.read_async(Some(MS(10_000))).await.is_ok() });
    tokio::time::sleep(MS(100)).await;
    tokio::task::block_in_place(|| release.wait());
    assert!(thread.join().unwrap());
    assert!(reading.await.unwrap());
}

#[tokio::test(flavor = "current_thread")]
async fn waits_dropped_at_every_point_leave_nothing_granted_or_marked() {
    let servers = servers(3);
    let holder = lock(&servers, "cut");
    let contender = lock(&servers, "cut");
    // Uncontended, cut at each poll: before the requests, with grants on
    // their way, with a quorum in.
    let mut finished = 0;
    for polls in 0..40 {
        if let Some(guard) = poll_times(contender.write_async(None), polls).await {
            guard.unwrap().release_async().await.unwrap();
            finished += 1;
        }
    }
    assert!(finished > 0, "no write ever finished");
    eventually(MS(3000), "no grant is left", || grants(&servers).is_empty()).await;
    // Contended: a writer waiting behind a reader, dropped; its waiting
    // mark must go with it, or new readers wait for the mark to lapse.
    let read = holder.read_async(None).await.unwrap();
    for _ in 0..5 {
        let cut = tokio::time::timeout(MS(150), contender.write_async(None)).await;
        assert!(cut.is_err(), "a writer got in beside a reader");
    }
    let started = Instant::now();
    let second_reader = lock(&servers, "cut");
    let guard = second_reader.read_async(Some(MS(5000))).await.unwrap();
    assert!(
        started.elapsed() < MS(400),
        "a reader waited {:?} for a dropped writer's mark",
        started.elapsed()
    );
    drop(guard);
    drop(read);
    eventually(MS(3000), "no grant is left", || grants(&servers).is_empty()).await;
    // The holder may acquire again at once: nothing stayed queued for it.
    contender
        .write_async(Some(MS(0)))
        .await
        .unwrap()
        .release_async()
        .await
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_release_still_gives_the_grants_back() {
    let servers = servers(3);
    let lock = lock(&servers, "release");
    for polls in 0..6 {
        let guard = lock.write_async(None).await.unwrap();
        drop(poll_times(guard.release_async(), polls).await);
        let other = self::lock(&servers, "release");
        let guard = other.write_async(Some(MS(3000))).await.unwrap();
        guard.release_async().await.unwrap();
    }
    eventually(MS(3000), "no grant is left", || grants(&servers).is_empty()).await;
}

#[test]
fn awaited_outside_a_tokio_runtime_is_a_config_error() {
    let servers = servers(1);
    let lock = lock(&servers, "no-tokio");
    let outcome = block_on_without_tokio(lock.write_async(Some(MS(1000))));
    assert!(
        matches!(outcome, Err(Error::Config(_))),
        "{:?}",
        outcome.err()
    );
    assert!(grants(&servers).is_empty());
    // The lock stays usable: the failed call left no acquire under way.
    drop(lock.write(Some(MS(1000))).unwrap());
}
