//! Review of 6de649b..4e73161: the acquire, release and refresh fast paths
//! placed before the prelude's helpers and spelled out (fe6c372), and the
//! memory change (4e73161): holds kept in a SmallMap, one shared token per
//! hold and schedule record, due records grouped by node while taken, and
//! pipelines cut from the tail.
//!
//! Findings first (each fails on 4e73161), then coverage of the risky
//! areas checked and found correct.

mod support;

use std::time::{Duration, Instant};

use lockyard::redis::{Lock, Session, WaitGroup};
use support::fork::{answer_parent, child_answer, pipe};
use support::{raw_script, DelayProxy, RedisCluster, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

// ------------------------------------------------------------- raw scripts

/// `file`'s script on `name`, as the library sends it.
fn invoke<T: ::redis::FromRedisValue>(
    conn: &mut ::redis::Connection,
    file: &str,
    name: &str,
    limit: u32,
    fence_base: u64,
    args: &[&str],
) -> T {
    let body = match file {
        "acquire" => include_str!("../src/redis/scripts/acquire.lua"),
        "refresh" => include_str!("../src/redis/scripts/refresh.lua"),
        "release" => include_str!("../src/redis/scripts/release.lua"),
        _ => unreachable!(),
    };
    raw_script::invoke(
        conn,
        &raw_script::script(body),
        name,
        limit,
        fence_base,
        args,
    )
}

/// acquire.lua, try once: {granted, fence, deadline, now}.
fn acquire(
    conn: &mut ::redis::Connection,
    name: &str,
    token: &str,
    ttl_ms: u64,
    kind_limit: (u32, u32),
    fence_base: u64,
    binding: &str,
) -> Vec<i64> {
    invoke(
        conn,
        "acquire",
        name,
        kind_limit.1,
        fence_base,
        &[
            token,
            &ttl_ms.to_string(),
            "0",
            "2000",
            binding,
            &kind_limit.0.to_string(),
        ],
    )
}

fn lock_acquire(conn: &mut ::redis::Connection, name: &str, token: &str, ttl_ms: u64) -> Vec<i64> {
    acquire(conn, name, token, ttl_ms, (1, 1), 0, "")
}

fn refresh(conn: &mut ::redis::Connection, name: &str, token: &str, ttl_ms: u64) -> Vec<i64> {
    invoke(
        conn,
        "refresh",
        name,
        1,
        0,
        &[token, &ttl_ms.to_string(), ""],
    )
}

fn release(conn: &mut ::redis::Connection, name: &str, token: &str) -> i64 {
    invoke(conn, "release", name, 1, 0, &[token])
}

fn server_us(conn: &mut ::redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = ::redis::cmd("TIME").query(conn).unwrap();
    secs * 1_000_000 + micros
}

fn key_type(conn: &mut ::redis::Connection, key: &str) -> String {
    ::redis::cmd("TYPE").arg(key).query(conn).unwrap()
}

fn holders(name: &str) -> String {
    format!("lockyard:{{{name}}}:holders")
}

// ------------------------------------------------------------- findings
//
// None reproduced: see the report. The tests below are coverage.

// ------------------------------------------------ coverage: fast paths

/// Neither fast path takes a prefix, a suffix, an extension or a
/// pattern-like string of the recorded token for the token: the wrong
/// caller is refused (the full path answers lost / not released) and the
/// holder keeps the name, refreshes and releases it.
#[test]
fn the_fast_paths_compare_whole_tokens() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let recorded = "tok en.*%d";
    let wrong = [
        "tok",
        "en.*%d",
        "tok en.*%",
        "tok en.*%d ",
        ".*",
        "",
        "%d",
        "tok en.*%dx",
    ];
    for (i, other) in wrong.iter().enumerate() {
        let name = format!("tokens-{i}");
        assert_eq!(lock_acquire(&mut conn, &name, recorded, 5000)[0], 1);
        assert_eq!(key_type(&mut conn, &holders(&name)), "string");
        assert_eq!(
            refresh(&mut conn, &name, other, 5000)[0],
            0,
            "{other:?} refreshed"
        );
        assert_eq!(release(&mut conn, &name, other), 0, "{other:?} released");
        assert_eq!(
            lock_acquire(&mut conn, &name, "rival", 5000)[0],
            0,
            "{other:?}: a rival took the name"
        );
        assert_eq!(refresh(&mut conn, &name, recorded, 5000)[0], 1);
        assert_eq!(release(&mut conn, &name, recorded), 1);
        assert_eq!(lock_acquire(&mut conn, &name, "rival", 5000)[0], 1);
    }
    // A token that itself looks like a record.
    let name = "tokens-record";
    let odd = "1 1 5 99999999999999 x";
    assert_eq!(lock_acquire(&mut conn, name, odd, 5000)[0], 1);
    assert_eq!(refresh(&mut conn, name, "x", 5000)[0], 0);
    assert_eq!(release(&mut conn, name, "x"), 0);
    assert_eq!(refresh(&mut conn, name, odd, 5000)[0], 1);
    assert_eq!(release(&mut conn, name, odd), 1);
}

/// A short form whose deadline has passed while its key lives on (written
/// with a longer PX, as a clock step or an older writer could leave it) is
/// lost: the fast refresh does not revive it, the fast release does not
/// call it released, and the next taker gets a larger fence.
#[test]
fn an_expired_short_form_still_present_is_lost() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let now_ms = server_us(&mut conn) / 1000;
    for (i, past) in [1i64, 5, 1000].iter().enumerate() {
        let name = format!("expired-{i}");
        let _: () = ::redis::cmd("SET")
            .arg(holders(&name))
            .arg(format!("1 1 42 {} tok", now_ms - past))
            .arg("PX")
            .arg(60_000)
            .query(&mut conn)
            .unwrap();
        assert_eq!(
            refresh(&mut conn, &name, "tok", 5000)[0],
            0,
            "revived {past} ms late"
        );
        assert_eq!(
            release(&mut conn, &name, "tok"),
            0,
            "released {past} ms late"
        );
        let taken = lock_acquire(&mut conn, &name, "next", 5000);
        assert_eq!(taken[0], 1);
        assert!(taken[1] > 42);
    }
    // At the deadline's own millisecond (the key may still be there).
    let mut revived = 0;
    for trial in 0..20 {
        let name = format!("edge-{trial}");
        let granted = lock_acquire(&mut conn, &name, "t", 40);
        while server_us(&mut conn) / 1000 < granted[2] {
            std::thread::sleep(MS(1));
        }
        let answer = refresh(&mut conn, &name, "t", 5000);
        if answer[0] == 1 {
            revived += 1;
        }
    }
    assert_eq!(
        revived, 0,
        "refreshes at or past the deadline revived the lease"
    );
}

/// The fast acquire's fence only grows: past a fence counter ahead of the
/// clock, and with Sentinel's large fence base, and then back on a base of
/// 0 (an older epoch's client) it stays above what was issued.
#[test]
fn fences_from_the_fast_path_only_grow() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let ahead: i64 = 5_000_000_000_000_000;
    let _: () = ::redis::cmd("SET")
        .arg("lockyard:{ahead}:fence")
        .arg(ahead)
        .query(&mut conn)
        .unwrap();
    let first = lock_acquire(&mut conn, "ahead", "a", 5000);
    assert_eq!((first[0], first[1]), (1, ahead + 1));
    assert_eq!(release(&mut conn, "ahead", "a"), 1);
    let second = lock_acquire(&mut conn, "ahead", "b", 5000);
    assert_eq!((second[0], second[1]), (1, ahead + 2));

    let base: u64 = 7 << 32;
    let before = server_us(&mut conn);
    let third = acquire(&mut conn, "based", "c", 5000, (1, 1), base, "");
    assert_eq!(third[0], 1);
    assert!(
        third[1] >= before + base as i64,
        "{} below the base",
        third[1]
    );
    assert_eq!(release(&mut conn, "based", "c"), 1);
    let fourth = lock_acquire(&mut conn, "based", "d", 5000);
    assert_eq!(fourth[0], 1);
    assert!(
        fourth[1] > third[1],
        "the fence went back: {} after {}",
        fourth[1],
        third[1]
    );
    // The fence counter outlives the grant by an hour.
    let pttl: i64 = ::redis::cmd("PTTL")
        .arg("lockyard:{based}:fence")
        .query(&mut conn)
        .unwrap();
    assert!(pttl > 3_600_000, "{pttl}");
}

/// A request given up (its `:gone` tombstone set) is not granted by the
/// fast path, and a grant under a session never takes the short form.
#[test]
fn tombstones_and_sessions_stay_off_the_fast_path() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let _: () = ::redis::cmd("SET")
        .arg("lockyard:{gone}:wake:tok:gone")
        .arg(1)
        .arg("PX")
        .arg(10_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(lock_acquire(&mut conn, "gone", "tok", 5000)[0], 0);
    assert_eq!(key_type(&mut conn, &holders("gone")), "none");

    let bound = acquire(&mut conn, "bound", "s", 5000, (1, 1), 0, "0 1 0 ");
    assert_eq!(bound[0], 1);
    assert_eq!(key_type(&mut conn, &holders("bound")), "zset");
    // On the zset the fast paths step aside (WRONGTYPE) for the full ones.
    assert_eq!(refresh(&mut conn, "bound", "s", 5000)[0], 1);
    assert_eq!(lock_acquire(&mut conn, "bound", "rival", 5000)[0], 0);
    assert_eq!(release(&mut conn, "bound", "s"), 1);
    assert_eq!(lock_acquire(&mut conn, "bound", "rival", 5000)[0], 1);
}

/// A WaitGroup's first slot takes the short form (kind 2, its limit);
/// the next ones spread it and fill the group to its limit, no further,
/// with growing fences; a lock of the same name is refused meanwhile.
#[test]
fn a_wait_group_from_the_short_form_fills_to_its_limit() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let first = acquire(&mut conn, "wg", "w0", 5000, (2, 3), 0, "");
    assert_eq!(first[0], 1);
    let short: String = ::redis::cmd("GET")
        .arg(holders("wg"))
        .query(&mut conn)
        .unwrap();
    assert!(short.starts_with("2 3 "), "{short}");
    assert_eq!(acquire(&mut conn, "wg", "lock", 5000, (1, 1), 0, "")[0], -1);
    let mut last = first[1];
    for token in ["w1", "w2"] {
        let granted = acquire(&mut conn, "wg", token, 5000, (2, 3), 0, "");
        assert_eq!(granted[0], 1, "{token}");
        assert!(granted[1] > last);
        last = granted[1];
    }
    assert_eq!(acquire(&mut conn, "wg", "w3", 5000, (2, 3), 0, "")[0], 0);
    let count: i64 = ::redis::cmd("ZCARD")
        .arg(holders("wg"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(count, 3);
    let args = |t: &'static str| [t, "5000", ""];
    for t in ["w0", "w1", "w2"] {
        let r: Vec<i64> = invoke(&mut conn, "refresh", "wg", 3, 0, &args(t));
        assert_eq!(r[0], 1, "{t}");
    }
    let r: i64 = invoke(&mut conn, "release", "wg", 3, 0, &["w0"]);
    assert_eq!(r, 1);
    assert_eq!(acquire(&mut conn, "wg", "w3", 5000, (2, 3), 0, "")[0], 1);
}

// ----------------------------------------------- coverage: SmallMap holds

/// One WaitGroup object holding twenty slots (its holds past the
/// SmallMap's eight, in the hash table), kept alive past their ttl and
/// freed one by one in a scattered order: each `done` frees its own slot
/// once, the others stay held and healthy; then the group fills again.
#[test]
fn one_group_object_keeps_twenty_slots_across_the_small_maps_threshold() {
    let server = RedisServer::start();
    let group = WaitGroup::builder(server.url(), "twenty", 20)
        .ttl(MS(600))
        .build()
        .unwrap();
    let tokens: Vec<String> = (0..20)
        .map(|_| group.add(None, &|| false).unwrap())
        .collect();
    let fences: Vec<u64> = tokens
        .iter()
        .map(|t| group.fencing_token(t).unwrap())
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    std::thread::sleep(MS(1500));
    assert_eq!(group.count().unwrap(), 20);
    assert!(group.add(Some(MS(100)), &|| false).is_err(), "a 21st slot");
    let order = [
        10, 0, 19, 5, 11, 12, 13, 1, 2, 3, 18, 17, 4, 6, 7, 8, 9, 14, 15, 16,
    ];
    for (freed, &at) in order.iter().enumerate() {
        assert!(group.done(&tokens[at]).unwrap(), "slot {at} was not ours");
        assert!(!group.done(&tokens[at]).unwrap(), "slot {at} freed twice");
        for &kept in &order[freed + 1..] {
            assert!(
                group.healthy(&tokens[kept]),
                "slot {kept} lost after {at} freed"
            );
            assert_eq!(group.fencing_token(&tokens[kept]), Some(fences[kept]));
        }
        assert_eq!(group.count().unwrap(), 20 - freed as u32 - 1);
    }
    let again: Vec<String> = (0..20)
        .map(|_| group.add(None, &|| false).unwrap())
        .collect();
    std::thread::sleep(MS(1000));
    assert_eq!(group.count().unwrap(), 20);
    assert!(again.iter().all(|t| group.healthy(t)));
}

/// A session with twelve locks (its members past eight), most released:
/// the rest stay held and healthy through later renewals, and the
/// released names are free.
#[test]
fn a_session_released_down_from_twelve_locks_keeps_the_rest() {
    let server = RedisServer::start();
    let session = Session::builder(server.url()).ttl(MS(900)).build().unwrap();
    let locks: Vec<Lock> = (0..12)
        .map(|i| {
            Lock::builder(server.url(), format!("s-{i}"))
                .session(&session)
                .build()
                .unwrap()
        })
        .collect();
    let mut guards: Vec<Option<_>> = locks
        .iter()
        .map(|lock| Some(lock.acquire(Some(MS(2000))).unwrap()))
        .collect();
    std::thread::sleep(MS(1200));
    for i in [3, 0, 11, 7, 1, 2, 4, 5, 9] {
        guards[i].take().unwrap().release().unwrap();
    }
    std::thread::sleep(MS(2000));
    session.check_health().unwrap();
    for i in [6, 8, 10] {
        guards[i].as_ref().unwrap().check_health().unwrap();
        assert!(locks[i].owned().unwrap(), "s-{i} lost");
        let rival = Lock::builder(server.url(), format!("s-{i}"))
            .build()
            .unwrap();
        assert!(rival.try_acquire().unwrap().is_none(), "s-{i}: two holders");
    }
    for i in [3, 0, 11, 7, 1, 2, 4, 5, 9] {
        let rival = Lock::builder(server.url(), format!("s-{i}"))
            .build()
            .unwrap();
        assert!(rival.try_acquire().unwrap().is_some(), "s-{i} still held");
    }
}

/// A child forked while one WaitGroup object holds ten slots in blocks
/// (the hash table) leaves them: its leaves are no-ops and its drop of
/// the group frees nothing; the parent still holds all ten.
#[test]
fn a_forked_child_leaves_a_groups_many_slots_to_its_parent() {
    let server = RedisServer::start();
    let group = WaitGroup::builder(server.url(), "forked", 12)
        .ttl(MS(2000))
        .build()
        .unwrap();
    let slots: Vec<_> = (0..10)
        .map(|_| group.acquire(Some(MS(2000))).unwrap())
        .collect();
    let tokens: Vec<String> = slots.iter().map(|s| s.token().to_owned()).collect();
    let fds = pipe();
    // SAFETY: the child drops what it inherited, answers and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let left = tokens.iter().all(|t| group.leave(t).unwrap_or(false));
        drop(slots);
        drop(group);
        answer_parent(fds, if left { "left" } else { "refused" });
    }
    let answer = child_answer(pid, fds, Duration::from_secs(20));
    assert_eq!(answer.as_deref(), Some("left"));
    assert_eq!(
        group.count().unwrap(),
        10,
        "the child freed the parent's slots"
    );
    std::thread::sleep(MS(2500));
    assert_eq!(
        group.count().unwrap(),
        10,
        "the parent stopped refreshing them"
    );
    for slot in &slots {
        slot.check_health().unwrap();
    }
    drop(slots);
    assert_eq!(group.count().unwrap(), 0);
}

// ------------------------------------------------- coverage: the schedule

/// 2,500 locks falling due together on one node (three pipelines cut from
/// the tail, per period) all stay held past several ttls, and all are
/// freed at the end.
#[test]
fn thousands_of_locks_due_at_once_all_stay_held() {
    let server = RedisServer::start();
    let locks: Vec<Lock> = (0..2500)
        .map(|i| {
            Lock::builder(server.url(), format!("many-{i}"))
                .ttl(MS(1500))
                .build()
                .unwrap()
        })
        .collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|l| l.acquire(Some(MS(5000))).unwrap())
        .collect();
    let fences: Vec<u64> = guards.iter().map(|g| g.fencing_token()).collect();
    std::thread::sleep(MS(4000));
    for (i, guard) in guards.iter().enumerate() {
        guard
            .check_health()
            .unwrap_or_else(|e| panic!("many-{i}: {e}"));
        assert_eq!(guard.fencing_token(), fences[i]);
    }
    let held = server
        .keys()
        .iter()
        .filter(|k| k.ends_with(":holders"))
        .count();
    assert_eq!(held, 2500, "locks no longer held in Redis");
    drop(guards);
    let held = server
        .keys()
        .iter()
        .filter(|k| k.ends_with(":holders"))
        .count();
    assert_eq!(held, 0);
}

/// Locks on every node of a Cluster, with handed-over grants (a waiter
/// admitted while its holder let go) falling due among them, all stay
/// held past several ttls.
#[test]
fn records_on_every_cluster_node_and_handed_over_grants_stay_held() {
    let cluster = RedisCluster::start();
    // Lock `name` on node `i % 3`.
    let lock_on = |i: usize, name: String| {
        Lock::builder(cluster.url(i % 3), name)
            .ttl(MS(900))
            .build()
            .unwrap()
    };
    let locks: Vec<Lock> = (0..60).map(|i| lock_on(i, format!("c-{i}"))).collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|l| l.acquire(Some(MS(5000))).unwrap())
        .collect();
    // Handed-over grants: waiters admitted by a release.
    let waiters: Vec<_> = (0..6).map(|i| lock_on(i, format!("h-{i}"))).collect();
    let firsts: Vec<Lock> = (0..6).map(|i| lock_on(i, format!("h-{i}"))).collect();
    let first_guards: Vec<_> = firsts
        .iter()
        .map(|l| l.acquire(Some(MS(2000))).unwrap())
        .collect();
    let handed = std::thread::scope(|scope| {
        let waiting: Vec<_> = waiters
            .iter()
            .map(|w| scope.spawn(move || w.acquire(Some(MS(5000))).map(|g| g.fencing_token())))
            .collect();
        std::thread::sleep(MS(300));
        drop(first_guards);
        waiting
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(handed.len(), 6);
    std::thread::sleep(MS(2500));
    for (i, guard) in guards.iter().enumerate() {
        guard
            .check_health()
            .unwrap_or_else(|e| panic!("c-{i}: {e}"));
        assert!(locks[i].owned().unwrap(), "c-{i} no longer owned");
    }
}

/// A lock released and taken again, over and over, while its refreshes
/// are in flight on a slow link: each taking holds the name alone with a
/// larger fence, and the last one stays healthy and owned.
#[test]
fn a_lock_retaken_while_its_refresh_is_in_flight_stays_held_alone() {
    let server = RedisServer::start();
    let proxy = DelayProxy::start(server.port, MS(40));
    let lock = Lock::builder(proxy.url(), "retaken")
        .ttl(MS(400))
        .build()
        .unwrap();
    let rival = Lock::builder(server.url(), "retaken").build().unwrap();
    let mut last = 0;
    let until = Instant::now() + MS(2500);
    while Instant::now() < until {
        let guard = lock.acquire(Some(MS(3000))).unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        std::thread::sleep(MS(70));
        assert!(rival.try_acquire().unwrap().is_none(), "two holders");
        drop(guard);
    }
    let guard = lock.acquire(Some(MS(3000))).unwrap();
    std::thread::sleep(MS(1500));
    guard.check_health().unwrap();
    assert!(lock.owned().unwrap());
    assert!(
        rival.try_acquire().unwrap().is_none(),
        "two holders at the end"
    );
}
