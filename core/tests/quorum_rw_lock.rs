//! The quorum read/write lock on five real redis-server processes.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use lockyard::quorum::RwLock;
use lockyard::wait::InTime;
use lockyard::Error;
use support::{eventually, DelayProxy, RedisServer};

fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn lock(urls: &[String], name: &str) -> Arc<RwLock> {
    Arc::new(
        RwLock::builder(urls.to_vec(), name)
            .ttl(Duration::from_secs(5))
            .build()
            .unwrap(),
    )
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

/// Runs `writers` threads that each increment a plain counter `rounds`
/// times under the write lock, reading and writing it non-atomically, while
/// `readers` threads check that no write is in progress when they hold a
/// read lock. Returns the counter and the most readers seen at once.
fn exercise(lock: &Arc<RwLock>, writers: usize, readers: usize, rounds: usize) -> (usize, usize) {
    let counter = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicUsize::new(0));
    let reading = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(writers + readers));
    let mut threads = Vec::new();
    for _ in 0..writers {
        let (lock, counter, writing, start) = (
            lock.clone(),
            counter.clone(),
            writing.clone(),
            start.clone(),
        );
        threads.push(thread::spawn(move || {
            start.wait();
            for _ in 0..rounds {
                let guard = lock.write(Some(Duration::from_secs(20))).unwrap();
                assert_eq!(writing.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                let seen = counter.load(Ordering::SeqCst);
                thread::yield_now();
                counter.store(seen + 1, Ordering::SeqCst);
                writing.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
            }
        }));
    }
    for _ in 0..readers {
        let (lock, writing, reading, most, start) = (
            lock.clone(),
            writing.clone(),
            reading.clone(),
            most_readers.clone(),
            start.clone(),
        );
        threads.push(thread::spawn(move || {
            start.wait();
            for _ in 0..rounds {
                let guard = lock.read(Some(Duration::from_secs(20))).unwrap();
                let now = reading.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert_eq!(writing.load(Ordering::SeqCst), 0, "a reader with a writer");
                thread::sleep(Duration::from_millis(2));
                reading.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
            }
        }));
    }
    for thread in threads {
        thread.join().unwrap();
    }
    (
        counter.load(Ordering::SeqCst),
        most_readers.load(Ordering::SeqCst),
    )
}

#[test]
fn one_writer_or_many_readers_across_threads() {
    let servers = servers(5);
    let lock = lock(&urls(&servers), "exclusion");
    let (counter, most_readers) = exercise(&lock, 4, 4, 25);
    assert_eq!(counter, 100);
    assert!(most_readers >= 2, "readers never overlapped");
}

#[test]
fn two_of_five_nodes_dying_mid_run_changes_nothing() {
    let mut servers: Vec<Option<RedisServer>> = servers(5).into_iter().map(Some).collect();
    let urls: Vec<String> = servers.iter().flatten().map(RedisServer::url).collect();
    let lock = lock(&urls, "two-down");
    let killer = {
        let doomed: Vec<RedisServer> = [servers[1].take(), servers[3].take()]
            .into_iter()
            .flatten()
            .collect();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(150));
            drop(doomed);
        })
    };
    let (counter, _) = exercise(&lock, 3, 2, 60);
    killer.join().unwrap();
    assert_eq!(counter, 180);
    let guard = lock.write(Some(Duration::from_secs(2))).unwrap();
    assert!(guard.fencing_token().unwrap() > 0);
    guard.check_health().unwrap();
}

#[test]
fn three_of_five_down_fails_cleanly_naming_how_many_answered() {
    let mut servers = servers(5);
    let urls = urls(&servers);
    let lock = lock(&urls, "three-down");
    let held = lock.write(None).unwrap();
    servers.truncate(2);
    // The held lock's refresh no longer reaches a quorum.
    let started = Instant::now();
    while held.healthy() {
        assert!(started.elapsed() < Duration::from_secs(10), "still healthy");
        thread::sleep(Duration::from_millis(50));
    }
    drop(held);
    // A try-once reports it at once; a wait tries until its timeout (the
    // nodes may be restarting), then reports the same.
    for (timeout, within) in [(0, 1), (1, 3)] {
        let started = Instant::now();
        let err = lock.read(Some(Duration::from_secs(timeout))).err().unwrap();
        assert!(started.elapsed() < Duration::from_secs(within));
        match err {
            Error::Backend { message, .. } => {
                assert!(message.contains("only 2 of 5 nodes answered"), "{message}")
            }
            other => panic!("expected a backend error, got {other}"),
        }
    }
}

#[test]
fn a_slow_node_does_not_slow_the_lock() {
    let servers = servers(5);
    let mut urls = urls(&servers);
    let proxy = DelayProxy::start(servers[0].port, Duration::from_millis(150));
    urls[0] = proxy.url();
    let lock = lock(&urls, "slow-node");
    // The first contact with new nodes waits for all of them, the slow one
    // too: only they can tell new nodes from restarted ones together.
    drop(lock.write(None).unwrap());
    let started = Instant::now();
    for _ in 0..20 {
        drop(lock.write(None).unwrap());
        drop(lock.read(None).unwrap());
    }
    let per_cycle = started.elapsed() / 40;
    assert!(
        per_cycle < Duration::from_millis(30),
        "{per_cycle:?} per lock+unlock"
    );
}

#[test]
fn fencing_tokens_strictly_increase_across_holders() {
    let servers = servers(5);
    let urls = urls(&servers);
    let (a, b) = (lock(&urls, "fenced"), lock(&urls, "fenced"));
    let mut last = 0;
    for i in 0..10 {
        let holder = if i % 2 == 0 { &a } else { &b };
        let guard = holder.write(None).unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

#[test]
fn a_held_lock_outlives_its_ttl_by_refreshing() {
    let servers = servers(5);
    let urls = urls(&servers);
    let lock = Arc::new(
        RwLock::builder(urls.clone(), "refreshed")
            .ttl(Duration::from_millis(400))
            .build()
            .unwrap(),
    );
    let guard = lock.write(None).unwrap();
    thread::sleep(Duration::from_millis(1200));
    guard.check_health().unwrap();
    let other = lock.clone();
    let denied = thread::spawn(move || {
        other
            .acquire_read_interruptibly(Some(Duration::ZERO), &|| false)
            .in_time()
            .unwrap()
    });
    assert!(!denied.join().unwrap());
    assert!(guard.release().unwrap());
    // The release returned at quorum; the other nodes' releases may still
    // be on their way.
    for server in &servers {
        eventually(Duration::from_secs(2), "only fencing keys are left", || {
            server
                .keys()
                .iter()
                .all(|k| k.ends_with(":fence") || k.ends_with(":alive"))
        });
    }
}

/// Two hours in fencing values (server time in µs).
const TWO_HOURS_US: u64 = 2 * 3600 * 1_000_000;

/// What an idle hour (more than ttl + 1 h) does to a node: every key with
/// an expiry is gone.
fn let_an_idle_hour_pass(server: &RedisServer) {
    let mut conn = server.raw().unwrap();
    for key in server.keys() {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        if ttl >= 0 {
            let _: () = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
        }
    }
}

#[test]
fn fencing_never_goes_backwards_after_an_idle_hour_with_a_node_clock_two_hours_ahead() {
    let servers = servers(3);
    let urls = urls(&servers);
    let lock = lock(&urls, "skewed");
    // A first sealed grant leaves each node's fencing value behind.
    let warm_up = lock.write(None).unwrap();
    warm_up.fencing_token().unwrap();
    drop(warm_up);
    // Node 0 issued its values with a clock two hours ahead of the others.
    let mut ahead = servers[0].raw().unwrap();
    for key in servers[0].keys().iter().filter(|k| k.ends_with(":fence")) {
        let value: u64 = redis::cmd("GET").arg(key).query(&mut ahead).unwrap();
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value + TWO_HOURS_US)
            .arg("KEEPTTL")
            .query(&mut ahead)
            .unwrap();
    }
    // With node 2 stopped the write quorum is nodes 0 and 1: the token
    // comes from the clock ahead.
    servers[2].signal("STOP");
    let first = lock.write(None).unwrap();
    let ahead_token = first.fencing_token().unwrap();
    drop(first);
    servers[2].signal("CONT");
    // An idle hour later node 0 is down: the quorum is nodes 1 and 2,
    // whose own clocks are two hours behind that token.
    servers[0].signal("STOP");
    for server in &servers[1..] {
        let_an_idle_hour_pass(server);
    }
    let second = lock.write(Some(Duration::from_secs(10))).unwrap();
    let token = second.fencing_token().unwrap();
    assert!(
        token > ahead_token,
        "{token} after {ahead_token}: {} s backwards",
        (ahead_token - token) / 1_000_000
    );
    drop(second);
    servers[0].signal("CONT");
}

#[test]
fn an_idle_hour_after_many_names_leaves_one_fencing_key_per_node() {
    let servers = servers(3);
    let urls = urls(&servers);
    for name in ["alpha", "beta", "gamma", "delta"] {
        let lock = lock(&urls, name);
        let guard = lock.write(None).unwrap();
        guard.fencing_token().unwrap();
        drop(guard);
        drop(lock.read(None).unwrap());
    }
    // Releases return at quorum; the last nodes' answers may still be on
    // their way, and what they leave expires too. Left: the fencing
    // counter and the restart guard, one each per node.
    for server in &servers {
        eventually(Duration::from_secs(2), "one key of each is left", || {
            let_an_idle_hour_pass(server);
            server.keys() == ["lockyard:rw:alive", "lockyard:rw:fence"]
        });
    }
}

/// Review finding (merge d550996): fencing goes backwards across the
/// upgrade to one counter per node.
///
/// Before the merge each node kept a name's last fencing value in the
/// name's own key, `lockyard:{name}:rw:fence`, for ttl + 1 h after its last
/// grant, and a write's seal raised that key. The merged scripts read and
/// raise only `lockyard:rw:fence`, so a token the previous version sealed
/// is forgotten at once: a writer whose quorum meets the sealed set only in
/// a node that kept it in the old key gets that node's clock, not a value
/// above the seal. With a node clock ahead (here: the previous writer's
/// quorum was nodes 0 and 1, node 0 two hours ahead) the next token is
/// smaller, during a rolling upgrade or within the hour after it; the same
/// happens while old and new clients share a name, in both directions.
#[test]
fn fencing_never_goes_backwards_across_the_upgrade_to_one_counter_per_node() {
    let servers = servers(3);
    let urls = urls(&servers);
    // Nodes met with all three up (the new version's first contact waits
    // for every node to tell new nodes from restarted ones).
    drop(lock(&urls, "warm-up").write(None).unwrap());
    let lock = lock(&urls, "upgraded");
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    // What the previous version left on nodes 0 and 1 after sealing a
    // token issued by node 0's clock, two hours ahead.
    let sealed = now_us + TWO_HOURS_US;
    for server in &servers[..2] {
        let mut conn = server.raw().unwrap();
        let _: () = redis::cmd("SET")
            .arg("lockyard:{upgraded}:rw:fence")
            .arg(sealed)
            .arg("PX")
            .arg(3_600_000 + 5_000)
            .query(&mut conn)
            .unwrap();
    }
    // Node 0 is down: the quorum is nodes 1 and 2, and node 1 saw the seal.
    servers[0].signal("STOP");
    let guard = lock.write(Some(Duration::from_secs(10))).unwrap();
    let token = guard.fencing_token().unwrap();
    drop(guard);
    servers[0].signal("CONT");
    assert!(
        token > sealed,
        "token {token} after the sealed {sealed}: fencing went backwards"
    );
}

/// Review finding (merge d550996, `Tally::decides` and its caller): on
/// nodes whose round trip is longer than `MIN_ATTEMPT` (100 ms), a wait for
/// a busy lock ends in a BackendError ("only 0 of 3 nodes answered") instead
/// of a timeout, and a try-once (timeout 0) always does, busy lock or not.
///
/// An attempt's round is cut at the caller's deadline (at least 100 ms
/// after it was sent); the answers still on their way count as silence,
/// and silence is read as "too few nodes reachable". Every node is up and
/// answers every request, just later than the caller's time left. The
/// merge's contract (lock.rs: "a busy lock is waited for, whatever the
/// node count") has the caller see Error::Timeout.
#[test]
fn a_busy_lock_on_slow_nodes_times_out_rather_than_failing() {
    let servers = servers(3);
    // Every node 2 × 80 ms away: answers come in about 160 ms.
    let proxies: Vec<DelayProxy> = servers
        .iter()
        .map(|s| DelayProxy::start(s.port, Duration::from_millis(80)))
        .collect();
    let far = lock(
        &proxies.iter().map(DelayProxy::url).collect::<Vec<_>>(),
        "far-away",
    );
    // Connected and the scripts loaded: the nodes answer every request.
    // (Even this may take several tries: a first round needs more round
    // trips than fit in one 500 ms attempt, and ends in a BackendError
    // although the caller said to wait forever.)
    let mut warm_up = 0;
    while far.write(None).is_err() {
        warm_up += 1;
        assert!(warm_up < 20, "the slow nodes never granted a free lock");
    }
    // Held on this thread through the same slow addresses: a client that
    // reached the nodes by other addresses would list other nodes.
    let _held = far.write(None).unwrap();
    let far_writer = far.clone();
    let got = thread::spawn(
        move || match far_writer.write(Some(Duration::from_millis(700))) {
            Ok(_) => "acquired".to_owned(),
            Err(e) if e.is_timeout() => "timeout".to_owned(),
            Err(e) => format!("{e}"),
        },
    )
    .join()
    .unwrap();
    assert_eq!(got, "timeout", "every node answered, denying a busy lock");
}

/// Review finding (same root cause as the test above): `write(None)`, a
/// wait without end, fails with a BackendError on nodes that are all up,
/// 2 × 80 ms away. A first round needs several round trips (connecting,
/// loading the script) and takes longer than one 500 ms attempt; the
/// answers on their way are read as "too few nodes reachable" and the
/// wait ends, though nothing was denied and no request failed or timed
/// out (the request timeout is 2 s).
#[test]
fn waiting_forever_on_slow_nodes_is_never_a_backend_error() {
    let servers = servers(3);
    let proxies: Vec<DelayProxy> = servers
        .iter()
        .map(|s| DelayProxy::start(s.port, Duration::from_millis(80)))
        .collect();
    let far = lock(
        &proxies.iter().map(DelayProxy::url).collect::<Vec<_>>(),
        "far-away",
    );
    let got = far.write(None).map(drop);
    assert!(got.is_ok(), "{got:?}");
}

/// Issue 16, item 10: periods past 30 days and waits past 100 years are
/// Config errors, never an `Instant` overflow (a panic).
#[test]
fn durations_out_of_range_are_config_errors() {
    let servers = servers(3);
    let urls = urls(&servers);
    let huge = Duration::from_secs_f64(1e19);
    let month = Duration::from_secs(31 * 24 * 3600);
    for length in [month, huge] {
        let builder = || RwLock::builder(urls.clone(), "huge");
        for built in [
            builder().ttl(length).build(),
            builder().connect_timeout(length).build(),
            builder().timeout(Some(length + lockyard::MAX_WAIT)).build(),
        ] {
            assert!(matches!(built, Err(Error::Config(_))), "{length:?}");
        }
    }
    let lock = lock(&urls, "huge");
    for length in [huge, Duration::from_millis(u64::MAX), Duration::MAX] {
        assert!(matches!(lock.write(Some(length)), Err(Error::Config(_))));
        assert!(matches!(lock.read(Some(length)), Err(Error::Config(_))));
    }
    assert!(!lock.held());
    drop(lock.write(Some(lockyard::MAX_WAIT)).unwrap());
}
