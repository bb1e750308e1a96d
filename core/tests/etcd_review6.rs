//! Review 6 (etcd: a delete sent again after a lost reply, and its mark,
//! `removal.rs`), adversarial: each test states what must hold. Every test
//! without a `// holds:` mark failed at 1ff138f, and its comment tells what
//! that commit did.
//!
//! At 1ff138f a release, `done`, resign or `force_release` deletes its key
//! with a Txn whose failure branch puts a mark of the call
//! (`lockyard/<name>.gone.<nonce>`) and reads its previous value; an attempt
//! sent again that finds the key gone and no earlier mark takes the
//! absence for its own first attempt's delete.
//!
//! Since: the mark's version counts the earlier attempts that failed, a
//! refused Txn on a lease gone falls back to the earlier rule, a mark that
//! may still land (or whose delete failed) goes on the lease's sweeps, and
//! `force_release` puts no mark. The `#[ignore]`d test is a known gap.

mod etcd_support;

use std::time::{Duration, Instant};

use etcd_support::{eventually, group_at, lock_at, Act, EtcdServer, LateMember, RuleProxy};
use lockyard::etcd::{force_release, inspect, Lock};

/// The text of every request that deletes a holder's key or a slot (the
/// release Txn, `done`'s, `force_release`'s), and of no read.
const DELETE_TXN: &str = "request_delete_range";

/// The URL of two members, `first` tried first, then the server itself.
fn two_members(first: u16, server: &EtcdServer) -> String {
    format!("etcd://127.0.0.1:{first},127.0.0.1:{}", server.client_port)
}

/// Must hold (`Lock::release`: "Ok(false) when the lock had already been
/// lost (its lease ran out, or its key was deleted)"). The holder's key is
/// deleted by `force_release`, and another holder takes the lock and
/// leaves. The release's first attempt never reaches etcd (the member
/// closes the connection as soon as it has read the request: a member
/// that dies before proposing it, a proxy that fails); the client cannot
/// tell that from a lost reply and sends it again. The second attempt
/// finds the key gone and no mark, since no earlier attempt ran at all,
/// and `delete_once` takes that for "my first attempt deleted it":
/// Ok(true), "kept to the end". The mark records only failed attempts, so
/// an attempt that never ran looks exactly like one that deleted the key.
/// Still a gap (`removal.rs` says so): telling them apart needs a receipt
/// written by the delete's own success branch, which would stay in etcd
/// after every release or cost a second write to take away.
#[test]
#[ignore = "known gap: an attempt that never reached etcd looks like one that deleted the key; see removal.rs"]
fn a_release_whose_first_attempt_never_reached_etcd_after_force_release_answers_false() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let lock = lock_at(&proxy.url(), "unsent-after-force", 30);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        force_release(&server.url(), "unsent-after-force").unwrap(),
        1
    );
    let other = lock_at(&server.url(), "unsent-after-force", 20);
    drop(
        other
            .try_acquire()
            .unwrap()
            .expect("free after force_release"),
    );
    proxy.rule(DELETE_TXN, Act::Refuse, Some(1));
    let released = guard.release();
    assert_eq!(proxy.left(DELETE_TXN), Some(0), "no attempt was refused");
    assert!(
        matches!(released, Ok(false)),
        "a hold deleted by force_release (and taken by another holder since) was reported \
         {released:?}, kept to the end, because the release's first attempt, which \
         never reached etcd, was taken for the one that deleted the key"
    );
}

/// Must hold (`Lock::release`: Ok(true) when the hold was kept to the
/// end). The release's first attempt deletes the key and its reply is
/// lost; the second attempt finds the key gone, puts the mark, and its
/// reply is lost too; the third finds the mark the second put and
/// concludes that "an earlier attempt of the same call failed too", so not
/// ours: Ok(false), a hold reported lost (and warned about) that this very
/// call released while it held. A mark says some attempt found the key
/// gone, not that the first one did: the second attempt found it gone
/// because the first had deleted it.
#[test]
fn a_release_whose_reply_was_lost_twice_answers_true() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let lock = lock_at(&proxy.url(), "lost-twice", 30);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    proxy.rule(DELETE_TXN, Act::LoseReply, Some(2));
    let released = guard.release();
    assert_eq!(proxy.left(DELETE_TXN), Some(0), "two replies were not lost");
    let keys = server.keys();
    assert!(
        matches!(released, Ok(true)) && keys.is_empty(),
        "a release whose own first attempt deleted the key (its reply and the next one's lost) \
         answered {released:?}; keys: {keys:?}"
    );
}

/// Must hold (`WaitGroup::done`: true when this call freed the slot;
/// "Ok(false) if that slot had already run out or been freed"). As above
/// for `Queue::remove`: a `done` from another process whose first delete
/// frees the slot, with that reply and the next one lost, answers
/// Ok(false), "already freed"; the caller is told someone else freed a
/// slot it freed itself.
#[test]
fn a_done_whose_reply_was_lost_twice_answers_true() {
    let server = EtcdServer::start();
    let adder = group_at(&server.url(), "done-lost-twice", 2, 30);
    let token = adder.add(None, &|| false).unwrap();
    let proxy = RuleProxy::start(server.client_port);
    let worker = group_at(&proxy.url(), "done-lost-twice", 2, 30);
    proxy.rule(DELETE_TXN, Act::LoseReply, Some(2));
    let done = worker.done(&token);
    assert_eq!(proxy.left(DELETE_TXN), Some(0), "two replies were not lost");
    let count = adder.count().unwrap();
    assert!(
        matches!(done, Ok(true)) && count == 0,
        "done of a held slot, which its first attempt freed, answered {done:?} (count now \
         {count})"
    );
}

/// Must hold (`Lock::release`, as above: a hold kept to the end answers
/// Ok(true); before 1ff138f a resent release that found its key gone with
/// the lease live when it began answered so). The first attempt deletes
/// the key and its reply is lost; the lease then ends (revoked here; run
/// out, for a holder whose keep-alives stalled) before the second attempt
/// lands. That attempt's compare fails, its failure branch puts the mark
/// on the gone lease, etcd refuses the whole Txn with "requested lease not
/// found", and `delete_once` reads that as "not ours": Ok(false), though
/// this call deleted the key while its lease was live.
#[test]
fn a_release_whose_lease_ends_between_attempts_after_deleting_answers_true() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let lock = lock_at(&proxy.url(), "lease-between", 7);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    proxy.rule(DELETE_TXN, Act::LoseReply, Some(1));
    proxy.rule(
        DELETE_TXN,
        Act::HoldRequest(Duration::from_millis(1500)),
        Some(1),
    );
    std::thread::scope(|s| {
        let releasing = s.spawn(|| guard.release());
        assert!(
            eventually(Duration::from_secs(3), || proxy.left(DELETE_TXN) == Some(0)),
            "the first reply was not lost"
        );
        assert!(
            server.keys().is_empty(),
            "the first attempt deleted the key"
        );
        let lease = server.lease_granted_with(7);
        assert!(server.ctl(&["lease", "revoke", &lease]).0);
        let released = releasing.join().unwrap();
        assert!(
            matches!(released, Ok(true)),
            "a release whose first attempt deleted the key while the lease was live answered \
             {released:?} because the lease ended before the attempt sent again"
        );
    });
}

/// Must hold (`force_release` writes nothing that stays: "its key is
/// deleted (and a session's bar with it)"; the brief: no key left under
/// `lockyard/`). `force_release`'s first delete is held up in a failing
/// member and lands 1.5 s late; the client sends it again to the next
/// member, which deletes the key: Ok(1). The late attempt then finds the
/// key gone and puts its mark, with no lease (an operator's call has
/// none), after the call has deleted its mark already: a key
/// `lockyard/<name>.gone.<nonce>` that nothing ever deletes, long after
/// every process is gone.
#[test]
fn a_force_release_whose_first_attempt_lands_late_leaves_no_key() {
    let server = EtcdServer::start();
    let member = LateMember::start(server.client_port, DELETE_TXN, Duration::from_millis(1500));
    let holder = lock_at(&server.url(), "late-force", 5);
    let guard = holder.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        force_release(&two_members(member.port, &server), "late-force").unwrap(),
        1
    );
    assert!(!guard.release().unwrap(), "force-released");
    drop(holder);
    // The late attempt lands 1.5 s after it was sent; every lease of this
    // test is revoked by now.
    std::thread::sleep(Duration::from_millis(2500));
    let (keys, leases) = (server.keys(), server.leases());
    assert!(
        keys.is_empty(),
        "after force_release, with no lock object left, etcd keeps {keys:?}, with the leases \
         {leases:?} (none: the key stays for good)"
    );
}

/// Must hold (the brief: no key left in etcd once a release is done;
/// `removal.rs`: a successful delete writes no mark). A release's first
/// attempt is held up in a failing member and lands 1.5 s late; the second
/// attempt, on the next member, deletes the key: Ok(true). The late
/// attempt then finds the key gone and puts its mark on the lock's lease,
/// after the release has returned: nobody deletes it, and it stays for as
/// long as this process keeps a lock object of that URL and ttl alive (a
/// session's: for the session's life).
#[test]
fn a_release_whose_first_attempt_lands_late_leaves_no_mark() {
    let server = EtcdServer::start();
    let member = LateMember::start(server.client_port, DELETE_TXN, Duration::from_millis(1500));
    let lock = lock_at(&two_members(member.port, &server), "late-release", 3);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(guard.release().unwrap());
    assert!(server.keys().is_empty(), "released: {:?}", server.keys());
    // The late attempt lands 1.5 s after it was sent; then a few
    // keep-alives (every ttl/3 = 1 s) and their sweeps.
    std::thread::sleep(Duration::from_millis(4500));
    let keys = server.keys();
    assert!(
        keys.is_empty(),
        "4.5 s after a release that answered Ok(true), with the lock object still alive, etcd \
         keeps {keys:?}"
    );
}

/// Must hold (`removal.rs`: a failed delete "costs a second request, which
/// deletes the mark"; a mark the call cannot see to goes "with the lease's
/// sweeps"). A release finds its key deleted by `force_release` (Ok(false),
/// right) and puts its mark; the second request, the mark's delete, gets
/// no answer within the request timeout (a member that fails for a
/// moment). `drop_mark` only logs a warning: the mark is not handed to
/// the lease's sweeps, and stays for as long as the lease does, here well
/// after the member is back and three keep-alives (and sweeps) went by.
#[test]
fn a_mark_whose_delete_failed_is_swept() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let lock = Lock::builder(proxy.url(), "mark-undeleted")
        .ttl(Duration::from_secs(3))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(force_release(&server.url(), "mark-undeleted").unwrap(), 1);
    // Only the mark's delete is a plain `kv/deleterange`: every attempt of
    // it within the request timeout is refused.
    proxy.rule("kv/deleterange", Act::Refuse, Some(40));
    let released = guard.release();
    assert!(matches!(released, Ok(false)), "{released:?}");
    let failed_at = Instant::now();
    let swept = eventually(Duration::from_secs(4), || server.keys().is_empty());
    assert!(
        swept,
        "{:?} after a release whose mark's delete failed, with the lock object alive and \
         etcd answering, etcd keeps {:?}",
        failed_at.elapsed(),
        server.keys()
    );
}

// holds: a mark of one name is no key of another, whatever the names
// ("n", "n.gone.0123456789abcdef", "n/x", "n%2Fx", names that hold the
// mark's own text): with a mark of "n" standing,
// every other name is held by its own lock at once, inspect sees one
// holder each and no waiter, a group named like the mark counts its own
// slot only, and the failed release of "n" answers Ok(false).
#[test]
fn marks_are_no_other_names_keys() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let lock = Lock::builder(proxy.url(), "n")
        .ttl(Duration::from_secs(30))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(force_release(&server.url(), "n").unwrap(), 1);
    proxy.rule("kv/deleterange", Act::Refuse, Some(40));
    assert!(!guard.release().unwrap());
    // Its mark is swept as soon as its delete fails: stand one of that
    // shape in for it.
    let mark = "lockyard/n.gone.00112233445566ff";
    assert!(server.ctl(&["put", mark, ""]).0);
    let marked = mark.trim_start_matches("lockyard/").to_owned();
    let names = [
        marked.clone(),
        format!("{marked}/x"),
        "n.gone".to_owned(),
        "n/x".to_owned(),
        "n%2Fx".to_owned(),
        "n.gone.0123456789abcdef".to_owned(),
    ];
    let locks: Vec<Lock> = names
        .iter()
        .map(|name| lock_at(&server.url(), name, 30))
        .collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|lock| lock.try_acquire().unwrap().expect("every name is free"))
        .collect();
    for name in &names {
        let state = inspect(&server.url(), name).unwrap();
        assert_eq!(
            (state.holders.len(), state.waiters),
            (1, 0),
            "{name}: {state:?}"
        );
    }
    let group = group_at(&server.url(), &format!("{marked}.gone"), 3, 30);
    let _slot = group.add(None, &|| false).unwrap();
    assert_eq!(group.count().unwrap(), 1);
    drop(guards);
}
