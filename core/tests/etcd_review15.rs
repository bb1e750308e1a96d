//! Review 15: failing tests for the etcd async Session / Election /
//! Observer (c867ef7).

mod etcd_support;

use std::future::Future;
use std::time::Duration;

use etcd_support::{Act, EtcdServer, RuleProxy};
use lockyard::etcd::Session;

const MS: fn(u64) -> Duration = Duration::from_millis;

async fn cut_off<F: Future>(after: Duration, future: F) -> bool {
    tokio::time::timeout(after, future).await.is_err()
}

fn leases_after(server: &EtcdServer, pause: Duration) -> Vec<String> {
    std::thread::sleep(pause);
    server.leases()
}

/// BUG: `SessionBuilder::build_async` claims "Dropped before it completes,
/// it revokes a lease it was granted", but `Leases::live` grants the
/// session's lease and then (lock_delay > 0) its bar lease: the first
/// lease lives in a local until both grants are done. A build dropped
/// while the bar lease's grant is in flight drops that local without a
/// revoke (neither `Lease` nor `Unbuilt` knows it), so the session's lease
/// (and the bar lease the grant in flight makes) stay in etcd until their
/// ttls run out.
#[tokio::test(flavor = "current_thread")]
async fn a_build_dropped_during_the_bar_lease_grant_leaves_no_lease() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    // ttl 20 s, lock_delay 10 s: the bar lease is granted with TTL 30.
    proxy.rule("\"TTL\":30", Act::HoldReply(MS(1000)), None);
    let building = Session::builder(proxy.url())
        .ttl(Duration::from_secs(20))
        .lock_delay(Duration::from_secs(10))
        .build_async();
    assert!(cut_off(MS(500), building).await, "the build is cut off");
    let left = leases_after(&server, MS(2500));
    assert!(
        left.is_empty(),
        "a build dropped midway left leases behind (alive until their ttl): {left:?}"
    );
}

/// The same bug with no grant in flight at the cut-off: the bar lease's
/// grant never reaches etcd (refused at the proxy, and retried), so the one
/// lease left is the session's own, granted and answered in full.
#[tokio::test(flavor = "current_thread")]
async fn a_build_dropped_while_its_bar_lease_grant_is_refused_leaves_no_lease() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    proxy.rule("\"TTL\":30", Act::Refuse, None);
    let building = Session::builder(proxy.url())
        .ttl(Duration::from_secs(20))
        .lock_delay(Duration::from_secs(10))
        .build_async();
    assert!(cut_off(MS(500), building).await, "the build is cut off");
    let left = leases_after(&server, MS(1500));
    assert!(
        left.is_empty(),
        "a build dropped midway left its granted session lease (alive until its ttl): {left:?}"
    );
}

/// BUG (narrower window): a build dropped while the session lease's grant
/// is in flight (sent, reply not yet in) leaves the lease etcd granted:
/// its id was picked locally, but nothing revokes it.
#[tokio::test(flavor = "current_thread")]
async fn a_build_dropped_during_the_lease_grant_leaves_no_lease() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    proxy.rule("lease/grant", Act::HoldReply(MS(1000)), None);
    let building = Session::builder(proxy.url())
        .ttl(Duration::from_secs(20))
        .lock_delay(Duration::ZERO)
        .build_async();
    assert!(cut_off(MS(500), building).await, "the build is cut off");
    let left = leases_after(&server, MS(2500));
    assert!(
        left.is_empty(),
        "a build dropped midway left leases behind (alive until their ttl): {left:?}"
    );
}

/// Control (passes): the same build through the same proxy, not cut off,
/// then dropped, leaves no lease: the leases above are the cut-off's.
#[tokio::test(flavor = "current_thread")]
async fn control_a_build_through_the_proxy_left_to_finish_leaves_no_lease() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    proxy.rule("\"TTL\":30", Act::HoldReply(MS(300)), None);
    let session = Session::builder(proxy.url())
        .ttl(Duration::from_secs(20))
        .lock_delay(Duration::from_secs(10))
        .build_async()
        .await
        .unwrap();
    assert_eq!(server.leases().len(), 2);
    drop(session);
    let left = leases_after(&server, MS(2500));
    assert!(left.is_empty(), "{left:?}");
}

/// BUG: `Observer::unread` while a wait dropped a moment ago still holds
/// the observer's tokio mutex spawns the push "after it, as no other call
/// of this observer can run meanwhile". But the very next call can run
/// meanwhile: a blocking `next_change` queues on the mutex from the
/// caller's thread before lockyard's runtime thread has even polled the
/// spawned push, gets the lock first, finds nothing pending and waits for
/// (and returns) the next change: the handed-back term comes after a later
/// one (reordered), or a call with a timeout returns None with a term
/// pending.
#[test]
fn a_term_handed_back_just_after_a_dropped_wait_comes_first() {
    use lockyard::etcd::Election;
    let server = EtcdServer::start();
    let sa = etcd_support::session_at(&server.url(), 5, 0, 5);
    let a = Election::new(&server.url(), "handback", &sa).unwrap();
    assert!(a.campaign("a", None).unwrap());
    let caller = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut reordered = 0;
    let rounds = 20;
    for _ in 0..rounds {
        let mut observer = a.observe();
        let current = observer.next_change(MS(5000), &|| false).unwrap().unwrap();
        assert_eq!(current.value.as_deref(), Some("a"));
        // A wait under way (it opens the watch), dropped.
        caller.block_on(async {
            let _ = cut_off(MS(30), observer.next_change_async(None)).await;
        });
        // The current state was never delivered: handed back at once.
        observer.unread(current.clone());
        let next = observer.next_change(MS(300), &|| false).unwrap();
        if next.as_ref() != Some(&current) {
            reordered += 1;
            let later = observer.next_change(MS(300), &|| false).unwrap();
            eprintln!(
                "handed back {current:?}, next call answered {next:?}, the one after {later:?}"
            );
        }
    }
    assert!(a.resign().unwrap());
    assert_eq!(
        reordered, 0,
        "{reordered} of {rounds} handed-back terms did not come next"
    );
}

/// The same bug as a reorder: a change that comes after the hand-back is
/// answered before the handed-back term (the leader's end before its
/// start).
#[test]
fn a_term_handed_back_just_after_a_dropped_wait_is_not_reordered() {
    use lockyard::etcd::Election;
    let server = EtcdServer::start();
    let sa = etcd_support::session_at(&server.url(), 5, 0, 5);
    let caller = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut answers = Vec::new();
    for round in 0..5 {
        let a = Election::new(&server.url(), &format!("reorder-{round}"), &sa).unwrap();
        assert!(a.campaign("a", None).unwrap());
        let token = a.fencing_token().unwrap();
        let mut observer = a.observe();
        let current = observer.next_change(MS(5000), &|| false).unwrap().unwrap();
        caller.block_on(async {
            let _ = cut_off(MS(30), observer.next_change_async(None)).await;
        });
        observer.unread(current.clone());
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(MS(200));
                assert!(a.resign().unwrap());
            });
            let first = observer.next_change(MS(5000), &|| false).unwrap().unwrap();
            let second = observer.next_change(MS(5000), &|| false).unwrap().unwrap();
            answers.push(vec![
                (first.value, first.fencing_token),
                (second.value, second.fencing_token),
            ]);
        });
        assert_eq!(
            answers.last().unwrap(),
            &vec![(Some("a".to_owned()), token), (None, token)],
            "the handed-back start of a's term must come before its end: {answers:?}"
        );
    }
}
