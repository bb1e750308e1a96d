//! Review 12 (1ac26e7, the quorum RwLock's async twins).
//!
//! Finding: the `_async` calls panic deep inside tokio where `write_async`
//! promises `Error::Config`. `WriteGuard::fencing_token_async` and
//! `release_async` (guard's and lock's) never call
//! `runtime::check_on_tokio`, and `Round::wait` (fanout.rs:151) builds a
//! `tokio::time::timeout_at` on the caller's context: awaited outside a
//! tokio runtime they panic "there is no reactor running" (a guard taken on
//! tokio and released from another executor takes the program down). And
//! `check_on_tokio` only asks for a runtime: `write_async` on a runtime
//! built without `enable_time` panics "timers are disabled" at the same
//! line, though its own error message says the time driver is required.
//! (The unwinding drop guards still give the grants back.) That second
//! case is left as it is: tokio offers no way to ask whether a runtime has
//! timers, and the Redis and GCS twins share it (the README names it).
//!
//! The other finding of this review (a cancelled or interrupted acquire's
//! give-back is not waited for at exit) is in
//! bindings-python/tests/test_asyncio_review12.py.

mod no_tokio;
mod support;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use lockyard::quorum::RwLock;
use lockyard::Error;
use no_tokio::block_on_without_tokio;
use support::RedisServer;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn lock(servers: &[RedisServer], name: &str) -> Arc<RwLock> {
    Arc::new(
        RwLock::builder(
            servers.iter().map(RedisServer::url).collect::<Vec<_>>(),
            name,
        )
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap(),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// What `write_async` answers outside tokio (quorum_async.rs checks it).
fn is_config_error<T>(outcome: &lockyard::Result<T>) -> bool {
    matches!(outcome, Err(Error::Config(_)))
}

#[test]
fn a_guards_fencing_token_async_outside_tokio_is_an_error_not_a_panic() {
    let servers = servers(3);
    let lock = lock(&servers, "r12-token-no-tokio");
    let rt = runtime();
    let guard = rt.block_on(lock.write_async(Some(MS(5000)))).unwrap();
    let token = std::panic::catch_unwind(AssertUnwindSafe(|| {
        block_on_without_tokio(guard.fencing_token_async())
    }));
    let token = token.expect("fencing_token_async panicked outside a tokio runtime");
    assert!(token.is_ok() || is_config_error(&token), "{token:?}");
    drop(guard);
}

#[test]
fn a_guards_release_async_outside_tokio_is_an_error_not_a_panic() {
    let servers = servers(3);
    let lock = lock(&servers, "r12-release-no-tokio");
    let rt = runtime();
    let guard = rt.block_on(lock.write_async(Some(MS(5000)))).unwrap();
    let released = std::panic::catch_unwind(AssertUnwindSafe(|| {
        block_on_without_tokio(guard.release_async())
    }));
    let released = released.expect("release_async panicked outside a tokio runtime");
    assert!(
        released.is_ok() || is_config_error(&released),
        "{released:?}"
    );
    // Refused or not, the hold is given back (the refused guard's drop
    // gives back in the background).
    let other = self::lock(&servers, "r12-release-no-tokio");
    let again = other.write(Some(MS(3000)));
    assert!(again.is_ok(), "the hold stayed: {:?}", again.err());
}

/// Coverage (passes on 1ac26e7): writers and readers of two lock objects,
/// cut by timeouts at random points, over a node on a slow link (late
/// grants land after their attempt closed): never a writer beside anyone,
/// and nothing granted is left behind (checked well inside the TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_waits_over_a_slow_node_exclude_and_leave_nothing() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let servers = servers(3);
    let slow = support::DelayProxy::start(servers[2].port, MS(30));
    let urls = vec![servers[0].url(), servers[1].url(), slow.url()];
    let build = || {
        Arc::new(
            RwLock::builder(urls.clone(), "r12-slow-cuts")
                .ttl(Duration::from_secs(30))
                .build()
                .unwrap(),
        )
    };
    let (writers, readers) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    for t in 0..6u64 {
        let (lock, writers, readers) = (build(), writers.clone(), readers.clone());
        tasks.push(tokio::spawn(async move {
            let mut seed = t * 7919 + 13;
            for _ in 0..25 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let cut = MS((seed >> 33) % 160);
                if t % 2 == 0 {
                    if let Ok(Ok(guard)) = tokio::time::timeout(cut, lock.write_async(None)).await {
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with a reader");
                        tokio::time::sleep(MS(3)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        guard.release_async().await.unwrap();
                    }
                } else if let Ok(Ok(guard)) = tokio::time::timeout(cut, lock.read_async(None)).await
                {
                    readers.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    tokio::time::sleep(MS(3)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    guard.release_async().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let deadline = std::time::Instant::now() + MS(8000);
    loop {
        let left: Vec<String> = servers
            .iter()
            .flat_map(RedisServer::keys)
            .filter(|k| {
                ![":fence", ":alive", ":waiting", ":nodes"]
                    .iter()
                    .any(|e| k.ends_with(e))
            })
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "grants left: {left:?}"
        );
        tokio::time::sleep(MS(50)).await;
    }
}
