//! etcd elections and exclusive workers against a real etcd member:
//! campaigns queue in the lock's line, a resign hands over at once,
//! observers see every term in order (also across a compaction), and a lost
//! session's lock_delay keeps the name leaderless.

mod etcd_support;

use std::time::{Duration, Instant};

use etcd_support::{began, ended, eventually, session_at, EtcdServer};
use lockyard::etcd::{exclusive, Election, Lock, Session};
use lockyard::Error;

fn session(server: &EtcdServer, ttl: u64, lock_delay: u64) -> Session {
    session_at(&server.url(), ttl, lock_delay, 5)
}

const WAIT: Option<Duration> = Some(Duration::from_secs(5));

#[test]
fn a_resign_hands_leadership_to_the_next_campaigner_in_arrival_order() {
    let server = EtcdServer::start();
    let (sa, sb, sc) = (
        session(&server, 5, 0),
        session(&server, 5, 0),
        session(&server, 5, 0),
    );
    let a = Election::new(&server.url(), "scheduler", &sa).unwrap();
    let b = Election::new(&server.url(), "scheduler", &sb).unwrap();
    let c = Election::new(&server.url(), "scheduler", &sc).unwrap();
    assert_eq!(a.leader().unwrap(), None);
    assert!(a.campaign("node-a", Some(Duration::ZERO)).unwrap());
    assert!(a.is_leader() && a.check_health().is_ok());
    let first = a.fencing_token().unwrap();
    assert_eq!(b.leader().unwrap().as_deref(), Some("node-a"));
    assert!(matches!(
        a.campaign("node-a", WAIT),
        Err(Error::AlreadyLocked(_))
    ));
    // One attempt while someone leads leaves nothing in line.
    assert!(!c.campaign("node-c", Some(Duration::ZERO)).unwrap());
    assert_eq!(server.keys().len(), 1, "{:?}", server.keys());

    std::thread::scope(|s| {
        let waiting_b = s.spawn(|| b.campaign("node-b", WAIT).unwrap());
        assert!(eventually(Duration::from_secs(5), || server.keys().len() == 2));
        let waiting_c = s.spawn(|| c.campaign("node-c", WAIT).unwrap());
        assert!(eventually(Duration::from_secs(5), || server.keys().len() == 3));
        let handed = Instant::now();
        assert!(a.resign().unwrap());
        assert!(waiting_b.join().unwrap());
        assert!(
            handed.elapsed() < Duration::from_secs(1),
            "no handover delay"
        );
        assert!(!a.is_leader());
        assert!(matches!(a.resign(), Err(Error::NotLocked(_))));
        assert_eq!(a.leader().unwrap().as_deref(), Some("node-b"));
        assert!(b.fencing_token().unwrap() > first);
        assert!(!c.is_leader(), "c came after b");
        assert!(b.resign().unwrap());
        assert!(waiting_c.join().unwrap());
    });
    assert!(c.fencing_token() > b.fencing_token());
    drop(c);
    assert_eq!(a.leader().unwrap(), None, "a dropped leader resigns");
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn an_observer_sees_every_term_in_order_and_ends_on_its_timeout() {
    let server = EtcdServer::start();
    // a's session bars the name: its grants put a key and a bar in one Txn.
    let (sa, sb) = (session(&server, 5, 10), session(&server, 5, 0));
    let a = Election::new(&server.url(), "jobs", &sa).unwrap();
    let b = Election::new(&server.url(), "jobs", &sb).unwrap();
    let mut observer = a.observe();
    let next = |observer: &mut lockyard::etcd::Observer| {
        observer
            .next_change(Some(Duration::from_secs(5)), &|| false)
            .unwrap()
            .expect("a change within 5 s")
    };
    assert_eq!(next(&mut observer), ended(0), "nobody leads yet");
    assert!(a.campaign("node-a", WAIT).unwrap());
    let ta = a.fencing_token().unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| b.campaign("node-b", WAIT).unwrap());
        // a's key and bar, then b's key.
        assert!(eventually(Duration::from_secs(5), || server.keys().len() == 3));
        a.resign().unwrap();
        assert!(waiting.join().unwrap());
    });
    let tb = b.fencing_token().unwrap();
    // The session's loss ends b's term too, however it came.
    sb.destroy().unwrap();
    assert_eq!(next(&mut observer), began("node-a", ta));
    assert_eq!(next(&mut observer), ended(ta));
    assert_eq!(next(&mut observer), began("node-b", tb));
    assert_eq!(next(&mut observer), ended(tb));
    let started = Instant::now();
    let quiet = observer
        .next_change(Some(Duration::from_millis(300)), &|| false)
        .unwrap();
    assert_eq!(quiet, None);
    assert!(started.elapsed() < Duration::from_secs(2));
    // A second observer starts from the current state.
    assert_eq!(next(&mut a.observe()), ended(0));
    let err = observer
        .next_change(None, &|| true)
        .expect_err("an interrupt ends the wait");
    assert!(matches!(err, Error::Interrupted(_)), "{err}");
}

#[test]
fn an_observer_behind_a_compaction_reads_the_line_again() {
    let server = EtcdServer::start();
    let (sa, sb) = (session(&server, 5, 0), session(&server, 5, 0));
    let a = Election::new(&server.url(), "compacted", &sa).unwrap();
    let b = Election::new(&server.url(), "compacted", &sb).unwrap();
    let mut observer = b.observe();
    assert_eq!(observer.next().unwrap().unwrap(), ended(0));
    assert!(a.campaign("node-a", WAIT).unwrap());
    a.resign().unwrap();
    assert!(b.campaign("node-b", WAIT).unwrap());
    // Past every revision the observer has yet to read.
    let (ok, out) = server.ctl(&["get", "x", "-w", "json"]);
    assert!(ok);
    let revision = out
        .split("\"revision\":")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap()
        .to_owned();
    assert!(server.ctl(&["compact", &revision]).0);
    let term = observer
        .next_change(Some(Duration::from_secs(5)), &|| false)
        .unwrap();
    assert_eq!(term, Some(began("node-b", b.fencing_token().unwrap())));
}

#[test]
fn a_lost_sessions_lock_delay_leaves_the_election_without_a_leader() {
    let server = EtcdServer::start();
    let lost = session(&server, 3, 2);
    let a = Election::new(&server.url(), "barred", &lost).unwrap();
    assert!(a.campaign("node-a", WAIT).unwrap());
    let other = session(&server, 5, 0);
    let b = Election::new(&server.url(), "barred", &other).unwrap();
    let mut observer = b.observe();
    assert_eq!(
        observer.next().unwrap().unwrap().value.as_deref(),
        Some("node-a")
    );
    // The session's own lease (ttl 3) goes, as if its process were cut
    // off: its bar (ttl 3 + 2) stays for the lock_delay.
    let lease = server.lease_granted_with(3);
    assert!(server.ctl(&["lease", "revoke", &lease]).0);
    assert!(eventually(Duration::from_secs(5), || !a.is_leader()));
    assert_eq!(b.leader().unwrap(), None, "barred: nobody leads");
    let started = Instant::now();
    assert!(b.campaign("node-b", Some(Duration::from_secs(10))).unwrap());
    assert!(
        started.elapsed() > Duration::from_secs(1),
        "waited out the bar"
    );
    let token = b.fencing_token().unwrap();
    assert_eq!(observer.next().unwrap().unwrap().value, None);
    assert_eq!(observer.next().unwrap().unwrap(), began("node-b", token));
    assert!(matches!(
        a.campaign("node-a", WAIT),
        Err(Error::LockUnhealthy { .. })
    ));
}

#[test]
fn bad_campaigns_are_refused_before_anything_is_written() {
    let server = EtcdServer::start();
    let s = session(&server, 5, 0);
    assert!(matches!(
        Election::new(&server.url(), "", &s),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Election::new("etcd://127.0.0.1:1", "x", &s),
        Err(Error::Config(_))
    ));
    let e = Election::new(&server.url(), "x", &s).unwrap();
    assert!(matches!(e.campaign("", WAIT), Err(Error::Config(_))));
    assert!(matches!(e.check_health(), Err(Error::NotLocked(_))));
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    // An election is the lock of its name: a lock there excludes it.
    let lock = Lock::builder(server.url(), "x").build().unwrap();
    let guard = lock.acquire(WAIT).unwrap();
    assert!(!e.campaign("node-a", Some(Duration::ZERO)).unwrap());
    drop(guard);
    assert!(e.campaign("node-a", Some(Duration::ZERO)).unwrap());
    s.destroy().unwrap();
    assert!(matches!(
        Election::new(&server.url(), "x", &s),
        Err(Error::Config(_))
    ));
}

#[test]
fn exclusive_workers_each_run_only_the_tasks_they_won() {
    let server = EtcdServer::start();
    let (first, second) = (session(&server, 5, 0), session(&server, 5, 0));
    let url = server.url();
    let tasks = ["task-1", "task-2", "task-3"];
    let claims: Vec<_> = exclusive(&url, tasks, &first)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(claims.len(), 3);
    assert!(claims
        .windows(2)
        .all(|w| w[0].fencing_token() < w[1].fencing_token()));
    assert_eq!(exclusive(&url, tasks, &second).count(), 0, "all taken");
    drop(claims);
    let won: Vec<String> = exclusive(&url, tasks, &second)
        .map(|claim| claim.unwrap().name().to_owned())
        .collect();
    assert_eq!(won, tasks);
    // Each claim was released as the loop moved on.
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}
