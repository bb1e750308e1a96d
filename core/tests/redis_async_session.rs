//! The `_async` twins of the Redis Session and Election on the caller's
//! own tokio runtime, against a real redis-server: a session created and
//! destroyed by awaiting, campaigns that hold no thread and leave nothing
//! behind when dropped, and an observer awaited change by change, mixed
//! with the blocking API on the same names.

mod no_tokio;
mod support;

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use lockyard::redis::{Election, Lock, Session, Term};
use lockyard::Error;
use no_tokio::block_on_without_tokio;
use support::{eventually, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

async fn session(server: &RedisServer) -> Session {
    Session::builder(server.url())
        .ttl(MS(2000))
        .lock_delay(Duration::ZERO)
        .build_async()
        .await
        .unwrap()
}

fn session_keys(server: &RedisServer) -> Vec<String> {
    let mut keys = server.keys();
    keys.retain(|key| key.starts_with("lockyard:session:"));
    keys
}

fn queued(server: &RedisServer, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("lockyard:{{{name}}}:queue"))
        .query(&mut server.raw().unwrap())
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_made_and_destroyed_by_awaiting_frees_its_locks_at_once() {
    let server = RedisServer::start();
    let session = Session::new_async(server.url()).await.unwrap();
    assert!(session.healthy());
    assert_eq!(session_keys(&server).len(), 1);
    let lock = Lock::builder(server.url(), "job")
        .session(&session)
        .build()
        .unwrap();
    let guard = lock.acquire_async(Some(MS(1000))).await.unwrap();
    session.destroy_async().await.unwrap();
    assert!(guard.check_health().is_err(), "a lock outlived its session");
    assert!(session_keys(&server).is_empty());
    // Freed, not left to its lease or the lock_delay (15 s by default).
    let other = Lock::builder(server.url(), "job").build().unwrap();
    assert!(other.try_acquire().unwrap().is_some());
    drop(guard);
    // A second destroy does nothing.
    session.destroy_async().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_session_create_dropped_midway_leaves_no_session_behind() {
    let server = RedisServer::start();
    let mut finished = Vec::new();
    // Cut off at every point of its round trip: before the connection,
    // with the SET on its way, with the reply on its way; and, on a
    // loaded machine too, at least once not cut off at all.
    for polls in 0.. {
        if polls >= 60 && !finished.is_empty() {
            break;
        }
        assert!(polls < 100_000, "no create ever finished");
        let building = Session::builder(server.url()).ttl(MS(60_000)).build_async();
        if let Some(session) = poll_times(building, polls).await {
            finished.push(session.unwrap());
        }
    }
    for session in &finished {
        session.destroy_async().await.unwrap();
    }
    // Waits without blocking the runtime: a dropped create's connection
    // writes its SET, and the DEL queued behind it, on this thread.
    let started = std::time::Instant::now();
    while !session_keys(&server).is_empty() {
        assert!(started.elapsed() < MS(5000), "a session key was left");
        tokio::time::sleep(MS(10)).await;
    }
}

/// Polls `future` up to `times` times, letting the runtime's I/O driver
/// run between polls, and drops it if it is not done by then.
async fn poll_times<F: Future>(future: F, times: usize) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    for _ in 0..times {
        let polled = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
        if let Poll::Ready(output) = polled {
            return Some(output);
        }
        tokio::task::yield_now().await;
    }
    None
}

#[tokio::test(flavor = "current_thread")]
async fn bad_options_and_a_dead_server_are_errors_of_their_kind() {
    let server = RedisServer::start();
    let short = Session::builder(server.url())
        .ttl(MS(1))
        .build_async()
        .await;
    assert!(matches!(short, Err(Error::Config(_))), "{:?}", short.err());
    let url = format!("redis://127.0.0.1:{}/0", support::free_port());
    let unreachable = Session::builder(url)
        .connect_timeout(MS(300))
        .build_async()
        .await;
    assert!(
        matches!(unreachable, Err(Error::Backend { .. })),
        "{:?}",
        unreachable.err()
    );
}

#[test]
fn a_session_awaited_outside_a_tokio_runtime_is_a_config_error() {
    let server = RedisServer::start();
    let built = block_on_without_tokio(Session::new_async(server.url()));
    assert!(matches!(built, Err(Error::Config(_))), "{:?}", built.err());
    assert!(session_keys(&server).is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn campaigns_awaited_and_blocking_take_turns_and_observers_see_each_term() {
    let server = RedisServer::start();
    let url = server.url();
    let (sa, sb) = (session(&server).await, session(&server).await);
    let a = Election::new(&url, "leader", &sa).unwrap();
    let b = Arc::new(Election::new(&url, "leader", &sb).unwrap());
    let watcher = Election::new(&url, "leader", &sb).unwrap();
    let mut observer = watcher.observe();
    let first = observer.next_change_async(Some(MS(1000))).await.unwrap();
    assert_eq!(first.unwrap().value, None);

    assert!(a.campaign_async("a", Some(Duration::ZERO)).await.unwrap());
    assert!(matches!(
        a.campaign_async("a", Some(Duration::ZERO)).await,
        Err(Error::AlreadyLocked(_))
    ));
    assert!(!b.campaign_async("b", Some(MS(200))).await.unwrap());
    assert_eq!(b.leader_async().await.unwrap().as_deref(), Some("a"));
    // b waits on the runtime while a (blocking, on another thread) resigns.
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.campaign_async("b", Some(MS(3000))).await }
    });
    tokio::time::sleep(MS(200)).await;
    tokio::task::spawn_blocking(move || a.resign().unwrap())
        .await
        .unwrap();
    assert!(waiting.await.unwrap().unwrap());
    assert!(b.is_leader());
    assert!(b.resign_async().await.unwrap());
    assert!(matches!(b.resign_async().await, Err(Error::NotLocked(_))));

    let mut terms: Vec<Term> = Vec::new();
    while let Some(term) = observer.next_change_async(Some(MS(700))).await.unwrap() {
        terms.push(term);
    }
    let values: Vec<Option<&str>> = terms.iter().map(|t| t.value.as_deref()).collect();
    assert_eq!(values, [Some("a"), None, Some("b"), None]);
    assert!(terms[1].fencing_token < terms[2].fencing_token);
    assert_eq!(watcher.leader_async().await.unwrap(), None);
    assert_eq!(queued(&server, "leader"), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_campaign_leaves_no_place_in_line_and_takes_no_term() {
    let server = RedisServer::start();
    let url = server.url();
    let (sa, sb) = (session(&server).await, session(&server).await);
    let a = Election::new(&url, "leader", &sa).unwrap();
    let b = Election::new(&url, "leader", &sb).unwrap();
    assert!(a.campaign_async("a", None).await.unwrap());
    for _ in 0..20 {
        let cut = tokio::time::timeout(MS(30), b.campaign_async("b", None)).await;
        assert!(cut.is_err(), "won while another leads");
    }
    eventually(MS(1000), "the dropped campaigns left the line", || {
        queued(&server, "leader") == 0
    });
    a.resign_async().await.unwrap();
    // Nobody inherited the term from a dropped campaign.
    tokio::time::sleep(MS(100)).await;
    assert_eq!(a.leader_async().await.unwrap(), None);
    assert!(!b.is_leader());
    assert!(b.campaign_async("b", Some(Duration::ZERO)).await.unwrap());
}

#[tokio::test(flavor = "current_thread")]
async fn a_campaign_ends_when_its_session_is_destroyed() {
    let server = RedisServer::start();
    let url = server.url();
    let (sa, sb) = (session(&server).await, session(&server).await);
    let a = Election::new(&url, "leader", &sa).unwrap();
    let b = Election::new(&url, "leader", &sb).unwrap();
    assert!(a.campaign_async("a", None).await.unwrap());
    let (campaign, destroyed) = tokio::join!(b.campaign_async("b", Some(MS(5000))), async {
        tokio::time::sleep(MS(200)).await;
        sb.destroy_async().await
    });
    destroyed.unwrap();
    assert!(
        campaign.is_err(),
        "a campaign under a destroyed session won"
    );
    assert!(!b.is_leader());
    assert!(a.is_leader());
    eventually(MS(1000), "the ended campaign left the line", || {
        queued(&server, "leader") == 0
    });
}
