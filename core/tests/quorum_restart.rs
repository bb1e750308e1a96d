//! The quorum lock when its nodes restart without persistence, when clients
//! disagree on the node list, and when a node misses an unlock.

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lockyard::quorum::RwLock;
use lockyard::wait::InTime;
use lockyard::Error;
use support::{eventually, RedisServer, StallProxy};

const TTL: Duration = Duration::from_secs(3);

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

fn lock(urls: &[String], name: &str, ttl: Duration) -> Arc<RwLock> {
    lock_connecting_within(urls, name, ttl, Duration::from_secs(1))
}

/// A lock of another client: a different connect timeout is another
/// connection pool, so it meets the nodes on connections of its own.
fn other_client(urls: &[String], name: &str, ttl: Duration) -> Arc<RwLock> {
    lock_connecting_within(urls, name, ttl, Duration::from_secs(2))
}

fn lock_connecting_within(
    urls: &[String],
    name: &str,
    ttl: Duration,
    connect_timeout: Duration,
) -> Arc<RwLock> {
    Arc::new(
        RwLock::builder(urls.to_vec(), name)
            .ttl(ttl)
            .connect_timeout(connect_timeout)
            .build()
            .unwrap(),
    )
}

/// Tries for the lock on another thread; returns when it got it (and
/// released it at once), or the error.
fn contend(lock: &Arc<RwLock>, write: bool) -> thread::JoinHandle<Result<Instant, Error>> {
    let lock = lock.clone();
    thread::spawn(move || {
        let timeout = Some(Duration::from_secs(10));
        let got = if write {
            lock.write(timeout).map(drop)
        } else {
            lock.read(timeout).map(drop)
        };
        got.map(|()| Instant::now())
    })
}

/// Two of three nodes forget the holder's grant; until every lease they may
/// have forgotten has run out, they grant nobody, and the holder learns at
/// its next refresh that it lost the lock.
fn a_restarted_majority_grants_nothing_while_the_holders_lease_may_live(holder_writes: bool) {
    let mut servers = servers(3);
    let urls = urls(&servers);
    let holder = lock(&urls, "restart", TTL);
    let held = if holder_writes {
        holder
            .acquire_write_interruptibly(None, &|| false)
            .in_time()
    } else {
        holder.acquire_read_interruptibly(None, &|| false).in_time()
    };
    assert!(held.unwrap());
    let killed_at = Instant::now();
    servers[0].restart();
    servers[1].restart();
    let contender = other_client(&urls, "restart", TTL);
    let (writer, reader) = (contend(&contender, true), contend(&contender, false));
    eventually(Duration::from_secs(2), "the holder sees it lost", || {
        !holder.healthy()
    });
    for got in [writer.join().unwrap(), reader.join().unwrap()] {
        let granted_at = got.unwrap();
        assert!(
            granted_at >= killed_at + TTL,
            "granted {:?} after the restart, while the holder's lease could live",
            granted_at - killed_at
        );
    }
    assert!(!holder.release().unwrap(), "the hold had been lost");
}

#[test]
fn a_restarted_majority_grants_nothing_while_a_writers_lease_may_live() {
    a_restarted_majority_grants_nothing_while_the_holders_lease_may_live(true);
}

#[test]
fn a_restarted_majority_grants_nothing_while_a_readers_lease_may_live() {
    a_restarted_majority_grants_nothing_while_the_holders_lease_may_live(false);
}

#[test]
fn clients_with_different_node_lists_are_refused() {
    let servers = servers(4);
    let all = urls(&servers);
    let abc = lock(&all[..3], "lists", TTL);
    let abd = lock(&[&all[..2], &all[3..]].concat(), "lists", TTL);
    let cba = lock(
        &[&all[2], &all[1], &all[0]].map(String::clone),
        "lists",
        TTL,
    );
    // New nodes start in their restart guard, which a first client's round
    // lifts; its next round may reach a node before the lift does, and miss
    // it. Lift every guard first, so that abc's grant lands on all three
    // nodes: a node abc does not hold would grant abd's try and record
    // abd's list, for cba to trip over.
    lift_every_guard(&all);
    let _held = abc.write(None).unwrap();
    // A write returns with a majority; the third grant may still be on its
    // way, and until it lands that node is free.
    eventually(Duration::from_secs(5), "abc holds every node", || {
        lockyard::quorum::inspect(&all[..3], "lists")
            .is_ok_and(|nodes| nodes.iter().all(|node| node.writer.is_some()))
    });
    for got in [
        abd.write(Some(Duration::from_secs(1))).map(drop),
        abd.read(Some(Duration::from_secs(1))).map(drop),
    ] {
        match got {
            Err(Error::Config(message)) => assert!(
                message.contains("must use the same list of servers"),
                "{message}"
            ),
            other => panic!("expected a ConfigError, got {other:?}"),
        }
        assert!(!abd.held());
    }
    // The same servers in another order are the same list: a busy lock.
    let got = cba.write(Some(Duration::from_millis(300))).map(drop);
    assert!(got.as_ref().is_err_and(Error::is_timeout), "{got:?}");
}

/// A node keeps a fingerprint only while someone holds the name: a grant
/// given back by a client with another list must not leave its list
/// behind to refuse the clients that come after.
#[test]
fn a_list_is_forgotten_with_the_last_holder() {
    let servers = servers(4);
    let all = urls(&servers);
    let abc = lock(&all[..3], "forgotten", TTL);
    let abd = lock(&[&all[..2], &all[3..]].concat(), "forgotten", TTL);
    lift_every_guard(&all);
    for round in 0..2 {
        // The grant of the misconfigured client, on a free name, then given
        // back: written where every node answers before the release.
        match round {
            0 => drop(landed(abd.write(Some(Duration::from_secs(2))).unwrap())),
            _ => drop(landed(abd.read(Some(Duration::from_secs(2))).unwrap())),
        }
        thread::sleep(Duration::from_millis(50)); // every release lands
        let got = abc.write(Some(Duration::from_secs(1))).map(drop);
        assert!(got.is_ok(), "round {round}: {got:?}");
        thread::sleep(Duration::from_millis(50)); // every release lands
    }
}

/// Takes a name on every node in `urls` until each has granted it once:
/// new nodes start in their restart guard, which a first client's round
/// lifts, and a node still in it would miss a test's grant.
fn lift_every_guard(urls: &[String]) {
    let warm_up = lock(urls, "warm-up", TTL);
    // A node whose guard the first round missed lifts it once its window
    // (the longest ttl asked of it) has passed.
    eventually(TTL * 3, "every node grants", || {
        let held = warm_up.write(None).unwrap();
        thread::sleep(Duration::from_millis(50)); // the last grant lands
        let everywhere = lockyard::quorum::inspect(urls, "warm-up")
            .is_ok_and(|nodes| nodes.iter().all(|node| node.writer.is_some()));
        drop(held);
        everywhere
    });
}

/// `guard`, once the grants a quorum did not wait for have landed too.
fn landed<G>(guard: G) -> G {
    thread::sleep(Duration::from_millis(50));
    guard
}

#[test]
fn an_unlock_a_node_missed_is_retried_in_the_background() {
    let mut servers: Vec<Option<RedisServer>> = servers(3).into_iter().map(Some).collect();
    let silent = StallProxy::start(servers[2].as_ref().unwrap().port);
    let urls = vec![
        servers[0].as_ref().unwrap().url(),
        servers[1].as_ref().unwrap().url(),
        silent.url(),
    ];
    let ttl = Duration::from_secs(8);
    let holder = lock(&urls, "unlock-retry", ttl);
    // Every node past its first-contact guard: one that a first round
    // missed would grant nothing until its window passed.
    lift_every_guard(&urls);
    drop(holder.write(None).unwrap());
    let held = holder.write(None).unwrap();
    let third = servers[2].as_ref().unwrap();
    eventually(Duration::from_secs(2), "the third node granted too", || {
        third.keys().iter().any(|key| key.ends_with(":writer"))
    });
    // The unlock reaches two nodes; the third's connection swallows it.
    silent.stall_existing();
    assert!(held.release().unwrap());
    // The next writer needs the third node's grant gone.
    drop(servers[0].take());
    let released_at = Instant::now();
    let writer = other_client(&urls, "unlock-retry", ttl);
    let got = writer.write(Some(Duration::from_secs(6))).map(drop);
    assert!(got.is_ok(), "{got:?}");
    assert!(
        released_at.elapsed() < ttl / 2,
        "waited {:?}, as for the grant to expire",
        released_at.elapsed()
    );
}

#[test]
fn a_wait_rides_out_nodes_restarting() {
    let mut servers = servers(3);
    let urls = urls(&servers);
    let lock = lock(&urls, "comeback", Duration::from_secs(2));
    drop(lock.write(None).unwrap());
    servers[0].stop();
    servers[1].stop();
    let started = Instant::now();
    let got = lock.write(Some(Duration::ZERO)).map(drop);
    assert!(
        matches!(&got, Err(Error::Backend { message, .. }) if message.contains("only 1 of 3")),
        "a try-once reports the nodes down: {got:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    let waiter = {
        let lock = lock.clone();
        thread::spawn(move || lock.write(Some(Duration::from_secs(18))).map(drop))
    };
    thread::sleep(Duration::from_secs(1));
    servers[0].start_again();
    servers[1].start_again();
    let got = waiter.join().unwrap();
    assert!(got.is_ok(), "{got:?}");
    // Every pooled connection now leads to a server that is gone.
    for server in &mut servers {
        server.restart();
    }
    let got = lock.write(Some(Duration::from_secs(18))).map(drop);
    assert!(got.is_ok(), "reconnects: {got:?}");
}

#[test]
fn a_try_once_on_new_nodes_is_granted() {
    let servers = servers(3);
    let lock = lock(&urls(&servers), "first-contact", TTL);
    assert!(lock
        .acquire_write_interruptibly(Some(Duration::ZERO), &|| false)
        .in_time()
        .unwrap());
}
