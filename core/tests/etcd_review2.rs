//! Adversarial review (second round) of the etcd backend: the new
//! WaitGroup, the lock's waiting line and replies that count as "resent".
//! Each test states what must hold. Every test without a `// holds:`
//! comment failed at 1d980ad (the WaitGroup's first commit), and its
//! comment tells what that code did; the commit that adds this file
//! mends each of them.

mod etcd_support;

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use etcd_support::{
    answer_parent, child_answer, eventually, group_at, lock_at, pipe, EtcdServer, Proxy,
};
use lockyard::etcd::WaitGroup;

/// A loopback port nothing listens on: a member that refuses at once.
fn dead_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Must hold (`WaitGroup::done`'s doc): "Ok(false) if that slot had
/// already run out or been freed". A cluster URL whose first member is
/// down (connection refused: the request never left this host) makes the
/// client send the delete to the next member and count it as "resent";
/// `Queue::remove` then answers `deleted > 0 || resent`, Ok(true), for a
/// slot that was freed long before.
#[test]
fn done_of_a_freed_slot_answers_false_when_the_first_member_is_down() {
    let server = EtcdServer::start();
    let two_members = format!(
        "etcd://127.0.0.1:{},127.0.0.1:{}",
        dead_port(),
        server.client_port
    );
    let adder = group_at(&server.url(), "resent-done", 2, 30);
    let token = adder.add(None, &|| false).unwrap();
    // Each group has its own client, whose first try goes to member 0.
    let first = group_at(&two_members, "resent-done", 2, 30);
    assert!(first.done(&token).unwrap(), "the first done frees the slot");
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    let second = group_at(&two_members, "resent-done", 2, 30);
    let again = second.done(&token).unwrap();
    assert!(
        !again,
        "done of a slot freed already answered Ok(true): the refused first member made it 'resent'"
    );
}

/// Must hold (`Lock::release`'s doc): "Ok(false) when the lock had already
/// been lost (its lease ran out, or its key was deleted)". After
/// `force_release` deleted the holder's key, a release whose first member
/// is down (refused: nothing was sent) finds the key gone on the next
/// member and, being "resent" with a lease still live, answers Ok(true):
/// the holder is told its hold was kept to the end while another holder
/// may have run in between.
#[test]
fn a_release_after_force_release_answers_false_when_the_first_member_is_down() {
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.client_port, "never-lost");
    let url = format!(
        "etcd://127.0.0.1:{},127.0.0.1:{}",
        proxy.port, server.client_port
    );
    let lock = lock_at(&url, "resent-release", 30);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        lockyard::etcd::force_release(&server.url(), "resent-release").unwrap(),
        1
    );
    // Another holder takes it meanwhile (and leaves).
    let other = lock_at(&server.url(), "resent-release", 20);
    let taken = other
        .try_acquire()
        .unwrap()
        .expect("free after force_release");
    drop(taken);
    // The member the lock's client prefers goes away: refused at once.
    proxy.down.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(50));
    let released = guard.release().unwrap();
    assert!(
        !released,
        "a hold deleted by force_release was reported kept to the end (Ok(true))"
    );
}

/// Must hold: a waiter's acquire returns only once its key holds the lock.
/// The "next" shortcut (`wait_turn`: the holder just ahead was deleted, so
/// we hold, without a read) is wrong when the waiter's own key went too:
/// here the holder and the waiter are two threads of one process, whose
/// keys ride on the one shared lease; the lease is revoked, both keys go in
/// one revision, the waiter sees the holder's delete and returns Ok with no
/// key in etcd. It reports itself healthy (the keep-alive notices the loss
/// only within ttl/3) while another process takes the lock: two holders.
#[test]
fn a_waiter_whose_own_key_went_with_the_holder_does_not_acquire() {
    let server = EtcdServer::start();
    let lock = lock_at(&server.url(), "revoked-line", 30);
    // Another ttl: another lease, as another process would have.
    let other = lock_at(&server.url(), "revoked-line", 20);
    let held = Barrier::new(2);
    let release = Barrier::new(2);
    let outcome = std::thread::scope(|s| {
        s.spawn(|| {
            let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
            held.wait();
            release.wait();
            drop(guard);
        });
        held.wait();
        let waiter = s.spawn(|| {
            let acquired = lock.acquire(Some(Duration::from_secs(10)));
            let outcome = match acquired {
                Err(e) => Err(e.to_string()),
                Ok(guard) => {
                    let owned = lock.owned().unwrap();
                    let healthy = guard.check_health().is_ok();
                    let second = other.try_acquire().unwrap().is_some();
                    Ok((owned, healthy, second))
                }
            };
            release.wait();
            outcome
        });
        std::thread::sleep(Duration::from_millis(500));
        let leases = server.leases();
        assert_eq!(leases.len(), 1, "one shared lease: {leases:?}");
        assert!(server.ctl(&["lease", "revoke", &leases[0]]).0);
        waiter.join().unwrap()
    });
    // An error ("its key is gone", "lost its lease") would be right.
    if let Ok((owned, healthy, second)) = outcome {
        assert!(
            owned && !second,
            "the waiter's acquire returned Ok without a key (owned: {owned}, healthy: {healthy}), \
             and another process then acquired too (second holder: {second})"
        );
    }
}

/// Must hold: a wait group never has more than `limit` slots held. Same
/// root cause as above, in a limit-1 group (which takes the "next"
/// shortcut too): the added slot and a waiting `add` of the same group
/// ride on the group's lease; revoked, both keys go at once, the waiter's
/// `add` returns a token for a slot with no key, healthy, and another
/// group then takes the one slot as well.
#[test]
fn a_limit_one_group_waiter_whose_key_went_with_the_holder_gets_no_slot() {
    let server = EtcdServer::start();
    let quota = group_at(&server.url(), "revoked-slot", 1, 30);
    let other = group_at(&server.url(), "revoked-slot", 1, 30);
    let first = quota.add(None, &|| false).unwrap();
    let outcome = std::thread::scope(|s| {
        let waiter = s.spawn(|| quota.add(Duration::from_secs(10), &|| false));
        std::thread::sleep(Duration::from_millis(500));
        let leases = server.leases();
        assert_eq!(leases.len(), 1, "{leases:?}");
        assert!(server.ctl(&["lease", "revoke", &leases[0]]).0);
        waiter.join().unwrap()
    });
    assert!(!quota.done(&first).unwrap(), "the first slot was revoked");
    if let Ok(token) = outcome {
        let healthy = quota.healthy(&token);
        let keys = server.keys();
        let second = other.add(Duration::ZERO, &|| false).is_ok();
        assert!(
            !second && !keys.is_empty(),
            "add returned a slot with no key (keys: {keys:?}, healthy: {healthy}); \
             another group then took a slot too: 2 slots held with limit 1"
        );
    }
}

// holds: under contention, with waiters giving up (timeouts and
// interrupts) while others are served, a limit-2 group never has more
// than two slots in use and leaves no key once everyone is gone.
#[test]
fn waiters_giving_up_never_let_more_than_the_limit_in_and_leave_nothing() {
    let server = EtcdServer::start();
    let quota = Arc::new(group_at(&server.url(), "give-up", 2, 5));
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let (quota, inside, most, served) =
                (quota.clone(), inside.clone(), most.clone(), served.clone());
            std::thread::spawn(move || {
                for round in 0..6u64 {
                    let started = Instant::now();
                    let patience = Duration::from_millis(30 + (i * 37 + round * 53) % 250);
                    let taken = if (i + round) % 2 == 0 {
                        quota.enter(patience, &|| false)
                    } else {
                        quota.enter(None, &|| started.elapsed() > patience)
                    };
                    if let Ok(token) = taken {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        served.fetch_add(1, Ordering::SeqCst);
                        quota.check_health(&token).unwrap();
                        std::thread::sleep(Duration::from_millis(40));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        assert!(quota.leave(&token).unwrap());
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 2, "over the limit");
    assert!(served.load(Ordering::SeqCst) > 0);
    assert!(
        eventually(Duration::from_secs(5), || server.keys().is_empty()),
        "left behind: {:?}",
        server.keys()
    );
}

// holds: a slot freed by `done` from another group (another process)
// turns its holder unhealthy within ttl/3, and the holder's own `done`
// then answers false.
#[test]
fn a_slot_done_by_another_group_turns_its_holder_unhealthy() {
    let server = EtcdServer::start();
    let holder = group_at(&server.url(), "done-elsewhere", 2, 3);
    let other = group_at(&server.url(), "done-elsewhere", 2, 3);
    let token = holder.add(None, &|| false).unwrap();
    assert!(holder.healthy(&token));
    assert!(other.done(&token).unwrap());
    assert!(
        eventually(Duration::from_secs(3), || !holder.healthy(&token)),
        "still healthy"
    );
    assert!(holder.check_health(&token).is_err());
    assert!(!holder.done(&token).unwrap());
}

// holds: two groups (processes) adopting one slot at the same moment:
// exactly one of them gets it, and it keeps the fencing token.
#[test]
fn two_adopters_racing_for_one_slot_get_it_once() {
    let server = EtcdServer::start();
    let adder = group_at(&server.url(), "adopt-race", 3, 30);
    for _ in 0..5 {
        let token = adder.add(None, &|| false).unwrap();
        let fence = adder.fencing_token(&token).unwrap();
        let a = group_at(&server.url(), "adopt-race", 3, 30);
        let b = group_at(&server.url(), "adopt-race", 3, 30);
        let start = Barrier::new(2);
        let (got_a, got_b) = std::thread::scope(|s| {
            let ta = s.spawn(|| {
                start.wait();
                a.adopt(&token).unwrap()
            });
            let tb = s.spawn(|| {
                start.wait();
                b.adopt(&token).unwrap()
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert!(got_a ^ got_b, "adopted by a: {got_a}, by b: {got_b}");
        let winner = if got_a { &a } else { &b };
        assert_eq!(winner.fencing_token(&token), Some(fence));
        assert!(winner.done(&token).unwrap());
    }
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

// holds: an adoption whose reply was lost (committed, then sent again)
// still answers true, and the slot rides on the adopter's lease: it
// outlives the adder's dropped group past the ttl.
#[test]
fn an_adoption_whose_reply_was_lost_still_adopts() {
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.client_port, "request_put");
    let adder = group_at(&server.url(), "adopt-lost", 2, 2);
    let adopter = group_at(
        &format!("etcd://127.0.0.1:{}", proxy.port),
        "adopt-lost",
        2,
        2,
    );
    let token = adder.add(None, &|| false).unwrap();
    assert_eq!(adopter.count().unwrap(), 1);
    proxy.lose_next.store(true, Ordering::SeqCst);
    assert!(adopter.adopt(&token).unwrap(), "the adoption was lost");
    assert!(!proxy.lose_next.load(Ordering::SeqCst), "no reply was lost");
    drop(adder);
    std::thread::sleep(Duration::from_secs(4));
    assert!(adopter.healthy(&token));
    assert_eq!(adopter.count().unwrap(), 1);
    assert!(adopter.done(&token).unwrap());
}

/// Must hold (`LockState`'s doc, which `etcd::inspect` returns): `holders`
/// are the live holders and `limit` is "1 for a lock ..., a WaitGroup's
/// limit otherwise". On the name of an etcd WaitGroup with three slots
/// held, `inspect` builds a limit-1 line (admin.rs `queue`): it shows one
/// holder, counts the two other holders as waiters and says limit 1, and
/// `lockyard status` prints that. etcd stores no limit for the group, so
/// `inspect` cannot tell.
#[test]
fn inspect_of_a_wait_group_shows_its_slots_as_holders_and_its_limit() {
    let server = EtcdServer::start();
    let quota = group_at(&server.url(), "inspected", 3, 30);
    for _ in 0..3 {
        quota.add(None, &|| false).unwrap();
    }
    let state = lockyard::etcd::inspect(&server.url(), "inspected").unwrap();
    assert_eq!(
        (state.holders.len(), state.waiters, state.limit),
        (3, 0, Some(3)),
        "three slots held, nobody waits: {state:?}"
    );
}

/// Must hold (the Redis WaitGroup's contract, tests/redis_wait_group.rs
/// `a_client_with_another_limit_is_refused_while_slots_are_held`: "The
/// limit is the group's, not each client's"): a group of limit 2 never has
/// more than 2 slots held. etcd records no limit: each client counts the
/// line against its own, so a client built with limit 5 takes a third and
/// a fourth slot (one-attempt adds that must fail, with Config as on Redis
/// or at least a timeout) while the limit-2 group's two slots are held.
#[test]
fn a_client_with_another_limit_cannot_go_past_the_groups_limit() {
    let server = EtcdServer::start();
    let two = group_at(&server.url(), "recorded", 2, 30);
    let five = group_at(&server.url(), "recorded", 5, 30);
    two.add(None, &|| false).unwrap();
    two.add(None, &|| false).unwrap();
    let third = five.add(Duration::ZERO, &|| false);
    let fourth = five.add(Duration::ZERO, &|| false);
    let keys = server.keys();
    assert!(
        third.is_err() && fourth.is_err(),
        "a limit-5 client took slots beyond the limit-2 group's two: {third:?} {fourth:?}, \
         {} slots held: {keys:?}",
        keys.len()
    );
}

/// Must hold (the Redis contract, tests/redis_wait_group.rs
/// `a_lock_and_a_wait_group_of_one_name_refuse_each_other`: "A Lock and a
/// WaitGroup of one name would share the same keys (a held Lock would take
/// one of the group's slots): the second one is refused"). On etcd both
/// put their keys under `lockyard/<name>/` with the same 24-hex shape: the
/// group's `add` succeeds beside the held lock, and the lock's key counts
/// as one of the group's slots (the group gets one slot fewer, and a
/// waiting Lock's key would count as a held slot).
#[test]
fn a_lock_and_a_wait_group_of_one_name_refuse_each_other() {
    let server = EtcdServer::start();
    let lock = lock_at(&server.url(), "both", 30);
    let quota = group_at(&server.url(), "both", 2, 30);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    let added = quota.add(Duration::ZERO, &|| false);
    let second = quota.add(Duration::ZERO, &|| false);
    assert!(
        matches!(added, Err(lockyard::Error::Config(_))),
        "a WaitGroup of the held lock's name was not refused: first add {added:?}, \
         second add {second:?} (the lock took one of its two slots), keys {:?}",
        server.keys()
    );
    drop(guard);
}

// holds: a slot whose adder's group was dropped (no keep-alive any more)
// cannot be adopted once its ttl ran out, and nothing is left behind;
// one adopted before then keeps its fencing token.
#[test]
fn a_slot_cannot_be_adopted_after_the_adders_lease_ran_out() {
    let server = EtcdServer::start();
    let adder = group_at(&server.url(), "expired", 2, 1);
    let early = group_at(&server.url(), "expired", 2, 1);
    let late = group_at(&server.url(), "expired", 2, 1);
    let kept = adder.add(None, &|| false).unwrap();
    let lost = adder.add(None, &|| false).unwrap();
    let fence = adder.fencing_token(&kept).unwrap();
    drop(adder);
    assert!(early.adopt(&kept).unwrap());
    assert_eq!(early.fencing_token(&kept), Some(fence));
    std::thread::sleep(Duration::from_secs(3));
    assert!(!late.adopt(&lost).unwrap(), "adopted a slot that ran out");
    assert_eq!(late.count().unwrap(), 1, "{:?}", server.keys());
    assert!(early.healthy(&kept));
    assert!(early.done(&kept).unwrap());
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

// holds: one-attempt adds racing from several groups never take more
// than the limit, and those refused leave no key.
#[test]
fn one_attempt_adds_racing_take_at_most_the_limit_and_leave_no_key() {
    let server = EtcdServer::start();
    let groups: Vec<WaitGroup> = (0..6)
        .map(|_| group_at(&server.url(), "tries", 2, 30))
        .collect();
    let start = Barrier::new(groups.len());
    let tokens: Vec<(usize, String)> = std::thread::scope(|s| {
        let runs: Vec<_> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    (0..3)
                        .filter_map(|_| g.add(Duration::ZERO, &|| false).ok())
                        .map(|t| (i, t))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
    });
    assert!(
        tokens.len() <= 2,
        "{} slots taken: {tokens:?}",
        tokens.len()
    );
    assert!(!tokens.is_empty());
    assert!(
        eventually(Duration::from_secs(3), || server.keys().len()
            == tokens.len()),
        "{:?} for {tokens:?}",
        server.keys()
    );
    for (i, token) in &tokens {
        assert!(groups[*i].done(token).unwrap());
    }
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

/// Must hold (`WaitGroup::add`'s doc: "a wait that ends without a slot
/// leaves nothing queued"; the contract: nothing is left in etcd once
/// holders and waiters are gone). An add given up (interrupted) while its
/// enter Txn is still on its way lands after the stray sweep that ran at
/// once; only the keep-alive's sweeps (for STRAY_WATCH) would delete it,
/// and dropping the group stops them without revoking its lease (a
/// group's own lease is never revoked). The key then holds a slot for
/// nobody until its ttl runs out: here the group's only slot, for 10 s. A
/// Lock in the same place revokes its lease on drop, and the key goes.
#[test]
fn an_add_given_up_with_its_put_in_flight_leaves_no_slot_after_the_group_is_dropped() {
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.client_port, "request_put");
    let url = format!("etcd://127.0.0.1:{}", proxy.port);
    let observer = group_at(&server.url(), "in-flight", 1, 10);
    let quota = group_at(&url, "in-flight", 1, 10);
    proxy.delay_ms.store(800, Ordering::SeqCst);
    let started = Instant::now();
    let err = quota
        .add(None, &|| started.elapsed() > Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(err, lockyard::Error::Interrupted(_)), "{err}");
    drop(quota);
    std::thread::sleep(Duration::from_millis(1000));
    proxy.delay_ms.store(0, Ordering::SeqCst);
    let freed = eventually(Duration::from_secs(4), || observer.count().unwrap() == 0);
    let keys = server.keys();
    let taken = observer.add(Duration::ZERO, &|| false);
    assert!(
        freed && taken.is_ok(),
        "5 s after the add was given up its key still holds the only slot: {keys:?}, \
         one-attempt add: {taken:?}"
    );
}

// holds: a child forked inside a block neither frees nor keeps alive its
// parent's slots: its `leave` of the parent's block is Ok(true) and frees
// nothing, its drop of the group frees nothing; it can adopt and free a
// slot the parent added (handing a token to a forked worker), and the
// parent's group works on, its block's slot kept alive past the ttl.
#[test]
fn a_forked_child_leaves_its_parents_block_alone_and_can_adopt_its_slots() {
    let server = EtcdServer::start();
    let quota = group_at(&server.url(), "forked", 3, 2);
    let block = quota.enter(None, &|| false).unwrap();
    let added = quota.add(None, &|| false).unwrap();
    let fds = pipe();
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let seen = format!(
            "{:?} {:?} {:?} {:?}\n",
            quota.leave(&block).map_err(|e| e.to_string()),
            quota.adopt(&added).map_err(|e| e.to_string()),
            quota.done(&added).map_err(|e| e.to_string()),
            {
                drop(quota);
                "dropped"
            },
        );
        answer_parent(fds, &seen);
    }
    let seen = child_answer(pid, fds, Duration::from_secs(15)).expect("the child hung");
    assert_eq!(
        seen.trim(),
        "Ok(true) Ok(true) Ok(true) \"dropped\"",
        "child"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(server.keys().len(), 1, "{:?}", server.keys());
    assert!(quota.healthy(&block));
    assert!(!quota.done(&added).unwrap(), "freed by the child already");
    assert!(quota.leave(&block).unwrap());
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

/// Must hold (`lockyard release --force`: "release removes every holder of
/// {name}", and Redis's `force_release`: "Removes every holder of `name`"):
/// on an etcd WaitGroup's name with three slots held, `force_release`
/// removes one (admin.rs reads the holders of a limit-1 line) and reports
/// 1; the two others stay held.
#[test]
fn force_release_of_a_wait_group_removes_every_slot() {
    let server = EtcdServer::start();
    let quota = group_at(&server.url(), "glass", 3, 30);
    for _ in 0..3 {
        quota.add(None, &|| false).unwrap();
    }
    let removed = lockyard::etcd::force_release(&server.url(), "glass").unwrap();
    let left = quota.count().unwrap();
    assert_eq!(
        (removed, left),
        (3, 0),
        "removed {removed} of 3 slots, {left} still held"
    );
}
