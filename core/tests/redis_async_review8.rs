//! Review 8 of the Redis `_async` Session and Election twins (c701761),
//! against a real redis-server. Tests whose doc starts with "FINDING:"
//! fail at 7057a77; the others are coverage of edges that held there.

mod support;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use lockyard::redis::{Election, Lock, Session};
use support::{eventually, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

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

async fn session(server: &RedisServer) -> Session {
    Session::builder(server.url())
        .ttl(MS(2000))
        .lock_delay(Duration::ZERO)
        .build_async()
        .await
        .unwrap()
}

/// Polls `future` once; its output if that finished it.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut *future).poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// FINDING: a second `destroy_async` while the first is still ending the
/// session returns Ok at once, before the session's locks are freed and
/// its key deleted: "destroyed" is reported while Redis still holds it.
#[tokio::test(flavor = "current_thread")]
async fn a_destroy_awaited_during_another_returns_only_once_the_session_is_gone() {
    let server = RedisServer::start();
    let session = std::sync::Arc::new(session(&server).await);
    let lock = Lock::builder(server.url(), "job")
        .session(&session)
        .build()
        .unwrap();
    let guard = lock.acquire_async(Some(MS(1000))).await.unwrap();
    // Writes stall for a while, as on a slow or busy server.
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query::<()>(&mut server.raw().unwrap())
        .unwrap();
    let first = tokio::spawn({
        let session = session.clone();
        async move { session.destroy_async().await }
    });
    while session.healthy() {
        tokio::task::yield_now().await;
    }
    session.destroy_async().await.unwrap();
    let left = session_keys(&server);
    assert!(first.await.unwrap().is_ok());
    drop(guard);
    assert_eq!(
        left,
        Vec::<String>::new(),
        "destroy_async returned while the session was still in Redis"
    );
}

/// Holds at 7057a77: a campaign dropped at every point of its wait, while
/// the leader resigns (so some are cut right as they win), leaves no
/// place in line and no local term, and no leader in Redis once its
/// background give-up ran (a grant won just as the future was dropped is
/// visible as "b" for a few ms under load); those that finished won one
/// term at a time.
#[tokio::test(flavor = "current_thread")]
async fn a_campaign_cut_around_its_win_leaves_no_leader_behind() {
    let server = RedisServer::start();
    let url = server.url();
    let (sa, sb) = (session(&server).await, session(&server).await);
    let a = std::sync::Arc::new(Election::new(&url, "leader", &sa).unwrap());
    let b = Election::new(&url, "leader", &sb).unwrap();
    let mut won = 0;
    for polls in 0..40 {
        assert!(a.campaign_async("a", Some(MS(2000))).await.unwrap());
        let mut campaign = Box::pin(b.campaign_async("b", Some(MS(2000))));
        assert!(poll_once(&mut campaign).await.is_none());
        let resigning = tokio::task::spawn_blocking({
            let a = a.clone();
            move || a.resign()
        });
        let mut outcome = None;
        for _ in 0..polls {
            outcome = poll_once(&mut campaign).await;
            if outcome.is_some() {
                break;
            }
            tokio::time::sleep(MS(1)).await;
        }
        drop(campaign);
        assert!(resigning.await.unwrap().unwrap());
        match outcome {
            Some(outcome) => {
                assert!(outcome.unwrap());
                won += 1;
                assert!(b.is_leader());
                assert_eq!(b.leader_async().await.unwrap().as_deref(), Some("b"));
                assert!(b.resign_async().await.unwrap());
            }
            None => assert!(!b.is_leader(), "a dropped campaign took a term"),
        }
        eventually(MS(2000), "nobody waits", || queued(&server, "leader") == 0);
        let mut leader = a.leader_async().await.unwrap();
        let until = std::time::Instant::now() + MS(3000);
        while leader.is_some() && std::time::Instant::now() < until {
            tokio::time::sleep(MS(10)).await;
            leader = a.leader_async().await.unwrap();
        }
        assert_eq!(
            leader, None,
            "round {polls}: a dropped campaign left {leader:?} leading in Redis"
        );
    }
    assert!(won > 0, "no campaign ever finished");
}
