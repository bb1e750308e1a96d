//! Review of the `_async` twins of the Redis Lock and WaitGroup: each test
//! reproduces a finding against a real redis-server.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockyard::redis::{Lock, WaitGroup};
use support::RedisServer;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock(server: &RedisServer, name: &str) -> Arc<Lock> {
    Arc::new(Lock::builder(server.url(), name).build().unwrap())
}

/// Closes every client connection but the one asking, as a server's idle
/// `timeout`, a proxy or a restart does.
fn kill_clients(server: &RedisServer) {
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut server.raw().unwrap())
        .unwrap();
}

/// Found by review: the async callers' pool handed out a connection the
/// server had closed, and the request failed on it; the blocking pool
/// replaces such a stale connection once (it never carried the request).
#[tokio::test(flavor = "current_thread")]
async fn an_acquire_on_a_pooled_connection_the_server_closed_succeeds() {
    let server = RedisServer::start();
    let lock = lock(&server, "stale-acquire");
    // Leaves a connection of this runtime in the pool.
    lock.acquire_async(None)
        .await
        .unwrap()
        .release_async()
        .await
        .unwrap();
    kill_clients(&server);
    tokio::time::sleep(MS(100)).await;
    let guard = lock.acquire_async(Some(MS(2000))).await.unwrap();
    assert!(guard.release_async().await.unwrap());
}

/// Found by review: a release on a stale pooled connection failed with a
/// connection error, and the lock stayed held (its refresher already
/// stopped) until its lease ran out: every waiter waited a whole ttl.
#[tokio::test(flavor = "current_thread")]
async fn a_release_on_a_pooled_connection_the_server_closed_frees_the_lock() {
    let server = RedisServer::start();
    let lock = lock(&server, "stale-release");
    let guard = lock.acquire_async(None).await.unwrap();
    kill_clients(&server);
    tokio::time::sleep(MS(100)).await;
    assert!(guard.release_async().await.unwrap(), "released");
    let other = self::lock(&server, "stale-release");
    assert!(
        other.try_acquire_async().await.unwrap().is_some(),
        "the lock is free"
    );
}

/// The same for a WaitGroup slot and its count.
#[tokio::test(flavor = "current_thread")]
async fn a_wait_group_on_pooled_connections_the_server_closed_still_works() {
    let server = RedisServer::start();
    let group = WaitGroup::builder(server.url(), "stale-group", 2)
        .build()
        .unwrap();
    let slot = group.acquire_async(None).await.unwrap();
    kill_clients(&server);
    tokio::time::sleep(MS(100)).await;
    assert_eq!(group.count_async().await.unwrap(), 1);
    kill_clients(&server);
    tokio::time::sleep(MS(100)).await;
    assert!(slot.release_async().await.unwrap());
    assert_eq!(group.count_async().await.unwrap(), 0);
}

async fn poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = future => Some(out),
        () = std::future::ready(()) => None,
    }
}

/// Found by review: `done_async` of a token this process does not hold
/// (another process's `add`) had no drop guard, unlike every other async
/// release: dropped before its answer (a `timeout`, a `select!`), the
/// request on the dropped connection was never sent, and the slot stayed
/// taken until its lease ran out.
#[tokio::test(flavor = "current_thread")]
async fn a_done_of_a_foreign_token_dropped_before_its_answer_still_frees_the_slot() {
    let server = RedisServer::start();
    let adder = WaitGroup::builder(server.url(), "foreign-done", 5)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let doer = WaitGroup::builder(server.url(), "foreign-done", 5)
        .build()
        .unwrap();
    // Leaves a connection of this runtime in the pool.
    assert_eq!(doer.count_async().await.unwrap(), 0);
    let token = adder.add_async(None).await.unwrap();
    assert_eq!(doer.count_async().await.unwrap(), 1);
    {
        let mut done = std::pin::pin!(doer.done_async(&token));
        let _ = poll_once(done.as_mut()).await;
    }
    let deadline = tokio::time::Instant::now() + MS(2000);
    while doer.count_async().await.unwrap() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot stays taken after a dropped done"
        );
        tokio::time::sleep(MS(20)).await;
    }
}

/// Found by review: an `_async` call awaited outside a tokio runtime (a
/// `futures` executor, a plain thread) panicked deep inside lockyard
/// ("there is no reactor running"); it is a usage error, reported as one.
#[test]
fn an_async_call_outside_a_tokio_runtime_is_an_error_not_a_panic() {
    use std::task::{Context, Poll, Waker};
    let server = RedisServer::start();
    let lock = lock(&server, "no-runtime");
    let group = WaitGroup::builder(server.url(), "no-runtime-group", 2)
        .build()
        .unwrap();
    let outcome = std::thread::spawn(move || {
        let mut cx = Context::from_waker(Waker::noop());
        let tried = std::pin::pin!(lock.try_acquire_async())
            .as_mut()
            .poll(&mut cx);
        let waited = std::pin::pin!(lock.acquire_async(None))
            .as_mut()
            .poll(&mut cx);
        let counted = std::pin::pin!(group.count_async()).as_mut().poll(&mut cx);
        (
            matches!(tried, Poll::Ready(Err(lockyard::Error::Config(_)))),
            matches!(waited, Poll::Ready(Err(lockyard::Error::Config(_)))),
            matches!(counted, Poll::Ready(Err(lockyard::Error::Config(_)))),
        )
    })
    .join()
    .expect("no panic");
    assert_eq!(outcome, (true, true, true));
}
