//! The async quorum RwLock never leaks: after 1000 waits cut off by
//! their callers (dropped futures), the runtime's live tasks return to
//! their baseline and no grant is left. One test per binary, so nothing
//! else runs on the runtime meanwhile.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockyard::quorum::{live_tasks, RwLock};
use support::RedisServer;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock(servers: &[RedisServer], name: &str) -> Arc<RwLock> {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    Arc::new(
        RwLock::builder(urls, name)
            .ttl(Duration::from_secs(5))
            .build()
            .unwrap(),
    )
}

/// Keys that are grants: all but the fencing counter, the restart guard,
/// writer marks and the node list.
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

#[test]
fn tasks_return_to_baseline_after_many_cancelled_waits() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let holder = lock(&servers, "leaks");
        let contender = lock(&servers, "leaks");
        drop(contender.write_async(None).await.unwrap());
        tokio::time::sleep(MS(300)).await;
        let baseline = live_tasks();
        let held = holder.write_async(None).await.unwrap();
        let mut waits = tokio::task::JoinSet::new();
        for i in 0..1000u64 {
            let contender = contender.clone();
            waits.spawn(async move {
                let cut = MS(20 + i % 40);
                let cut_off = if i % 2 == 0 {
                    tokio::time::timeout(cut, contender.write_async(None))
                        .await
                        .is_err()
                } else {
                    tokio::time::timeout(cut, contender.read_async(None))
                        .await
                        .is_err()
                };
                assert!(cut_off, "a wait got in beside the writer");
            });
        }
        while let Some(joined) = waits.join_next().await {
            joined.unwrap();
        }
        held.release_async().await.unwrap();
        eventually(MS(10_000), "tasks return to baseline", || {
            live_tasks() == baseline
        })
        .await;
        eventually(MS(3000), "no grant is left", || grants(&servers).is_empty()).await;
    });
}
