//! Review 7 (etcd: a name with no key is taken by a small Txn,
//! `uncontended.rs`, 8fbe6af), adversarial: each test states what must
//! hold. Tests marked `// holds:` passed at 839c03f and are kept as
//! correct sequences worth guarding.
//!
//! At 8fbe6af an entry of a line that is not barring and not `crowded`
//! first sends a Txn comparing "no key under the name, no bar" whose only
//! success op is the put; granted, it holds at once with the Txn's header
//! revision as its fencing token. Refused, the line turns `crowded` and
//! the full entry follows.
//!
//! No sequence tried here broke a guarantee at 839c03f: every test is a
//! `// holds:`. `a_crowded_small_txn_landing_after_the_release_is_swept`
//! fails if `enter` drops the small Txn's `resent` (`alone_resent`).

mod etcd_support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use etcd_support::{eventually, group_at, lock_at, Act, EtcdServer, LateMember, RuleProxy};
use lockyard::etcd::{inspect, Election, Lock, Session};

fn session_at(url: &str, ttl: u64, lock_delay: u64) -> Session {
    Session::builder(url)
        .ttl(Duration::from_secs(ttl))
        .lock_delay(Duration::from_secs(lock_delay))
        .build()
        .unwrap()
}

/// Text found only in the small Txn of `name` (an escaped name without
/// '/' or '%'): its compare over the whole prefix range. serde_json
/// writes an object's fields in sorted order, and every read of that
/// range carries a "limit" between "key" and "range_end".
fn small_txn(name: &str) -> String {
    let prefix = format!("lockyard/{name}/");
    let end = format!("lockyard/{name}0");
    format!(
        "\"key\":\"{}\",\"range_end\":\"{}\"",
        STANDARD.encode(prefix),
        STANDARD.encode(end)
    )
}

/// The URL of two members, `first` tried first, then the server itself.
fn two_members(first: u16, server: &EtcdServer) -> String {
    format!("etcd://127.0.0.1:{first},127.0.0.1:{}", server.client_port)
}

/// The create revision of the oldest key of `name` (its holder's token).
fn holder_token(server: &EtcdServer, name: &str) -> Option<u64> {
    inspect(&server.url(), name)
        .unwrap()
        .holders
        .first()
        .map(|holder| holder.fencing_token)
}

// holds: the small Txn is what an uncontended acquire sends (the marker
// above meets it), and a reply of it lost once is sent again: the second
// attempt finds the first one's key, the full entry reads it, and the
// holder's token is that key's create revision; another holder is refused
// meanwhile, and the release leaves nothing in etcd.
#[test]
fn a_small_txn_whose_reply_was_lost_holds_with_its_keys_revision() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let marker = small_txn("lost-small");
    proxy.rule(&marker, Act::LoseReply, Some(1));
    let lock = lock_at(&proxy.url(), "lost-small", 20);
    let other = lock_at(&server.url(), "lost-small", 20);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(proxy.left(&marker), Some(0), "the small Txn was not sent");
    assert_eq!(
        Some(guard.fencing_token()),
        holder_token(&server, "lost-small")
    );
    assert!(other.try_acquire().unwrap().is_none());
    assert_eq!(server.keys().len(), 1, "{:?}", server.keys());
    assert!(guard.release().unwrap());
    let mut again = other.try_acquire().unwrap().expect("free after release");
    assert_eq!(
        Some(again.fencing_token()),
        holder_token(&server, "lost-small")
    );
    assert!(again.release().unwrap());
    // `again` is moved: a guard released is gone.
    again = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(again.release().unwrap());
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: a small Txn held up in a failing member lands 1.5 s late, after
// the acquire (granted by the copy sent to the next member, with that
// key's create revision as its token) was released: the late copy puts
// the key again on a name with no key, and the lease's sweeps (the put was
// sent twice) delete it within a keep-alive; another client then takes the
// name, and nothing stays in etcd.
#[test]
fn a_small_txn_landing_after_the_release_is_swept() {
    let server = EtcdServer::start();
    let marker = small_txn("late-small");
    let member = LateMember::start(
        server.client_port,
        Box::leak(marker.into_boxed_str()),
        Duration::from_millis(1500),
    );
    let lock = lock_at(&two_members(member.port, &server), "late-small", 3);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        Some(guard.fencing_token()),
        holder_token(&server, "late-small")
    );
    assert!(guard.release().unwrap());
    assert!(
        eventually(Duration::from_secs(2), || !server.keys().is_empty()),
        "the late copy did not land"
    );
    let other = lock_at(&server.url(), "late-small", 20);
    let taken = other.acquire(Some(Duration::from_secs(3))).map(drop);
    assert!(taken.is_ok(), "{taken:?}; keys {:?}", server.keys());
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: a lock and a wait group of one name, entering at the same time
// on an empty name (both try the small Txn): exactly one is granted, the
// other is refused with Config, and nothing is left once it is released.
#[test]
fn a_lock_and_a_group_racing_on_an_empty_name_get_one_grant() {
    let server = EtcdServer::start();
    let url = server.url();
    for round in 0..15 {
        let name = format!("race-{round}");
        let lock = lock_at(&url, &name, 20);
        let group = group_at(&url, &name, 3, 20);
        let (start, tried) = (Barrier::new(2), Barrier::new(2));
        // Each keeps what it got until both have tried.
        let (locked, grouped) = std::thread::scope(|s| {
            let locking = s.spawn(|| {
                start.wait();
                let guard = lock.acquire(Some(Duration::from_secs(3)));
                tried.wait();
                guard.map(|guard| guard.release())
            });
            let grouping = s.spawn(|| {
                start.wait();
                let token = group.add(Duration::from_secs(3), &|| false);
                tried.wait();
                token
            });
            (locking.join().unwrap(), grouping.join().unwrap())
        });
        match (&locked, &grouped) {
            (Ok(Ok(true)), Err(lockyard::Error::Config(_))) => {}
            (Err(lockyard::Error::Config(_)), Ok(token)) => {
                assert!(group.done(token).unwrap());
            }
            _ => panic!("round {round}: lock {locked:?}, group {grouped:?}"),
        }
        drop(lock);
    }
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: a lost session's bar (lock_delay) bars the name for a lock of
// no session, a lock under a session without lock_delay and a wait group
// (each of which tries the small Txn, refused by the bar), until the
// bar runs out; then each is granted in turn, with its key's revision.
#[test]
fn a_lost_sessions_bar_bars_every_small_txn() {
    let server = EtcdServer::start();
    let url = server.url();
    let barring = session_at(&url, 1, 3);
    let plain_session = session_at(&url, 5, 0);
    let held = Lock::builder(&url, "barred-small")
        .session(&barring)
        .build()
        .unwrap();
    let guard = held.acquire(Some(Duration::from_secs(3))).unwrap();
    // The session is lost: its lease revoked under it (as run out).
    let lease = server.lease_granted_with(1);
    assert!(server.ctl(&["lease", "revoke", &lease]).0);
    assert!(eventually(Duration::from_secs(2), || !guard.healthy()));
    std::mem::forget(guard);
    assert_eq!(server.keys(), ["lockyard/barred-small.bar"]);
    let plain = lock_at(&url, "barred-small", 20);
    let under = Lock::builder(&url, "barred-small")
        .session(&plain_session)
        .build()
        .unwrap();
    let group = group_at(&url, "barred-small", 2, 20);
    let barred_since = Instant::now();
    assert!(plain.try_acquire().unwrap().is_none());
    assert!(under.try_acquire().unwrap().is_none());
    assert!(group.add(Duration::ZERO, &|| false).is_err());
    assert!(plain.acquire(Some(Duration::from_millis(500))).is_err());
    assert!(server.keys().iter().all(|k| k.ends_with(".bar")));
    let guard = plain.acquire(Some(Duration::from_secs(8))).unwrap();
    assert!(
        barred_since.elapsed() > Duration::from_millis(800),
        "granted {:?} after the bars were checked",
        barred_since.elapsed()
    );
    assert_eq!(
        Some(guard.fencing_token()),
        holder_token(&server, "barred-small")
    );
    drop(guard);
    let guard = under.try_acquire().unwrap().expect("free");
    drop(guard);
    let token = group.add(Duration::ZERO, &|| false).unwrap();
    assert!(group.done(&token).unwrap());
    drop(held);
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: six holders (three lock objects, two threads each, so lines turn
// crowded and back) never overlap, each token is its key's create
// revision, tokens grow strictly in grant order, and nothing is left.
#[test]
fn contended_holders_never_overlap_and_tokens_grow() {
    let server = EtcdServer::start();
    let url = server.url();
    let locks: Vec<Lock> = (0..3).map(|_| lock_at(&url, "crowd", 20)).collect();
    let inside = AtomicBool::new(false);
    let last = AtomicU64::new(0);
    let grants = AtomicUsize::new(0);
    let problems = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for lock in &locks {
            for thread in 0..2 {
                let (inside, last, grants, problems, server) =
                    (&inside, &last, &grants, &problems, &server);
                s.spawn(move || {
                    for round in 0..6 {
                        let guard = if (round + thread) % 3 == 0 {
                            match lock.try_acquire().unwrap() {
                                Some(guard) => guard,
                                None => continue,
                            }
                        } else {
                            lock.acquire(Some(Duration::from_secs(20))).unwrap()
                        };
                        if inside.swap(true, Ordering::SeqCst) {
                            problems.lock().unwrap().push("two holders".to_owned());
                        }
                        let token = guard.fencing_token();
                        let previous = last.swap(token, Ordering::SeqCst);
                        if token <= previous {
                            problems
                                .lock()
                                .unwrap()
                                .push(format!("token {token} after {previous}"));
                        }
                        if holder_token(server, "crowd") != Some(token) {
                            problems.lock().unwrap().push(format!(
                                "token {token}, key created at {:?}",
                                holder_token(server, "crowd")
                            ));
                        }
                        grants.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(5));
                        inside.store(false, Ordering::SeqCst);
                        assert!(guard.release().unwrap());
                    }
                });
            }
        }
    });
    assert!(grants.load(Ordering::SeqCst) >= 24);
    assert_eq!(*problems.lock().unwrap(), Vec::<String>::new());
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: names with '/', '%' and '.' (and one named like another's bar)
// are lines of their own: each is taken by its small Txn while the others
// are held, a lost session's bar of "a" bars none of them, and every token
// is its own key's revision.
#[test]
fn names_with_slash_percent_and_dot_are_lines_of_their_own() {
    let server = EtcdServer::start();
    let url = server.url();
    let barring = session_at(&url, 1, 3);
    let held = Lock::builder(&url, "a").session(&barring).build().unwrap();
    let guard = held.acquire(Some(Duration::from_secs(3))).unwrap();
    let lease = server.lease_granted_with(1);
    assert!(server.ctl(&["lease", "revoke", &lease]).0);
    assert!(eventually(Duration::from_secs(2), || !guard.healthy()));
    std::mem::forget(guard);
    let names = ["a/b", "a%2Fb", "a.bar", "a.bar/x", "a/", "%", "a.", "a0"];
    let locks: Vec<Lock> = names.iter().map(|name| lock_at(&url, name, 20)).collect();
    let guards: Vec<_> = locks
        .iter()
        .zip(names)
        .map(|(lock, name)| {
            let guard = lock
                .try_acquire()
                .unwrap()
                .unwrap_or_else(|| panic!("{name} is free"));
            assert_eq!(Some(guard.fencing_token()), holder_token(&server, name));
            guard
        })
        .collect();
    assert!(lock_at(&url, "a", 20).try_acquire().unwrap().is_none());
    drop(guards);
    drop(locks);
    drop(held);
    assert!(
        eventually(Duration::from_secs(6), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: a campaign under a session without lock_delay takes an empty
// name by the small Txn: its token is its key's revision and the one an
// observer reports, a second campaign waits, and takes over on resign.
#[test]
fn a_campaign_by_the_small_txn_is_the_term_observers_see() {
    let server = EtcdServer::start();
    let url = server.url();
    let session = session_at(&url, 5, 0);
    let other_session = session_at(&url, 5, 0);
    let first = Election::new(&url, "small-election", &session).unwrap();
    let second = Election::new(&url, "small-election", &other_session).unwrap();
    assert!(first.campaign("one", Some(Duration::ZERO)).unwrap());
    let token = first.fencing_token().unwrap();
    assert_eq!(Some(token), holder_token(&server, "small-election"));
    let mut observer = first.observe();
    let term = observer
        .next_change(Duration::from_secs(3), &|| false)
        .unwrap();
    assert_eq!(
        term.map(|t| (t.value, t.fencing_token)),
        Some((Some("one".into()), token))
    );
    assert!(!second.campaign("two", Some(Duration::ZERO)).unwrap());
    assert!(first.resign().unwrap());
    assert!(second
        .campaign("two", Some(Duration::from_secs(3)))
        .unwrap());
    assert!(second.fencing_token().unwrap() > token);
    assert!(second.resign().unwrap());
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: a slot taken by the small Txn is adopted by another group object
// (its token kept) and done from there; the line is empty afterwards.
#[test]
fn a_slot_taken_by_the_small_txn_is_adopted_and_done() {
    let server = EtcdServer::start();
    let url = server.url();
    let adder = group_at(&url, "small-slot", 2, 20);
    let worker = group_at(&url, "small-slot", 2, 20);
    let token = adder.add(None, &|| false).unwrap();
    let fencing = adder.fencing_token(&token).unwrap();
    assert_eq!(Some(fencing), holder_token(&server, "small-slot"));
    assert!(worker.adopt(&token).unwrap());
    assert_eq!(worker.fencing_token(&token), Some(fencing));
    let second = adder.add(None, &|| false).unwrap();
    assert!(adder.fencing_token(&second).unwrap() > fencing);
    assert!(worker.done(&token).unwrap());
    assert!(adder.done(&second).unwrap());
    assert_eq!(adder.count().unwrap(), 0);
    drop((adder, worker));
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?}",
        server.keys()
    );
}

// holds: a small Txn held up in a failing member, sent again to the next
// one, which finds the name held (`Crowded`, resent): the full entry
// queues the key, holds once the holder leaves, and is released; the
// first copy lands after that on the empty name and puts the key again.
// The put was sent twice (`alone_resent` reaches the grant), so the
// lease's sweeps delete that copy while the lock object lives on.
#[test]
fn a_crowded_small_txn_landing_after_the_release_is_swept() {
    let server = EtcdServer::start();
    let marker = small_txn("late-crowded");
    let member = LateMember::start(
        server.client_port,
        Box::leak(marker.into_boxed_str()),
        Duration::from_millis(2500),
    );
    let holder = lock_at(&server.url(), "late-crowded", 20);
    let lock = lock_at(&two_members(member.port, &server), "late-crowded", 3);
    let held = holder.acquire(Some(Duration::from_secs(3))).unwrap();
    let sent = Instant::now();
    std::thread::scope(|s| {
        let taking = s.spawn(|| {
            let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
            let token = guard.fencing_token();
            assert_eq!(Some(token), holder_token(&server, "late-crowded"));
            assert!(guard.release().unwrap());
            token
        });
        std::thread::sleep(Duration::from_millis(500));
        assert!(held.release().unwrap());
        taking.join().unwrap();
    });
    assert!(sent.elapsed() < Duration::from_millis(2000), "too slow");
    assert!(
        eventually(Duration::from_secs(3), || !server.keys().is_empty()),
        "the late copy did not land"
    );
    assert!(
        eventually(Duration::from_secs(3), || server.keys().is_empty()),
        "{:?} after the late copy landed, with the lock object alive",
        server.keys()
    );
    drop(lock);
}

// holds: waiters are served in the order they came, and a client that
// finds the name empty between a release and the next waiter's turn
// never slips in: its small Txn meets the waiters' keys.
#[test]
fn a_newcomer_never_slips_in_ahead_of_the_waiters() {
    let server = EtcdServer::start();
    let url = server.url();
    let holder = lock_at(&url, "fifo-small", 20);
    let waiters: Vec<Lock> = (0..3).map(|_| lock_at(&url, "fifo-small", 20)).collect();
    let order = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let slipped = AtomicUsize::new(0);
    let held = holder.acquire(Some(Duration::from_secs(3))).unwrap();
    std::thread::scope(|s| {
        let mut waiting = Vec::new();
        for (i, waiter) in waiters.iter().enumerate() {
            let order = &order;
            waiting.push(s.spawn(move || {
                let guard = waiter.acquire(Some(Duration::from_secs(10))).unwrap();
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(50));
                assert!(guard.release().unwrap());
            }));
            // In line one after the other.
            assert!(eventually(Duration::from_secs(3), || {
                inspect(&url, "fifo-small").unwrap().waiters as usize == i + 1
            }));
        }
        let (done, slipped, url) = (&done, &slipped, &url);
        let newcomer = s.spawn(move || {
            while !done.load(Ordering::SeqCst) {
                // A fresh object each time: never `crowded`.
                let fresh = lock_at(url, "fifo-small", 20);
                // Not `try_acquire`, which counts the line first: a short
                // wait enters, by the small Txn.
                if let Ok(guard) = fresh.acquire(Some(Duration::from_millis(20))) {
                    if !done.load(Ordering::SeqCst) {
                        slipped.fetch_add(1, Ordering::SeqCst);
                    }
                    drop(guard);
                };
            }
        });
        assert!(held.release().unwrap());
        for waiting in waiting {
            waiting.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
        newcomer.join().unwrap();
    });
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
    assert_eq!(slipped.load(Ordering::SeqCst), 0);
}

/// Must hold (`uncontended.rs`: a name found busy keeps to the full entry,
/// remembered by the process): a fresh `Lock` object per acquire, common in
/// request handlers, enters a busy name with one put, not a failed small
/// Txn (one more Raft write) and then the full entry. Review 7 noted that
/// the memory was the lock object's, and each fresh object paid for it.
#[test]
fn a_fresh_lock_object_enters_a_busy_name_with_one_put() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let holder = lock_at(&proxy.url(), "busy-fresh", 30);
    let _held = holder.acquire(Some(Duration::from_secs(5))).unwrap();
    let wait = Some(Duration::from_millis(300));
    // The first newcomer learns that the name is busy.
    let first = lock_at(&proxy.url(), "busy-fresh", 30);
    assert!(first.acquire(wait).is_err(), "the name is held");
    drop(first);
    // Counts the requests that put: entries, small or full.
    proxy.rule("request_put", Act::HoldRequest(Duration::ZERO), Some(100));
    let second = lock_at(&proxy.url(), "busy-fresh", 30);
    assert!(second.acquire(wait).is_err(), "the name is held");
    assert_eq!(
        proxy.left("request_put"),
        Some(99),
        "a fresh lock object entering a name this process found busy sent {} requests that put",
        100 - proxy.left("request_put").unwrap_or(0)
    );
}
