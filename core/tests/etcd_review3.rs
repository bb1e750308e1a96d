//! Adversarial review (third round) of the etcd backend: the one-request
//! acquire, the limit carried in every key (`lockyard/<name>/<limit>.<nonce>`)
//! and its `Error::Config` for a name taken with another limit, replies
//! lost and sent again, and the admin functions. Each test states what must
//! hold; every test without a `// holds:` comment failed at 312cb8f, and its
//! comment tells what that code did. The two about lost replies failed
//! until stop 33: a resent delete that found its key gone could not tell
//! its own first attempt from someone else's earlier delete; a failed
//! delete now leaves a mark of its call (`removal.rs`).

mod etcd_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine;
use etcd_support::{eventually, group_at, lock_at, EtcdServer, LateMember, Proxy};
use lockyard::etcd::Lock;

/// Must hold (the brief's contract for this commit: "entries with another
/// limit are refused with Error::Config"; the Redis contract,
/// tests/redis_wait_group.rs `a_lock_and_a_wait_group_of_one_name_refuse_each_other`:
/// with a group's slot held, `lock.try_acquire()` is `Err(Config)`).
/// On etcd a one-attempt acquire first asks `Queue::is_full` (a count of
/// every key of the name) and answers "busy" when the count reaches its own
/// limit, before the Txn whose read of the holders would find the foreign
/// limit: `try_acquire` answers Ok(None), as if another holder of the lock
/// had it, and a lock that polls with `try_acquire` never learns that the
/// name is a wait group's. The blocking `acquire` of the same lock gets
/// Config.
#[test]
fn a_lock_try_acquire_on_a_wait_groups_name_is_a_config_error() {
    let server = EtcdServer::start();
    let quota = group_at(&server.url(), "both-ways", 3, 30);
    let lock = lock_at(&server.url(), "both-ways", 30);
    let _slot = quota.add(None, &|| false).unwrap();
    let blocking = lock.acquire(Some(Duration::from_secs(2))).map(drop);
    assert!(
        matches!(blocking, Err(lockyard::Error::Config(_))),
        "{blocking:?}"
    );
    let tried = lock.try_acquire().map(|guard| guard.is_some());
    assert!(
        matches!(tried, Err(lockyard::Error::Config(_))),
        "try_acquire on a wait group's name answered {tried:?} (Ok(false): no guard, 'held by another \
         holder') while acquire answered {blocking:?}"
    );
}

/// Must hold (`WaitGroup::add`: a slot is granted while fewer than `limit`
/// are held; Config only for "a name held as something else"): a client of
/// the group with the group's own limit is never refused because of
/// another client's refused entry. At 312cb8f a refused entry put its key
/// before it looked at the holders, and the key stayed in the line until
/// its `leave` landed: with that delete 3 s in flight, the group's own
/// `add` was refused with Config. Since review 4 a refused entry writes
/// nothing (its put is conditional on no key of another shape).
#[test]
fn a_refused_entry_does_not_refuse_the_groups_own_clients() {
    let server = EtcdServer::start();
    let quota = group_at(&server.url(), "poisoned", 2, 30);
    let _first = quota.add(None, &|| false).unwrap();
    let lock = lock_at(&server.url(), "poisoned", 30);
    let refused = lock.acquire(Some(Duration::from_secs(10))).map(drop);
    assert!(
        matches!(refused, Err(lockyard::Error::Config(_))),
        "{refused:?}"
    );
    assert_eq!(server.keys().len(), 1, "{:?}", server.keys());
    let second = quota.add(Duration::from_secs(1), &|| false);
    assert!(
        second.is_ok(),
        "the limit-2 group's own add, one slot of two held, was refused: {second:?}"
    );
}

/// Must hold (`WaitGroup::done`: "Frees the slot of `token`, whichever
/// process took it. Ok(false) if that slot had already run out or been
/// freed"; and this commit's rule that a name used with another limit is
/// `Error::Config`). Since the limit is part of every key, a client of the
/// group built with another limit computes another key for the same token
/// (`WaitGroup::key` -> `Queue::key`): its `done` answers Ok(false),
/// "already freed", and its `adopt` Ok(false), "gone", while the slot is
/// held and stays held, kept alive by the adder. Either the slot is freed
/// (adopted), or the caller is told its limit is wrong.
#[test]
fn done_and_adopt_from_a_client_with_another_limit_are_not_false_for_a_held_slot() {
    let server = EtcdServer::start();
    let adder = group_at(&server.url(), "misconfigured", 2, 30);
    let worker = group_at(&server.url(), "misconfigured", 3, 30);
    let token = adder.add(None, &|| false).unwrap();
    let adopted = worker.adopt(&token);
    let done = worker.done(&token);
    let keys = server.keys();
    let refused =
        |answer: &lockyard::Result<bool>| matches!(answer, Err(lockyard::Error::Config(_)));
    assert!(
        (refused(&adopted) || matches!(adopted, Ok(true)))
            && (refused(&done) || (matches!(done, Ok(true)) && keys.is_empty())),
        "a held slot: adopt answered {adopted:?} ('gone'), done answered {done:?} ('already \
         freed'), and the slot is still held: {keys:?}"
    );
}

/// Must hold (`Lock::release`: "Ok(false) when the lock had already been
/// lost (its lease ran out, or its key was deleted)"). The holder's key is
/// deleted by `force_release` (another process takes the lock and leaves),
/// then the holder's release loses its reply: `Queue::leave` sends it
/// again, finds the key gone, and, "resent" with a lease still live, takes
/// the absence for its own first attempt's delete: Ok(true), "kept to the
/// end", though the first attempt deleted nothing (its compare failed) and
/// another holder ran in between. Review 2 mended this only for a first
/// member that refused the connection (`Fault::Unsent`); a reply really
/// lost is the case the "resent" rule was written for, and it cannot tell.
#[test]
fn a_release_whose_reply_was_lost_after_force_release_answers_false() {
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.client_port, "request_delete_range");
    let lock = lock_at(
        &format!("etcd://127.0.0.1:{}", proxy.port),
        "lost-after-force",
        30,
    );
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        lockyard::etcd::force_release(&server.url(), "lost-after-force").unwrap(),
        1
    );
    let other = lock_at(&server.url(), "lost-after-force", 20);
    drop(
        other
            .try_acquire()
            .unwrap()
            .expect("free after force_release"),
    );
    proxy.lose_next.store(true, Ordering::SeqCst);
    let released = guard.release().unwrap();
    assert!(!proxy.lose_next.load(Ordering::SeqCst), "no reply was lost");
    assert!(
        !released,
        "a hold deleted by force_release (and taken by another holder since) was reported kept \
         to the end, Ok(true), because the release's reply was lost and it was sent again"
    );
}

/// Must hold (`WaitGroup::done`: "Ok(false) if that slot had already run
/// out or been freed"). Same root cause as above in `Queue::remove`:
/// `deleted > 0 || resent`. A `done` of a slot freed long before, whose
/// (empty) reply is lost, is sent again and answers Ok(true).
#[test]
fn done_of_a_freed_slot_whose_reply_was_lost_answers_false() {
    let server = EtcdServer::start();
    let adder = group_at(&server.url(), "lost-done", 2, 30);
    let token = adder.add(None, &|| false).unwrap();
    assert!(adder.done(&token).unwrap());
    // The delete's body carries the key in base64: lose the reply to it.
    let key = format!("lockyard/lost-done/G2.{token}");
    let marker: &'static str = Box::leak(
        base64::engine::general_purpose::STANDARD
            .encode(key)
            .into_boxed_str(),
    );
    let proxy = Proxy::start(server.client_port, marker);
    let other = group_at(
        &format!("etcd://127.0.0.1:{}", proxy.port),
        "lost-done",
        2,
        30,
    );
    proxy.lose_next.store(true, Ordering::SeqCst);
    let again = other.done(&token).unwrap();
    assert!(!proxy.lose_next.load(Ordering::SeqCst), "no reply was lost");
    assert!(
        !again,
        "done of a slot freed before answered Ok(true) after its reply was lost"
    );
}

// holds: names that differ by '/', '%', '.', digits or an empty segment
// ("a", "a/1", "a%2F1", "a.1", "a/", "a//b", "1") are separate locks, each
// held at once by its own lock object; a group of limit 1 named "a" sees
// none of the others' keys; inspect of each sees one holder of limit 1.
#[test]
fn names_with_slashes_dots_and_digits_are_separate_lines() {
    let server = EtcdServer::start();
    let names = ["a", "a/1", "a%2F1", "a.1", "a/", "a//b", "1", "a.1.2"];
    let locks: Vec<Lock> = names
        .iter()
        .map(|name| lock_at(&server.url(), name, 30))
        .collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|lock| {
            lock.try_acquire()
                .unwrap()
                .expect("a separate name is free")
        })
        .collect();
    assert_eq!(server.keys().len(), names.len(), "{:?}", server.keys());
    for name in names {
        let state = lockyard::etcd::inspect(&server.url(), name).unwrap();
        assert_eq!(
            (state.holders.len(), state.waiters, state.limit),
            (1, 0, Some(1)),
            "{name}: {state:?}"
        );
    }
    drop(guards);
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

/// Must hold (the contract: nothing is left in etcd once every holder and
/// waiter is gone; a released lock is free). The one-request acquire is
/// sent again on the next member when the first one fails mid-way
/// (`Client::call_tracked`: "an attempt whose fate is unknown"), and that
/// first request may still land later: the library assumes so itself for
/// a wait given up (leases.rs `STRAY_WATCH`: "a put sent before the wait
/// was given up may still land after the delete") and looks for such keys
/// for 20 s. An acquire that succeeded on the second member is not looked
/// after: once it is released, the first put lands (its compare, "the key
/// does not exist", is true again) on the process's live lease, and
/// nothing ever deletes it. It holds the lock for nobody for as long as
/// the process lives (here 8 s, well past the 3 s ttl: the keep-alive
/// keeps it), and every other acquire waits behind it. The same goes for
/// a one-attempt acquire that found the lock busy and left, and for an
/// entry refused with Config.
#[test]
fn an_acquire_sent_again_leaves_no_key_behind_once_released() {
    let server = EtcdServer::start();
    let member = LateMember::start(
        server.client_port,
        "request_put",
        Duration::from_millis(1500),
    );
    let url = format!(
        "etcd://127.0.0.1:{},127.0.0.1:{}",
        member.port, server.client_port
    );
    let lock = lock_at(&url, "late-put", 3);
    let other = lock_at(&server.url(), "late-put", 20);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(guard.release().unwrap());
    assert!(server.keys().is_empty(), "released: {:?}", server.keys());
    std::thread::sleep(Duration::from_secs(8));
    let keys = server.keys();
    let taken = other.try_acquire().unwrap().is_some();
    assert!(
        keys.is_empty() && taken,
        "8 s after the only holder released, the lock is held by a key nobody owns \
         (its acquire's first put, landed late): {keys:?}; try_acquire by another process: {taken}"
    );
}

/// Must hold (the Redis contract, tests/redis_wait_group.rs
/// `a_lock_and_a_wait_group_of_one_name_refuse_each_other`: "A Lock and a
/// WaitGroup of one name ... the second one is refused"; Redis records the
/// kind, lock or group, beside the limit: scripts/prelude.lua `shape`).
/// etcd keys carry only the limit, and a Lock's keys are `1.<nonce>`, the
/// shape of a limit-1 group's: with the lock held, the group's `add` is not
/// refused, it waits in the lock's line (a Timeout here), the lock counts
/// as the group's slot, `inspect` cannot tell them apart.
#[test]
fn a_lock_and_a_limit_one_wait_group_of_one_name_refuse_each_other() {
    let server = EtcdServer::start();
    let lock = lock_at(&server.url(), "one-of-each", 30);
    let quota = group_at(&server.url(), "one-of-each", 1, 30);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    let added = quota.add(Duration::from_secs(1), &|| false);
    let counted = quota.count().unwrap();
    assert!(
        matches!(added, Err(lockyard::Error::Config(_))),
        "a limit-1 WaitGroup of the held lock's name was not refused: add answered {added:?}, \
         and the group counts the lock as its slot: count {counted}"
    );
    drop(guard);
}

// holds: the no-read handoff down a line of five waiters, each of its own
// lock object and lease: one holder at a time, in arrival order, fencing
// tokens strictly increasing, and nothing left in etcd at the end.
#[test]
fn the_no_read_handoff_gives_one_holder_at_a_time_in_order() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;
    let server = EtcdServer::start();
    let first = lock_at(&server.url(), "handoff", 30);
    let guard = first.acquire(Some(Duration::from_secs(5))).unwrap();
    let inside = AtomicUsize::new(0);
    let order = Mutex::new(Vec::new());
    let locks: Vec<Lock> = (0..5)
        .map(|i| lock_at(&server.url(), "handoff", 10 + i))
        .collect();
    std::thread::scope(|s| {
        for (i, lock) in locks.iter().enumerate() {
            let (inside, order) = (&inside, &order);
            s.spawn(move || {
                let held = lock.acquire(Some(Duration::from_secs(20))).unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                order.lock().unwrap().push((i, held.fencing_token()));
                std::thread::sleep(Duration::from_millis(100));
                inside.fetch_sub(1, Ordering::SeqCst);
            });
            // Arrival order: each waiter's key is in before the next starts.
            assert!(eventually(Duration::from_secs(3), || server.keys().len() == i + 2));
        }
        std::thread::sleep(Duration::from_millis(200));
        drop(guard);
    });
    let order = order.into_inner().unwrap();
    let waiters: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(waiters, [0, 1, 2, 3, 4], "{order:?}");
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}
