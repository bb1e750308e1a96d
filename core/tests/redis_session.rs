//! Sessions, locks under them, exclusive workers and elections against a
//! real redis-server (one process; crashes and pauses are in
//! `redis_session_crash.rs`).

mod support;

use std::time::{Duration, Instant};

use lockyard::redis::{claim, exclusive, holder, Behavior, Election, Lock, Session, Term};
use lockyard::wait::InTime;
use lockyard::Error;
use support::{eventually, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn session(server: &RedisServer, ttl_ms: u64, behavior: Behavior, delay_ms: u64) -> Session {
    Session::builder(server.url())
        .ttl(MS(ttl_ms))
        .behavior(behavior)
        .lock_delay(MS(delay_ms))
        .build()
        .unwrap()
}

fn lock_under(server: &RedisServer, name: &str, session: &Session, value: &str) -> Lock {
    Lock::builder(server.url(), name)
        .session(session)
        .value(value)
        .build()
        .unwrap()
}

#[test]
fn a_live_session_keeps_its_locks_long_past_its_ttl() {
    let server = RedisServer::start();
    let mine = session(&server, 200, Behavior::Release, 0);
    let theirs = session(&server, 200, Behavior::Release, 0);
    let lock = lock_under(&server, "task", &mine, "me");
    let guard = lock.try_acquire().unwrap().expect("free at first");
    std::thread::sleep(MS(1000));
    assert!(mine.healthy() && guard.healthy());
    let other = lock_under(&server, "task", &theirs, "them");
    assert!(
        other.try_acquire().unwrap().is_none(),
        "taken from a live session"
    );
    assert_eq!(
        holder(&server.url(), "task").unwrap().as_deref(),
        Some("me")
    );
}

#[test]
fn destroy_frees_every_lock_at_once_and_leaves_only_expiring_keys() {
    let server = RedisServer::start();
    for (behavior, kept) in [(Behavior::Release, Some("w1")), (Behavior::Delete, None)] {
        let name = format!("task-{behavior:?}");
        let first = session(&server, 5000, behavior, 5000);
        let a = lock_under(&server, &name, &first, "w1");
        let b = lock_under(&server, &format!("{name}-b"), &first, "w1");
        let _held = (
            a.try_acquire().unwrap().unwrap(),
            b.try_acquire().unwrap().unwrap(),
        );
        first.destroy().unwrap();
        assert!(!first.healthy());
        assert!(matches!(a.check_health(), Err(Error::LockUnhealthy { .. })));
        assert_eq!(holder(&server.url(), &name).unwrap().as_deref(), kept);
        let mut raw = server.raw().unwrap();
        for key in server.keys() {
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut raw).unwrap();
            let expected = key.ends_with(":fence") || key.ends_with(":value");
            assert!(expected && ttl > 0, "{key} left behind (pttl {ttl})");
        }
        // No lock_delay after a clean destroy.
        let second = session(&server, 5000, behavior, 5000);
        let again = lock_under(&server, &name, &second, "w2");
        assert!(
            again.try_acquire().unwrap().is_some(),
            "not free after destroy"
        );
        drop(_held);
    }
}

#[test]
fn a_lost_session_bars_its_locks_for_lock_delay() {
    let server = RedisServer::start();
    let lost = session(&server, 300, Behavior::Delete, 800);
    let lock = lock_under(&server, "delayed", &lost, "gone");
    let guard = lock.try_acquire().unwrap().unwrap();
    // Lose it the way a long partition would: its lease runs out now.
    let mut raw = server.raw().unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg("lockyard:{delayed}:holders")
        .arg(0)
        .arg(-1)
        .query(&mut raw)
        .unwrap();
    assert_eq!(members.len(), 1);
    assert!(members[0].starts_with(&lock.identity()));
    let _: () = redis::cmd("ZADD")
        .arg("lockyard:{delayed}:holders")
        .arg("XX")
        .arg(secs * 1000 + micros / 1000)
        .arg(&members[0])
        .query(&mut raw)
        .unwrap();
    let expired_at = Instant::now();
    eventually(MS(2000), "the session notices", || !lost.healthy());
    assert!(matches!(
        guard.check_health(),
        Err(Error::LockUnhealthy { .. })
    ));
    let next = session(&server, 5000, Behavior::Release, 0);
    let waiter = lock_under(&server, "delayed", &next, "next");
    assert!(
        waiter.try_acquire().unwrap().is_none(),
        "barred by the delay"
    );
    let took = waiter.acquire(Some(MS(3000))).unwrap();
    let waited = expired_at.elapsed();
    assert!(waited >= MS(700), "free before lock_delay: {waited:?}");
    assert!(waited < MS(1600), "free too late: {waited:?}");
    assert_eq!(
        holder(&server.url(), "delayed").unwrap().as_deref(),
        Some("next")
    );
    drop(took);
}

#[test]
fn bad_input_is_a_config_error() {
    let server = RedisServer::start();
    let url = server.url();
    let config = |r: Result<(), Error>| matches!(r, Err(Error::Config(_)));
    assert!(config(
        Session::builder(&url).ttl(Duration::ZERO).build().map(drop)
    ));
    assert!(config("sometimes".parse::<Behavior>().map(drop)));
    assert!(config(
        Lock::builder(&url, "x").value("v").build().map(drop)
    ));
    let s = session(&server, 1000, Behavior::Release, 0);
    assert!(config(
        Lock::builder(&url, "x")
            .session(&s)
            .ttl(MS(5))
            .build()
            .map(drop)
    ));
    let lock = lock_under(&server, "x", &s, "v");
    s.destroy().unwrap();
    assert!(config(
        Lock::builder(&url, "x").session(&s).build().map(drop)
    ));
    assert!(config(Election::new(&url, "x", &s).map(drop)));
    assert!(config(lock.try_acquire().map(drop)));
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn exclusive_yields_only_the_names_this_worker_won_and_releases_each() {
    let server = RedisServer::start();
    let url = server.url();
    let other = session(&server, 5000, Behavior::Release, 0);
    let taken = lock_under(&server, "t2", &other, "other");
    let _guard = taken.try_acquire().unwrap().unwrap();
    let mine = session(&server, 5000, Behavior::Release, 0);
    let mut ran = Vec::new();
    for claim in exclusive(&url, ["t1", "t2", "t3"], &mine) {
        let claim = claim.unwrap();
        claim.check_health().unwrap();
        ran.push(claim.name().to_owned());
        // While it runs, nobody else can take it.
        let rival = lock_under(&server, claim.name(), &other, "other");
        assert!(rival.try_acquire().unwrap().is_none());
    }
    assert_eq!(ran, ["t1", "t3"]);
    // Released as the loop moved on.
    let rival = lock_under(&server, "t1", &other, "other");
    assert!(rival.try_acquire().unwrap().is_some());
}

#[test]
fn a_claim_is_one_step_of_exclusive_and_leave_ends_it() {
    let server = RedisServer::start();
    let url = server.url();
    let other = session(&server, 5000, Behavior::Release, 0);
    let mine = session(&server, 5000, Behavior::Release, 0);
    let won = claim(&url, "task", &mine, &|| false)
        .unwrap()
        .expect("a free name is won");
    assert!(
        claim(&url, "task", &other, &|| false).unwrap().is_none(),
        "taken"
    );
    // Another thread is not the winner: it cannot end the claim's block.
    std::thread::scope(|s| {
        let left = s.spawn(|| won.leave()).join().unwrap();
        assert!(matches!(left, Err(Error::NotLocked(_))), "{left:?}");
    });
    assert!(won.leave().unwrap());
    let next = claim(&url, "task", &other, &|| false).unwrap();
    assert!(next.is_some(), "free again once the winner's block ended");
}

#[test]
fn observe_reports_every_term_in_fencing_order() {
    let server = RedisServer::start();
    let url = server.url();
    let (sa, sb) = (
        session(&server, 2000, Behavior::Release, 0),
        session(&server, 2000, Behavior::Release, 0),
    );
    let a = Election::new(&url, "leader", &sa).unwrap();
    let b = Election::new(&url, "leader", &sb).unwrap();
    let watcher = Election::new(&url, "leader", &sb).unwrap();
    let mut observer = watcher.observe();
    let first = observer.next_change(Some(MS(1000)), &|| false).unwrap();
    assert_eq!(first.unwrap().value, None);
    // Two quick changes of leadership, and one waiting handoff.
    assert!(a.campaign("a", Some(Duration::ZERO)).unwrap());
    assert_eq!(b.leader().unwrap().as_deref(), Some("a"));
    a.resign().unwrap();
    assert!(b.campaign("b", Some(Duration::ZERO)).unwrap());
    let handoff = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| a.campaign("a", Some(MS(3000))).unwrap());
        std::thread::sleep(MS(200));
        b.resign().unwrap();
        waiting.join().unwrap()
    });
    assert!(handoff && a.is_leader());
    let mut terms: Vec<Term> = Vec::new();
    while let Some(term) = observer.next_change(Some(MS(700)), &|| false).unwrap() {
        terms.push(term);
    }
    let values: Vec<Option<&str>> = terms.iter().map(|t| t.value.as_deref()).collect();
    assert_eq!(values, [Some("a"), None, Some("b"), None, Some("a")]);
    let fences: Vec<u64> = terms.iter().map(|t| t.fencing_token).collect();
    assert!(fences[0] == fences[1] && fences[1] < fences[2] && fences[3] < fences[4]);
    assert_eq!(a.fencing_token(), Some(fences[4]));
    assert_eq!(watcher.leader().unwrap().as_deref(), Some("a"));
    // A leader whose session is lost ends its term without anyone resigning.
    sa.destroy().unwrap();
    let end = observer.next_change(Some(MS(2000)), &|| false).unwrap();
    assert_eq!(end.map(|t| t.value), Some(None));
    assert_eq!(watcher.leader().unwrap(), None);
}

/// Two lock objects for one name under one session in one thread share an
/// identity (the session id is their prefix); the second must not be told
/// it holds the first one's grant.
#[test]
fn two_locks_under_one_session_never_both_hold() {
    let server = RedisServer::start();
    let shared = session(&server, 5000, Behavior::Release, 0);
    let first = lock_under(&server, "one-name", &shared, "a");
    let second = lock_under(&server, "one-name", &shared, "b");
    let guard = first.try_acquire().unwrap().expect("free at first");
    assert!(second.try_acquire().unwrap().is_none(), "two holders");
    drop(guard);
    assert!(second.try_acquire().unwrap().is_some());
}

/// Two threads campaign on one election, one with a timeout: when the
/// timed one gives up, the other's won term stays won.
#[test]
fn a_campaign_that_gives_up_leaves_a_concurrent_win_alone() {
    let server = RedisServer::start();
    let ours = session(&server, 5000, Behavior::Release, 0);
    let theirs = session(&server, 5000, Behavior::Release, 0);
    let rival = Election::new(&server.url(), "contested", &theirs).unwrap();
    assert!(rival.campaign("rival", Some(MS(0))).unwrap());
    let election = std::sync::Arc::new(Election::new(&server.url(), "contested", &ours).unwrap());
    let patient = {
        let election = election.clone();
        std::thread::spawn(move || election.campaign("a", None))
    };
    // Queued second, so the term is handed to the patient one.
    std::thread::sleep(MS(200));
    let hasty = {
        let election = election.clone();
        std::thread::spawn(move || election.campaign("a", Some(MS(1000))))
    };
    std::thread::sleep(MS(300));
    assert!(rival.resign().unwrap());
    assert!(
        patient.join().unwrap().unwrap(),
        "the patient campaign wins"
    );
    assert!(!hasty.join().unwrap().unwrap(), "one term, won once");
    let third = Election::new(&server.url(), "contested", &theirs).unwrap();
    assert!(
        !third.campaign("third", Some(MS(0))).unwrap(),
        "a third candidate won a term the first still holds"
    );
    assert!(election.is_leader());
    assert_eq!(election.leader().unwrap().as_deref(), Some("a"));
}

/// After its session is lost, campaigning again says the session is lost,
/// not that this election leads already.
#[test]
fn campaigning_after_a_lost_session_reports_it_lost() {
    let server = RedisServer::start();
    let lost = session(&server, 400, Behavior::Release, 0);
    let election = Election::new(&server.url(), "after-loss", &lost).unwrap();
    assert!(election.campaign("me", Some(MS(0))).unwrap());
    let mut raw = server.raw().unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("lockyard:session:{{{}}}", lost.id()))
        .query(&mut raw)
        .unwrap();
    eventually(MS(2000), "the session notices", || !lost.healthy());
    assert!(matches!(
        election.campaign("me", Some(MS(0))),
        Err(Error::LockUnhealthy { .. })
    ));
}

/// A wait under a session that is destroyed meanwhile ends at once with
/// LockUnhealthy; it is never granted the name later.
#[test]
fn a_wait_under_a_destroyed_session_ends_and_takes_nothing() {
    let server = RedisServer::start();
    let theirs = session(&server, 5000, Behavior::Release, 0);
    let holder_lock = lock_under(&server, "busy", &theirs, "holder");
    let held = holder_lock.try_acquire().unwrap().expect("free at first");
    let ours = std::sync::Arc::new(session(&server, 5000, Behavior::Release, 5000));
    let waiter = {
        let ours = ours.clone();
        let url = server.url();
        std::thread::spawn(move || {
            let lock = Lock::builder(url, "busy").session(&ours).build().unwrap();
            let started = Instant::now();
            let outcome = lock.acquire(Some(MS(10_000))).map(|_| ());
            (outcome, started.elapsed())
        })
    };
    std::thread::sleep(MS(300));
    ours.destroy().unwrap();
    let (outcome, waited) = waiter.join().unwrap();
    assert!(
        matches!(outcome, Err(Error::LockUnhealthy { .. })),
        "{outcome:?}"
    );
    assert!(waited < MS(1500), "waited {waited:?}");
    drop(held);
    let next = Lock::builder(server.url(), "busy").build().unwrap();
    assert!(
        next.try_acquire().unwrap().is_some(),
        "granted to a dead waiter"
    );
}

/// A wait under a session whose key is gone (it ran out, or Redis
/// restarted) is not granted a name nobody would renew: it ends with
/// LockUnhealthy, and the name is free for others at once, without the
/// lost session's lock_delay.
#[test]
fn a_wait_under_a_lost_session_is_not_granted() {
    let server = RedisServer::start();
    let holder_lock = Lock::builder(server.url(), "later").build().unwrap();
    let held = holder_lock.try_acquire().unwrap().expect("free at first");
    let ours = std::sync::Arc::new(session(&server, 20_000, Behavior::Release, 10_000));
    let waiter = {
        let ours = ours.clone();
        let url = server.url();
        std::thread::spawn(move || {
            let lock = Lock::builder(url, "later").session(&ours).build().unwrap();
            lock.acquire(Some(MS(10_000))).map(|_| ())
        })
    };
    std::thread::sleep(MS(300));
    let mut raw = server.raw().unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("lockyard:session:{{{}}}", ours.id()))
        .query(&mut raw)
        .unwrap();
    // Handed to the waiter while its session renews only every 10 s.
    drop(held);
    let outcome = waiter.join().unwrap();
    assert!(
        matches!(outcome, Err(Error::LockUnhealthy { .. })),
        "{outcome:?}"
    );
    assert!(!ours.healthy());
    let next = Lock::builder(server.url(), "later").build().unwrap();
    assert!(
        next.try_acquire().unwrap().is_some(),
        "the name stayed closed after a grant to a dead session"
    );
}

/// A waiter under a session that is paused when the lock is handed to it
/// (GC, swap, SIGSTOP) never held it: the name comes free after the 2 s
/// handoff window, not after its session's lock_delay.
#[test]
fn a_missed_handoff_under_a_session_frees_the_name_after_the_handoff_window() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let server = RedisServer::start();
    let holder_lock = Lock::builder(server.url(), "handoff").build().unwrap();
    let held = holder_lock.try_acquire().unwrap().expect("free at first");
    let ours = std::sync::Arc::new(session(&server, 5000, Behavior::Release, 10_000));
    let paused = std::sync::Arc::new(AtomicBool::new(false));
    let waiter = {
        let (ours, paused, url) = (ours.clone(), paused.clone(), server.url());
        std::thread::spawn(move || {
            let lock = Lock::builder(url, "handoff")
                .session(&ours)
                .build()
                .unwrap();
            let pause = || {
                if paused.swap(false, Ordering::SeqCst) {
                    std::thread::sleep(MS(4000));
                }
                false
            };
            let _ = lock.acquire_interruptibly(Some(MS(8000)), &pause).in_time();
        })
    };
    std::thread::sleep(MS(300));
    paused.store(true, Ordering::SeqCst);
    std::thread::sleep(MS(100));
    drop(held);
    let started = Instant::now();
    let next = Lock::builder(server.url(), "handoff").build().unwrap();
    let taken = next.acquire(Some(MS(6000)));
    let waited = started.elapsed();
    assert!(taken.is_ok(), "{:?}", taken.err());
    assert!(waited < MS(3000), "closed for {waited:?}");
    drop(taken);
    waiter.join().unwrap();
}

/// A background connection that goes silent (a new one would work at once)
/// costs a renewal or a refresh a fraction of the lease, not the session:
/// background calls time out after about ttl/10 and retry on a fresh
/// connection.
#[test]
fn a_silent_connection_costs_neither_the_session_nor_a_lock() {
    let server = RedisServer::start();
    let proxy = support::StallProxy::start(server.port);
    let ours = Session::builder(proxy.url()).ttl(MS(4000)).build().unwrap();
    let plain = Lock::builder(proxy.url(), "silent")
        .ttl(MS(3000))
        .build()
        .unwrap();
    let held = plain.try_acquire().unwrap().expect("free at first");
    // After the first renewal (at ttl/2) and a few refreshes: their
    // connection is open, and goes silent.
    std::thread::sleep(MS(2500));
    proxy.stall_existing();
    let started = Instant::now();
    while started.elapsed() < MS(7000) {
        assert!(
            ours.healthy(),
            "session lost {:?} after the stall",
            started.elapsed()
        );
        assert!(
            held.healthy(),
            "lock lost {:?} after the stall",
            started.elapsed()
        );
        std::thread::sleep(MS(100));
    }
}

/// Moves the lease of the only holder of `name` so that it ran out at
/// server time `expired_at_ms`, as a partition would have.
fn expire_holder_at(server: &RedisServer, name: &str, expired_at_ms: u64) {
    let mut raw = server.raw().unwrap();
    let key = format!("lockyard:{{{name}}}:holders");
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .query(&mut raw)
        .unwrap();
    assert_eq!(members.len(), 1);
    let _: () = redis::cmd("ZADD")
        .arg(&key)
        .arg("XX")
        .arg(expired_at_ms)
        .arg(&members[0])
        .query(&mut raw)
        .unwrap();
}

fn server_ms(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.raw().unwrap())
        .unwrap();
    secs * 1000 + micros / 1000
}

/// Issue 16, item 5: the script that finds a lost session's grant run out
/// starts its lock_delay with `SET … PX <what is left>`. In the last
/// millisecond of the delay that was 0 or -1 ms, which Redis refuses
/// after the script's earlier writes: the next acquire failed with a
/// BackendError. A delay that has ended must leave the name free.
#[test]
fn an_acquire_in_the_last_millisecond_of_a_lock_delay_is_granted() {
    let server = RedisServer::start();
    let lost = session(&server, 60_000, Behavior::Release, 1000);
    for attempt in 0..20 {
        let name = format!("edge-{attempt}");
        let held = lock_under(&server, &name, &lost, "lost");
        let guard = held.try_acquire().unwrap().unwrap();
        // Ran out exactly one lock_delay before the server's now: by the
        // time the next script runs, 0 or -1 ms of the delay are left.
        expire_holder_at(&server, &name, server_ms(&server) - 1000);
        let next = Lock::builder(server.url(), &name).build().unwrap();
        match next.try_acquire() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("attempt {attempt}: an ended lock_delay kept the name closed"),
            Err(e) => panic!("attempt {attempt}: {e}"),
        }
        drop(guard);
    }
    // A delay with time left still bars the name.
    let held = lock_under(&server, "edge-open", &lost, "lost");
    let _guard = held.try_acquire().unwrap().unwrap();
    expire_holder_at(&server, "edge-open", server_ms(&server) - 700);
    let next = Lock::builder(server.url(), "edge-open").build().unwrap();
    assert!(next.try_acquire().unwrap().is_none(), "barred by the delay");
}
