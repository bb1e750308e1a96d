//! Review 14 of the etcd async twins (d0d5096): each test fails on that
//! commit and names the bug it shows.

mod etcd_support;

use std::future::Future;
use std::time::{Duration, Instant};

use etcd_support::{group_at, EtcdServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Polls `future` once and drops it: a caller that gave up right away
/// (tokio's timeout polls the future before it looks at its deadline).
async fn polled_once<F: Future>(future: F) -> bool {
    tokio::time::timeout(Duration::ZERO, future).await.is_err()
}

async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(MS(50)).await;
    }
    true
}

/// BUG: `WaitGroup::done_async` of a token this group does not hold (the
/// normal worker side of add/done across processes) runs its delete with
/// `runtime::on_runtime`, which aborts it when the future is dropped: a
/// `done` given up midway never reaches etcd, and the slot stays taken for
/// as long as the adder keeps its lease alive. Every other release twin
/// (`Lock::release_async`, `Slot::release_async`, `done_async` of a held
/// token) uses `to_the_end` and finishes in the background; the Python
/// binding even awaits `done` with `runs_to_end=True` for this reason.
#[tokio::test(flavor = "current_thread")]
async fn a_done_async_of_a_foreign_token_given_up_still_frees_the_slot() {
    let server = EtcdServer::start();
    let adder = group_at(&server.url(), "review14-done", 100, 5);
    let worker = group_at(&server.url(), "review14-done", 100, 5);
    // Control: a held token's done, given up the same way, does finish.
    let own = worker.add_async(None).await.unwrap();
    let _ = polled_once(worker.done_async(&own)).await;
    assert!(
        eventually(MS(3000), || server.keys().is_empty()).await,
        "a held slot's done given up did not finish in the background"
    );
    // The worker frees the adder's slots, and its task is cancelled
    // meanwhile, at moments from right away to well after the answer.
    let mut tokens = Vec::new();
    // (A worker new to the group grants its lease first: a round trip
    // before the delete is sent; an uncut done takes ~30 ms here.)
    let mut workers = Vec::new();
    for step in 0..40u64 {
        let token = adder.add_async(None).await.unwrap();
        let worker = group_at(&server.url(), "review14-done", 100, 5);
        let _ = tokio::time::timeout(MS(step), worker.done_async(&token)).await;
        tokens.push(token);
        workers.push(worker);
    }
    let freed = eventually(MS(3000), || server.keys().is_empty()).await;
    assert!(
        freed,
        "done_async(foreign token) given up midway never reached etcd: {} of {} slots left {:?}",
        server.keys().len(),
        tokens.len(),
        server.keys()
    );
}

/// BUG: `WaitGroup::adopt_async` runs its move with `on_runtime` too: given
/// up after the move was sent, the slot is moved onto this group's lease
/// (and kept alive by it for as long as the group lives) while the group
/// never records it (no fencing token, no health, not freed when the
/// group is dropped with its blocks). The adder's lease then runs out but
/// the slot does not: a slot nobody holds counts against the limit for
/// the adopter's lifetime.
#[tokio::test(flavor = "current_thread")]
async fn an_adopt_async_given_up_midway_leaves_no_slot_that_nobody_holds() {
    let server = EtcdServer::start();
    let adder = group_at(&server.url(), "review14-adopt", 100, 2);
    let adopter = group_at(&server.url(), "review14-adopt", 100, 2);
    let mut given_up = Vec::new();
    // Cut-offs from right away to well after the move's answer.
    for step in 0..80u64 {
        let token = adder.add_async(None).await.unwrap();
        let cut = tokio::time::timeout(
            Duration::from_micros(step * 60),
            adopter.adopt_async(&token),
        )
        .await
        .is_err();
        if cut {
            given_up.push(token);
        }
    }
    assert!(!given_up.is_empty());
    // The adder goes away: its lease is no longer kept alive, and the
    // slots still on it run out after its ttl.
    drop(adder);
    tokio::time::sleep(MS(5000)).await;
    let orphans: Vec<&String> = given_up
        .iter()
        .filter(|token| {
            let live = server
                .keys()
                .iter()
                .any(|key| key.ends_with(token.as_str()));
            live && adopter.fencing_token(token).is_none()
        })
        .collect();
    assert!(
        orphans.is_empty(),
        "{} of {} adopts given up midway left a live slot on the adopter's lease that \
         the adopter does not hold: {:?}",
        orphans.len(),
        given_up.len(),
        orphans
    );
}
