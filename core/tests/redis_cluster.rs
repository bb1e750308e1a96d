//! Lock and WaitGroup on a real 3-master Redis Cluster. The URL names one
//! node; lockyard follows MOVED to the node that serves the name's slot.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockyard::redis::{Election, Lock, Session, WaitGroup};
use lockyard::wait::InTime;
use lockyard::Error;
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
    let ttl = Duration::from_millis(1200);
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
                .in_time()
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

/// A name whose slot the master at `port` serves, or does not serve.
fn name_served(cluster: &RedisCluster, prefix: &str, port: u16, served: bool) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| (cluster.node_of(&held_key(name)) == port) == served)
        .unwrap()
}

/// The key that records who holds `name`, whatever the form.
fn held_key(name: &str) -> String {
    format!("lockyard:{{{name}}}:holders")
}

/// Another master than the one serving `key`.
fn other_master(cluster: &RedisCluster, key: &str) -> u16 {
    let serving = cluster.node_of(key);
    *cluster.masters().iter().find(|&&p| p != serving).unwrap()
}

/// Keys left on every node, but for fencing counters (they expire later).
fn lasting_keys(cluster: &RedisCluster) -> Vec<String> {
    let mut keys = Vec::new();
    for port in cluster.masters() {
        let found: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut cluster.connection(port))
            .unwrap();
        keys.extend(found.into_iter().filter(|k| !k.ends_with(":fence")));
    }
    keys
}

#[test]
fn held_locks_slots_and_sessions_survive_a_slot_migration() {
    let cluster = RedisCluster::start();
    let seed = cluster.ports()[0];
    let url = cluster.url_of(seed);
    let ttl = Duration::from_millis(900);
    let lock_name = name_served(&cluster, "moved-lock", seed, false);
    let group_name = name_served(&cluster, "moved-group", seed, true);
    let member_name = name_served(&cluster, "moved-member", seed, false);
    let lock = Lock::builder(&url, &lock_name).ttl(ttl).build().unwrap();
    let group = WaitGroup::builder(&url, &group_name, 2)
        .ttl(ttl)
        .build()
        .unwrap();
    let session = Session::builder(&url).ttl(ttl).build().unwrap();
    let session_key = format!("lockyard:session:{{{}}}", session.id());
    let member = Lock::builder(&url, &member_name)
        .session(&session)
        .build()
        .unwrap();
    lock.acquire_interruptibly(Some(Duration::ZERO), &|| false)
        .in_time()
        .unwrap();
    let slots = [group.acquire(None).unwrap(), group.acquire(None).unwrap()];
    assert!(member
        .acquire_interruptibly(Some(Duration::ZERO), &|| false)
        .in_time()
        .unwrap());

    for key in [
        held_key(&lock_name),
        held_key(&group_name),
        held_key(&member_name),
        session_key,
    ] {
        let to = other_master(&cluster, &key);
        cluster.move_slot_of(&key, to);
        assert_eq!(cluster.node_of(&key), to);
    }
    // Well past the ttl: every refresh and renewal since the move had to
    // find the new node.
    std::thread::sleep(ttl * 2);
    lock.check_health().unwrap();
    assert!(lock.owned().unwrap());
    slots.iter().for_each(|slot| slot.check_health().unwrap());
    session.check_health().unwrap();
    member.check_health().unwrap();

    let rival_url = cluster.url(1);
    let rival = Lock::builder(&rival_url, &lock_name).build().unwrap();
    assert!(rival.try_acquire().unwrap().is_none(), "two holders");
    let rival_group = WaitGroup::builder(&rival_url, &group_name, 2)
        .build()
        .unwrap();
    assert!(rival_group.acquire(Some(Duration::ZERO)).is_err());
    let rival_member = Lock::builder(&rival_url, &member_name).build().unwrap();
    assert!(rival_member.try_acquire().unwrap().is_none(), "two holders");

    assert!(lock.release().unwrap());
    for slot in &slots {
        assert!(group.done(slot.token()).unwrap());
    }
    drop(slots);
    session.destroy().unwrap();
    assert_eq!(lasting_keys(&cluster), Vec::<String>::new());
}

#[test]
fn a_half_finished_migration_is_followed_by_ask() {
    let cluster = RedisCluster::start();
    let seed = cluster.ports()[0];
    let url = cluster.url_of(seed);
    // Sessions: one key, which the target serves once ASKING comes first.
    let session = Session::builder(&url)
        .ttl(Duration::from_millis(600))
        .build()
        .unwrap();
    let session_key = format!("lockyard:session:{{{}}}", session.id());
    let (slot, from) = (cluster.slot_of(&session_key), cluster.node_of(&session_key));
    let to = other_master(&cluster, &session_key);
    cluster.begin_migration(slot, from, to);
    cluster.migrate_keys(from, to, &[&session_key]);
    // Renewed every 300 ms: only a renewal that follows ASK keeps it.
    std::thread::sleep(Duration::from_millis(1500));
    session.check_health().unwrap();
    cluster.finish_migration(slot, to);

    // A lock's scripts name all its keys, some of which never exist, so a
    // half-moved slot answers them TRYAGAIN: a refresh waits it out (or
    // fails and is tried again), whichever side of the move the keys are.
    let name = name_served(&cluster, "half-moved", seed, false);
    let lock = Lock::builder(&url, &name)
        .ttl(Duration::from_secs(6))
        .build()
        .unwrap();
    let guard = lock.acquire(Some(Duration::from_secs(2))).unwrap();
    let key = held_key(&name);
    let (slot, from) = (cluster.slot_of(&key), cluster.node_of(&key));
    let to = other_master(&cluster, &key);
    cluster.begin_migration(slot, from, to);
    cluster.migrate_keys(from, to, &[&key]);
    std::thread::sleep(Duration::from_millis(400));
    cluster.migrate_slot_keys(slot, from, to);
    std::thread::sleep(Duration::from_millis(400));
    cluster.finish_migration(slot, to);
    std::thread::sleep(Duration::from_millis(1500));
    guard.check_health().unwrap();
    assert!(lock.owned().unwrap());
    let rival = Lock::builder(cluster.url(1), &name).build().unwrap();
    assert!(rival.try_acquire().unwrap().is_none(), "two holders");
    assert!(guard.release().unwrap());
    session.destroy().unwrap();
    assert_eq!(lasting_keys(&cluster), Vec::<String>::new());
}

/// Scripts name the keys they touch in Lua, from the name's key prefix.
/// With the prefix as their only declared key (never a key itself), a
/// slot half-moved to another master sent them by ASK to the target,
/// which ran them without the name's keys still on the source: a held
/// lock's refresh found its grant gone there (the holder was told it lost
/// the lock), and a rival's acquire failed for good instead of waiting the
/// move out. Each script must be refused (TRYAGAIN) until the move ends,
/// whichever side its keys are on: a rival is never granted and waits, the
/// holder (refreshed about every 170 ms, 20 failures allowed) stays healthy,
/// for a Lock and a WaitGroup.
#[test]
fn a_half_moved_slot_is_waited_out_by_holders_and_rivals() {
    let cluster = RedisCluster::start();
    let seed = cluster.ports()[0];
    let url = cluster.url_of(seed);
    let ttl = Duration::from_secs(10);
    let lock_name = name_served(&cluster, "half-lock", seed, false);
    let group_name = name_served(&cluster, "half-group", seed, false);
    let lock = Lock::builder(&url, &lock_name)
        .ttl(ttl)
        .max_refresh_fails(20)
        .build()
        .unwrap();
    let guard = lock.acquire(Some(Duration::from_secs(2))).unwrap();
    let group = WaitGroup::builder(&url, &group_name, 1)
        .ttl(ttl)
        .max_refresh_fails(20)
        .build()
        .unwrap();
    let slot_held = group.acquire(Some(Duration::from_secs(2))).unwrap();

    for name in [&lock_name, &group_name] {
        let key = held_key(name);
        let (slot, from) = (cluster.slot_of(&key), cluster.node_of(&key));
        let to = other_master(&cluster, &key);
        let rival = Lock::builder(cluster.url_of(to), name).build().unwrap();
        let rival_group = WaitGroup::builder(cluster.url_of(to), name, 1)
            .build()
            .unwrap();
        cluster.begin_migration(slot, from, to);
        // The holders key still on the source, then on the target.
        for moved in [false, true] {
            if moved {
                cluster.migrate_keys(from, to, &[&key]);
            }
            let rival_try = if name == &lock_name {
                rival.acquire(Some(Duration::from_millis(700))).map(drop)
            } else {
                rival_group
                    .acquire(Some(Duration::from_millis(700)))
                    .map(drop)
            };
            // Waited out to the end of its time limit: a timeout, or the
            // move's last transient refusal.
            assert!(
                matches!(
                    rival_try,
                    Err(Error::Timeout { .. }
                        | Error::Backend {
                            transient: true,
                            ..
                        })
                ),
                "{name} (holders key moved: {moved}): {rival_try:?}"
            );
        }
        cluster.migrate_slot_keys(slot, from, to);
        cluster.finish_migration(slot, to);
        guard.check_health().unwrap();
        slot_held.check_health().unwrap();
    }
    assert!(lock.owned().unwrap());
    let rival = Lock::builder(cluster.url(1), &lock_name).build().unwrap();
    assert!(
        rival.try_acquire().unwrap().is_none(),
        "two holders after the move"
    );
    let rival_group = WaitGroup::builder(cluster.url(1), &group_name, 1)
        .build()
        .unwrap();
    assert!(rival_group.acquire(Some(Duration::ZERO)).is_err());
    assert!(guard.release().unwrap());
    assert!(group.done(slot_held.token()).unwrap());
}

#[test]
fn a_held_lock_survives_its_master_failing_over() {
    let mut cluster = RedisCluster::start_with_replicas(1);
    let masters = cluster.masters();
    let seed = masters[0];
    let name = name_served(&cluster, "failover", seed, false);
    let key = held_key(&name);
    let doomed = cluster.node_of(&key);
    let url = cluster.url_of(seed);
    let lock = failover_tolerant_lock(&url, &name);
    let guard = lock.acquire(Some(Duration::from_secs(2))).unwrap();
    // Made before the failover, and routed to the doomed master by then.
    let late = Lock::builder(&url, &name).build().unwrap();
    assert!(late.try_acquire().unwrap().is_none());

    cluster.kill_master(doomed, &key);
    // A refresh is due every second: several must reach the new master.
    std::thread::sleep(Duration::from_millis(2500));
    guard.check_health().unwrap();
    assert!(lock.owned().unwrap());
    // Its route leads to the dead node: the seed shows it the new one.
    assert!(late.try_acquire().unwrap().is_none(), "two holders");
    let alive = *masters.iter().find(|&&p| p != doomed && p != seed).unwrap();
    let rival = Lock::builder(cluster.url_of(alive), &name).build().unwrap();
    assert!(rival.try_acquire().unwrap().is_none(), "two holders");
    assert!(guard.release().unwrap());
    assert!(rival.try_acquire().unwrap().is_some());
}

/// Review: as above, but the master that fails is the URL's own node (the
/// seed). The route's only fallback is the seed, which is gone: refreshes
/// cannot find the promoted replica, and the held lock is lost although
/// the Cluster serves its keys again.
#[test]
fn a_held_lock_survives_the_seed_master_failing_over() {
    let mut cluster = RedisCluster::start_with_replicas(1);
    let seed = cluster.masters()[0];
    let name = name_served(&cluster, "seedfail", seed, true);
    let key = held_key(&name);
    let url = cluster.url_of(seed);
    let lock = failover_tolerant_lock(&url, &name);
    let guard = lock.acquire(Some(Duration::from_secs(2))).unwrap();
    cluster.kill_master(seed, &key);
    std::thread::sleep(Duration::from_millis(2500));
    guard.check_health().unwrap();
}

/// A lock whose refreshes may fail for about 8 s (one a second) before it
/// turns unhealthy: longer than a replica takes to be promoted on a busy
/// machine, shorter than its lease.
fn failover_tolerant_lock(url: &str, name: &str) -> Lock {
    Lock::builder(url, name)
        .ttl(Duration::from_secs(30))
        .refresh_interval(Duration::from_secs(1))
        .max_refresh_fails(8)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn async_waits_follow_redirects_to_every_node() {
    let cluster = RedisCluster::start();
    for name in names_on_every_node(&cluster) {
        let holder = Arc::new(Lock::builder(cluster.url(0), &name).build().unwrap());
        let other = Arc::new(Lock::builder(cluster.url(1), &name).build().unwrap());
        let guard = holder.acquire_async(None).await.unwrap();
        let rival = other.clone();
        let tried = tokio::spawn(async move { rival.try_acquire_async().await.unwrap().is_none() });
        assert!(tried.await.unwrap(), "{name}: two holders");
        let waiter = other.clone();
        let waiting = tokio::spawn(async move {
            let guard = waiter
                .acquire_async(Some(Duration::from_secs(5)))
                .await
                .unwrap();
            let token = guard.fencing_token();
            assert!(guard.release_async().await.unwrap());
            token
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let first = guard.fencing_token();
        assert!(guard.release_async().await.unwrap());
        assert!(waiting.await.unwrap() > first, "{name}: handed over");
    }
}
