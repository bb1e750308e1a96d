//! Lock and WaitGroup on a real 3-master Redis Cluster. The URL names one
//! node; lockyard follows MOVED to the node that serves the name's slot.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockyard::redis::{Election, Lock, Session, WaitGroup};
use support::RedisCluster;

/// Names whose slots live on three different nodes, with a URL that names
/// a node serving none of them for at least two.
fn names_on_every_node(cluster: &RedisCluster) -> Vec<String> {
    let mut found: Vec<(u16, String)> = Vec::new();
    for i in 0.. {
        let name = format!("job-{i}");
        let port = cluster.node_of(&format!("lockyard:{{{name}}}:holders"));
        if !found.iter().any(|(p, _)| *p == port) {
            found.push((port, name));
        }
        if found.len() == 3 {
            break;
        }
    }
    found.into_iter().map(|(_, name)| name).collect()
}

#[test]
fn locks_on_every_node_work_through_one_url() {
    let cluster = RedisCluster::start();
    for name in names_on_every_node(&cluster) {
        let holder = Lock::builder(cluster.url(0), &name)
            .ttl(Duration::from_millis(600))
            .build()
            .unwrap();
        let other = Lock::builder(cluster.url(1), &name).build().unwrap();
        let guard = holder.acquire(Some(Duration::from_secs(2))).unwrap();
        assert!(
            other.try_acquire().unwrap().is_none(),
            "{name}: two holders"
        );
        // Outlive the TTL: refreshes must reach the right node too.
        std::thread::sleep(Duration::from_millis(1200));
        guard.check_health().unwrap();
        let first = guard.fencing_token();
        drop(guard);
        let next = other.acquire(Some(Duration::from_secs(2))).unwrap();
        assert!(next.fencing_token() > first);
    }
}

#[test]
fn a_wait_group_keeps_its_limit_on_a_cluster() {
    let cluster = RedisCluster::start();
    let name = names_on_every_node(&cluster).pop().unwrap();
    let group = Arc::new(
        WaitGroup::builder(cluster.url(0), &name, 2)
            .build()
            .unwrap(),
    );
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..5)
        .map(|_| {
            let (group, inside, most) = (group.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let _slot = group.acquire(None).unwrap();
                    most.fetch_max(inside.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(3));
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    workers.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(most.load(Ordering::SeqCst), 2);
    assert!(group.wait(Some(Duration::from_secs(1))).unwrap());
}

#[test]
fn a_session_keeps_and_frees_locks_on_every_node() {
    let cluster = RedisCluster::start();
    let ttl = Duration::from_millis(400);
    let session = Session::builder(cluster.url(0)).ttl(ttl).build().unwrap();
    let rival = Session::builder(cluster.url(1)).build().unwrap();
    let names = names_on_every_node(&cluster);
    let locks: Vec<Lock> = names
        .iter()
        .map(|name| {
            let lock = Lock::builder(cluster.url(0), name)
                .session(&session)
                .value("mine")
                .build()
                .unwrap();
            assert!(lock
                .acquire_interruptibly(Some(Duration::ZERO), &|| false)
                .unwrap());
            lock
        })
        .collect();
    // Renewals must reach every node the session's grants live on.
    std::thread::sleep(ttl * 3);
    session.check_health().unwrap();
    let election = Election::new(&cluster.url(2), &names[0], &rival).unwrap();
    assert_eq!(election.leader().unwrap().as_deref(), Some("mine"));
    let mut observer = election.observe();
    assert_eq!(
        observer
            .next_change(None, &|| false)
            .unwrap()
            .unwrap()
            .value
            .as_deref(),
        Some("mine")
    );
    for name in &names {
        let other = Lock::builder(cluster.url(1), name)
            .session(&rival)
            .build()
            .unwrap();
        assert!(
            other.try_acquire().unwrap().is_none(),
            "{name}: two holders"
        );
    }
    session.destroy().unwrap();
    for (lock, name) in locks.iter().zip(&names) {
        assert!(lock.check_health().is_err());
        let other = Lock::builder(cluster.url(1), name)
            .session(&rival)
            .build()
            .unwrap();
        assert!(
            other.try_acquire().unwrap().is_some(),
            "{name}: not freed by destroy"
        );
    }
}
