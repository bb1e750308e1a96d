//! Review of the fast path: a grant on an idle name kept as the short
//! form, the holders key as a string "<kind> <limit> <fence> <deadline ms>
//! <token>", spread into the full records by the first other script
//! (settle). Findings first, then sequences that mix fast
//! and slow paths and hold (kept as coverage).

mod support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockyard::redis::{self, Behavior, Lock, Session, WaitGroup};
use lockyard::Error;
use support::raw_script::{invoke, script};
use support::{eventually, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn acquire_script() -> ::redis::Script {
    script(include_str!("../src/redis/scripts/acquire.lua"))
}

fn refresh_script() -> ::redis::Script {
    script(include_str!("../src/redis/scripts/refresh.lua"))
}

fn release_script() -> ::redis::Script {
    script(include_str!("../src/redis/scripts/release.lua"))
}

fn cancel_script() -> ::redis::Script {
    script(include_str!("../src/redis/scripts/cancel.lua"))
}

fn inspect_script() -> ::redis::Script {
    script(include_str!("../src/redis/scripts/inspect.lua"))
}

/// acquire.lua as a Lock (kind 1, limit 1) outside a session, queueing
/// for `lease_ms` (0: try once). Returns {granted, fence, deadline, now}.
fn raw_acquire(
    conn: &mut ::redis::Connection,
    name: &str,
    token: &str,
    ttl_ms: u64,
    lease_ms: u64,
) -> Vec<i64> {
    invoke(
        conn,
        &acquire_script(),
        name,
        1,
        0,
        &[
            token,
            &ttl_ms.to_string(),
            &lease_ms.to_string(),
            "2000",
            "",
            "1",
        ],
    )
}

/// refresh.lua by the process that took the slot. Returns {code, now}.
fn raw_refresh(conn: &mut ::redis::Connection, name: &str, token: &str, ttl_ms: u64) -> Vec<i64> {
    invoke(
        conn,
        &refresh_script(),
        name,
        1,
        0,
        &[token, &ttl_ms.to_string(), ""],
    )
}

fn raw_release(conn: &mut ::redis::Connection, name: &str, token: &str) -> i64 {
    invoke(conn, &release_script(), name, 1, 0, &[token])
}

fn server_ms(conn: &mut ::redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = ::redis::cmd("TIME").query(conn).unwrap();
    secs * 1000 + micros / 1000
}

/// Spins (without touching the name) until the server's clock reads at
/// least `ms`.
fn until_server_ms(conn: &mut ::redis::Connection, ms: i64) {
    loop {
        let now = server_ms(conn);
        if now >= ms {
            return;
        }
        if ms - now > 3 {
            std::thread::sleep(MS((ms - now - 2) as u64));
        }
    }
}

/// Every key left in Redis but the fence counter of `name` (and tombstones).
fn leftovers(server: &RedisServer, name: &str) -> Vec<String> {
    let fence = format!("lockyard:{{{name}}}:fence");
    server
        .keys()
        .into_iter()
        .filter(|k| k.contains(&format!("{{{name}}}")) && *k != fence && !k.ends_with(":gone"))
        .collect()
}

fn lock(server: &RedisServer, name: &str, ttl: Duration) -> Lock {
    Lock::builder(server.url(), name).ttl(ttl).build().unwrap()
}

fn group(server: &RedisServer, name: &str, limit: u32, ttl: Duration) -> WaitGroup {
    WaitGroup::builder(server.url(), name, limit)
        .ttl(ttl)
        .build()
        .unwrap()
}

/// The short form's record of `name`, if its holders key holds one.
fn short_form(conn: &mut ::redis::Connection, name: &str) -> Option<String> {
    let key = format!("lockyard:{{{name}}}:holders");
    let kind: String = ::redis::cmd("TYPE").arg(&key).query(conn).unwrap();
    (kind == "string").then(|| ::redis::cmd("GET").arg(&key).query(conn).unwrap())
}

fn shape(conn: &mut ::redis::Connection, name: &str) -> Option<String> {
    ::redis::cmd("GET")
        .arg(format!("lockyard:{{{name}}}:shape"))
        .query(conn)
        .unwrap()
}

// ---------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------

/// FINDING: refresh.lua's fast path extends a short-form grant whose
/// deadline has already passed.
///
/// The rule (refresh.lua's own header, and the slow path): "an expired
/// lease is lost even when nobody took the slot": purge_expired() drops
/// every holder whose deadline is <= now, so a refresh at server time
/// now_ms >= deadline answers {0} (lost). The fast path only checks that
/// the short-form key still exists and names the caller, never the
/// deadline stored in it. On Redis 7.0 the key's PX expiry is taken from
/// the clock when SET runs (after the script's TIME), so the key expires
/// at, or 1 ms after, the stored deadline, and Redis keeps a key visible
/// through its expiry millisecond (expired only when now > when). A
/// refresh that lands in the deadline's millisecond therefore finds the
/// key and extends the lease although its deadline has passed: the
/// holder (whose local health already ran out, e.g. after a pause) is
/// made healthy again instead of being told its lock was lost. The full
/// form (and every other script: inspect, acquire) treats the same grant
/// as expired at that moment.
///
/// Sequence: fast acquire with ttl 60 ms; wait until the server clock
/// reads the deadline; refresh. Observed: {1, now} with now >= deadline.
/// Expected: {0, now} (lost), as on the full form.
#[test]
fn a_fast_refresh_at_the_deadline_does_not_revive_an_expired_lease() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let mut revived = vec![];
    for trial in 0..40 {
        let name = format!("edge-refresh-{trial}");
        let token = format!("t{trial}");
        let granted = raw_acquire(&mut conn, &name, &token, 60, 0);
        assert_eq!(granted[0], 1);
        let deadline = granted[2];
        until_server_ms(&mut conn, deadline);
        let renewed = raw_refresh(&mut conn, &name, &token, 60);
        if renewed[0] == 1 && renewed[1] >= deadline {
            revived.push((trial, deadline, renewed[1]));
        }
    }
    assert!(
        revived.is_empty(),
        "refreshes at or after the lease deadline extended the lease \
         (trial, deadline ms, refresh now ms): {revived:?}"
    );
}

/// Control for the finding above: the same refresh against the full form
/// (the name spread by a try_acquire of another token first) is refused
/// at the deadline. Passes.
#[test]
fn a_slow_refresh_at_the_deadline_finds_the_lease_lost() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    for trial in 0..20 {
        let name = format!("edge-slow-{trial}");
        let token = format!("t{trial}");
        let granted = raw_acquire(&mut conn, &name, &token, 60, 0);
        assert_eq!(granted[0], 1);
        // Another caller's try spreads the short form into the records.
        assert_eq!(raw_acquire(&mut conn, &name, "other", 60, 0)[0], 0);
        let deadline = granted[2];
        until_server_ms(&mut conn, deadline);
        let renewed = raw_refresh(&mut conn, &name, &token, 60);
        assert!(
            renewed[0] == 0 || renewed[1] < deadline,
            "trial {trial}: the full form extended an expired lease: {renewed:?} (deadline {deadline})"
        );
    }
}

/// FINDING (same cause, release side): release.lua's fast path answers 1
/// ("the slot was still ours") for a short-form grant whose deadline has
/// passed, where the full form answers 0 ("it had expired"), and
/// inspect.lua, run in the same millisecond, says the name is not held.
///
/// Sequence: fast acquire with ttl 60 ms; wait until the server clock
/// reads the deadline; release. Observed: 1. Expected: 0.
#[test]
fn a_fast_release_at_the_deadline_reports_the_lease_expired() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let mut claimed = vec![];
    for trial in 0..40 {
        let name = format!("edge-release-{trial}");
        let token = format!("t{trial}");
        let granted = raw_acquire(&mut conn, &name, &token, 60, 0);
        assert_eq!(granted[0], 1);
        let deadline = granted[2];
        until_server_ms(&mut conn, deadline);
        let before = server_ms(&mut conn);
        let released = raw_release(&mut conn, &name, &token);
        if released == 1 && before >= deadline {
            claimed.push((trial, deadline, before));
        }
    }
    assert!(
        claimed.is_empty(),
        "releases sent after the lease deadline reported the slot still held \
         (trial, deadline ms, server ms before the release): {claimed:?}"
    );
}

// ---------------------------------------------------------------------
// Coverage: sequences mixing fast and slow paths that hold (passing)
// ---------------------------------------------------------------------

/// A fast holder, then a waiter queues (the name is spread), then the
/// holder releases: the waiter is woken at once (not after a recheck),
/// with a larger fencing token, and nothing but the fence is left.
#[test]
fn a_waiter_queued_behind_a_fast_holder_is_handed_the_lock_at_release() {
    let server = RedisServer::start();
    let holder = lock(&server, "fq", MS(5000));
    let guard = holder.acquire(None).unwrap();
    let first = guard.fencing_token();
    let mut conn = server.raw().unwrap();
    assert!(
        short_form(&mut conn, "fq").unwrap().split(' ').count() == 5,
        "short form"
    );
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let other = Lock::builder(url, "fq").ttl(MS(5000)).build().unwrap();
        let g = other.acquire(Some(MS(4000))).unwrap();
        let (t, at) = (g.fencing_token(), Instant::now());
        drop(g);
        (t, at)
    });
    eventually(MS(2000), "the waiter queues", || {
        redis::inspect(&server.url(), "fq").unwrap().waiters == 1
    });
    assert_eq!(short_form(&mut conn, "fq"), None, "spread");
    assert_eq!(shape(&mut conn, "fq").as_deref(), Some("1 1"), "spread");
    let released_at = Instant::now();
    assert!(guard.release().unwrap());
    let (second, woken_at) = waiter.join().unwrap();
    assert!(second > first);
    assert!(
        woken_at.duration_since(released_at) < MS(300),
        "woken late: {:?}",
        woken_at.duration_since(released_at)
    );
    eventually(MS(1000), "only the fence is left", || {
        leftovers(&server, "fq").is_empty()
    });
}

/// A fast-held WaitGroup slot, then wait() (watch.lua spreads the name and
/// registers a watcher), then done(): the waiter is told at once.
#[test]
fn wait_on_a_fast_held_slot_returns_at_its_done() {
    let server = RedisServer::start();
    let g = group(&server, "fw", 2, MS(5000));
    let token = g.add(None, &|| false).unwrap();
    let url = server.url();
    let waiter = std::thread::spawn(move || {
        let other = WaitGroup::builder(url, "fw", 2).build().unwrap();
        let idle = other.wait(Some(MS(4000))).unwrap();
        (idle, Instant::now())
    });
    eventually(MS(2000), "the watcher registers", || {
        server.keys().contains(&"lockyard:{fw}:watchers".to_owned())
    });
    let done_at = Instant::now();
    assert!(g.done(&token).unwrap());
    let (idle, at) = waiter.join().unwrap();
    assert!(idle);
    assert!(at.duration_since(done_at) < MS(300), "told late");
    eventually(MS(1000), "only the fence is left", || {
        leftovers(&server, "fw").is_empty()
    });
}

/// A fast-held slot whose holder vanishes (raw acquire, never refreshed):
/// wait() is told the name is idle once the lease runs out.
#[test]
fn wait_on_a_fast_slot_that_runs_out_returns() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let granted: Vec<i64> = invoke(
        &mut conn,
        &acquire_script(),
        "fx",
        2,
        0,
        &["crashed", "400", "0", "2000", "", "2"],
    );
    assert_eq!(granted[0], 1);
    let g = group(&server, "fx", 2, MS(5000));
    let started = Instant::now();
    assert!(g.wait(Some(MS(3000))).unwrap());
    assert!(started.elapsed() < MS(1500), "{:?}", started.elapsed());
    eventually(MS(3000), "only the fence is left", || {
        leftovers(&server, "fx").is_empty()
    });
}

/// try_acquire against a fast holder fails (spreading the name), and after
/// the release (now on the slow path) only the fence is left.
#[test]
fn a_failed_try_against_a_fast_holder_leaves_nothing_behind() {
    let server = RedisServer::start();
    let a = lock(&server, "ft", MS(5000));
    let b = lock(&server, "ft", MS(5000));
    let guard = a.acquire(None).unwrap();
    assert!(b.try_acquire().unwrap().is_none());
    assert!(guard.healthy());
    assert!(guard.release().unwrap());
    assert!(leftovers(&server, "ft").is_empty(), "{:?}", server.keys());
    let again = b.try_acquire().unwrap().unwrap();
    drop(again);
    assert!(leftovers(&server, "ft").is_empty(), "{:?}", server.keys());
}

/// A Lock on a name a WaitGroup holds in the short form, and a WaitGroup of
/// another limit, are refused (acquire and adopt); the holder is untouched.
#[test]
fn kind_and_limit_mismatches_are_refused_against_the_short_form() {
    let server = RedisServer::start();
    let l = lock(&server, "fm-lock", MS(5000));
    let held = l.acquire(None).unwrap();
    let wg1 = group(&server, "fm-lock", 1, MS(5000));
    assert!(matches!(
        wg1.add(Duration::ZERO, &|| false),
        Err(Error::Config(_))
    ));
    assert!(held.healthy());
    drop(held);

    let g2 = group(&server, "fm-group", 2, MS(5000));
    let token = g2.add(None, &|| false).unwrap();
    let g3 = group(&server, "fm-group", 3, MS(5000));
    assert!(matches!(
        g3.add(Duration::ZERO, &|| false),
        Err(Error::Config(_))
    ));
    assert!(matches!(g3.adopt(&token), Err(Error::Config(_))));
    let l2 = lock(&server, "fm-group", MS(5000));
    assert!(matches!(l2.try_acquire(), Err(Error::Config(_))));
    assert!(g2.healthy(&token));
    assert_eq!(g2.count().unwrap(), 1);
    assert!(g2.done(&token).unwrap());
    assert!(
        leftovers(&server, "fm-group").is_empty(),
        "{:?}",
        server.keys()
    );
}

/// A WaitGroup of limit 2 mixing fast and slow grants from many threads
/// never has more than 2 slots at once.
#[test]
fn a_group_mixing_fast_and_slow_grants_stays_within_its_limit() {
    let server = RedisServer::start();
    let inside = Arc::new(AtomicU32::new(0));
    let over = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (url, inside, over) = (server.url(), inside.clone(), over.clone());
            std::thread::spawn(move || {
                let g = WaitGroup::builder(url, "fl", 2)
                    .ttl(MS(3000))
                    .build()
                    .unwrap();
                for _ in 0..25 {
                    let token = g.add(Some(MS(10_000)), &|| false).unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) >= 2 {
                        over.store(true, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_micros(300));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(g.done(&token).unwrap());
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert!(!over.load(Ordering::SeqCst), "more than 2 slots at once");
    eventually(MS(3000), "only the fence is left", || {
        leftovers(&server, "fl").is_empty()
    });
}

/// Fencing tokens strictly increase across fast grants, slow grants,
/// handoffs and a fast key that ran out.
#[test]
fn fencing_tokens_increase_across_fast_and_slow_grants() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let a = lock(&server, "ff", MS(3000));
    let mut last = a.acquire(None).unwrap().fencing_token(); // fast, released
    let g = a.acquire(None).unwrap(); // fast
    assert!(g.fencing_token() > last);
    last = g.fencing_token();
    let b = lock(&server, "ff", MS(3000));
    assert!(b.try_acquire().unwrap().is_none()); // spread
    drop(g); // slow release
    let g = b.acquire(None).unwrap(); // the name is idle again: fast
    assert!(g.fencing_token() > last);
    last = g.fencing_token();
    drop(g);
    let granted = raw_acquire(&mut conn, "ff", "lapsing", 100, 0);
    assert!(granted[1] as u64 > last);
    last = granted[1] as u64;
    std::thread::sleep(MS(200)); // the short form runs out
    let g = a.acquire(None).unwrap();
    assert!(g.fencing_token() > last);
}

/// A fast holder's short form expires (its holder vanished); a session lock
/// with a lock_delay then takes the name; that session is lost: a plain
/// lock is barred until the delay ends (the holders set kept for the delay
/// keeps the fast path shut), then takes the name with a larger fence.
#[test]
fn a_lost_session_s_lock_delay_bars_a_plain_lock_after_a_fast_grant_ran_out() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    assert_eq!(raw_acquire(&mut conn, "fd", "vanished", 150, 0)[0], 1);
    std::thread::sleep(MS(250));
    let session = Session::builder(server.url())
        .ttl(MS(400))
        .behavior(Behavior::Delete)
        .lock_delay(MS(1500))
        .build()
        .unwrap();
    let under = Lock::builder(server.url(), "fd")
        .session(&session)
        .build()
        .unwrap();
    let guard = under
        .try_acquire()
        .unwrap()
        .expect("free after the fast key ran out");
    let fence = guard.fencing_token();
    // Lose the session: its key vanishes, its renewal stops.
    let _: () = ::redis::cmd("DEL")
        .arg(format!("lockyard:session:{{{}}}", session.id()))
        .query(&mut conn)
        .unwrap();
    eventually(MS(2000), "the session notices", || !session.healthy());
    let lost_at = Instant::now();
    std::mem::forget(guard);
    let plain = lock(&server, "fd", MS(2000));
    // The grant runs out within its 400 ms ttl, then the delay bars 1.5 s.
    std::thread::sleep(MS(700));
    assert!(
        plain.try_acquire().unwrap().is_none(),
        "lock_delay not enforced"
    );
    let took = plain.acquire(Some(MS(4000))).unwrap();
    assert!(
        lost_at.elapsed() >= MS(1300),
        "free before the delay: {:?}",
        lost_at.elapsed()
    );
    assert!(took.fencing_token() > fence);
}

/// A fast-granted token whose acquire reply was lost: the retried acquire
/// of the same token gets the same grant (one holder, same fence); a
/// cancel of it (with a tombstone) frees the name and refuses a late copy
/// of the acquire; another caller then gets a larger fence, and nothing but
/// the fence and the tombstone is left.
#[test]
fn a_retried_then_cancelled_fast_grant_is_one_grant_and_leaves_nothing() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let first = raw_acquire(&mut conn, "fr", "tok", 5000, 2000);
    assert_eq!(first[0], 1);
    let retried = raw_acquire(&mut conn, "fr", "tok", 5000, 2000);
    assert_eq!(retried[0], 1);
    assert_eq!(retried[1], first[1], "same grant, same fence");
    assert_eq!(server.holders("fr").len(), 1);
    let returned: i64 = invoke(&mut conn, &cancel_script(), "fr", 1, 0, &["tok", "60000"]);
    assert_eq!(returned, 1);
    let late = raw_acquire(&mut conn, "fr", "tok", 5000, 2000);
    assert_eq!(late[0], 0, "a late acquire of a cancelled token is refused");
    assert!(server.holders("fr").is_empty());
    assert!(leftovers(&server, "fr").is_empty(), "{:?}", server.keys());
    let other = raw_acquire(&mut conn, "fr", "other", 5000, 0);
    assert_eq!(other[0], 1);
    assert!(other[1] > first[1]);
    assert_eq!(raw_release(&mut conn, "fr", "other"), 1);
    assert!(leftovers(&server, "fr").is_empty(), "{:?}", server.keys());
}

/// A cancel that reaches the server before the fast acquire it gives up
/// on (a delayed request): the tombstone keeps the fast path shut.
#[test]
fn a_cancel_before_its_fast_acquire_leaves_the_name_free() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let _: i64 = invoke(&mut conn, &cancel_script(), "fc", 1, 0, &["tok", "60000"]);
    let late = raw_acquire(&mut conn, "fc", "tok", 5000, 0);
    assert_eq!(late[0], 0);
    let count: Vec<i64> = invoke(&mut conn, &inspect_script(), "fc", 1, 0, &[""]);
    assert_eq!(count[0], 0);
    assert!(leftovers(&server, "fc").is_empty(), "{:?}", server.keys());
}

/// A slot taken on the fast path and adopted by another process: the adder
/// learns (at its next refresh) that it no longer keeps it, the adopter
/// keeps it past the ttl, done() there frees it and leaves only the fence.
#[test]
fn adopting_a_fast_slot_moves_it_to_the_adopter() {
    let server = RedisServer::start();
    let adder = group(&server, "fa", 1, MS(900));
    let token = adder.add(None, &|| false).unwrap();
    let fence = adder.fencing_token(&token).unwrap();
    let worker = group(&server, "fa", 1, MS(900));
    assert!(worker.adopt(&token).unwrap());
    assert_eq!(worker.fencing_token(&token), Some(fence));
    eventually(MS(2000), "the adder lets go", || !adder.healthy(&token));
    std::thread::sleep(MS(1200));
    assert!(worker.healthy(&token), "the adopter keeps it alive");
    assert_eq!(worker.count().unwrap(), 1);
    let third = group(&server, "fa", 1, MS(900));
    assert!(!third.adopt(&token).unwrap(), "a slot has one adopter");
    assert!(worker.done(&token).unwrap());
    assert!(leftovers(&server, "fa").is_empty(), "{:?}", server.keys());
}

/// done() of a fast-held slot from another process frees it (fast
/// release); the adder's refresher then finds it lost.
#[test]
fn done_from_elsewhere_on_a_fast_slot_turns_the_adder_unhealthy() {
    let server = RedisServer::start();
    let adder = group(&server, "fo", 1, MS(900));
    let token = adder.add(None, &|| false).unwrap();
    let other = group(&server, "fo", 1, MS(900));
    assert!(other.done(&token).unwrap());
    eventually(MS(2000), "the adder notices", || !adder.healthy(&token));
    assert!(leftovers(&server, "fo").is_empty(), "{:?}", server.keys());
}

/// Admin inspect reads the short form without writing; force_release
/// removes the fast holder, which turns unhealthy at its next refresh; the
/// next grant gets a larger fence, and only the fence is left after it.
#[test]
fn inspect_and_force_release_of_a_fast_holder() {
    let server = RedisServer::start();
    let a = lock(&server, "fadm", MS(900));
    let guard = a.acquire(None).unwrap();
    let mut conn = server.raw().unwrap();
    let before = short_form(&mut conn, "fadm").unwrap();
    let state = redis::inspect(&server.url(), "fadm").unwrap();
    assert_eq!(state.holders.len(), 1);
    assert_eq!(state.holders[0].fencing_token, guard.fencing_token());
    assert!(state.holders[0].expires_in <= MS(900));
    assert_eq!(state.limit, Some(1));
    assert_eq!(state.waiters, 0);
    assert_eq!(
        short_form(&mut conn, "fadm").unwrap(),
        before,
        "inspect wrote nothing"
    );
    assert_eq!(redis::force_release(&server.url(), "fadm").unwrap(), 1);
    assert!(redis::inspect(&server.url(), "fadm")
        .unwrap()
        .holders
        .is_empty());
    eventually(MS(2000), "the holder notices", || !guard.healthy());
    let b = lock(&server, "fadm", MS(900));
    let next = b.try_acquire().unwrap().unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(!guard.release().unwrap(), "lost before its release");
    assert!(next.healthy());
    drop(next);
    assert!(leftovers(&server, "fadm").is_empty(), "{:?}", server.keys());
}

/// holder() of a name fast-held by a plain lock: held, no value; a value a
/// "release" session left behind keeps the fast path shut (the next grant
/// must clear it), so holder() never shows a stale value for a new holder.
#[test]
fn holder_and_a_left_value_around_the_fast_path() {
    let server = RedisServer::start();
    let session = Session::builder(server.url())
        .ttl(MS(3000))
        .behavior(Behavior::Release)
        .build()
        .unwrap();
    let under = Lock::builder(server.url(), "fv")
        .session(&session)
        .value("old-leader")
        .build()
        .unwrap();
    drop(under.acquire(None).unwrap());
    assert_eq!(
        redis::holder(&server.url(), "fv").unwrap().as_deref(),
        Some("old-leader")
    );
    let plain = lock(&server, "fv", MS(3000));
    let g = plain.acquire(None).unwrap();
    assert_eq!(redis::holder(&server.url(), "fv").unwrap(), None);
    drop(g);
    assert_eq!(redis::holder(&server.url(), "fv").unwrap(), None);
    let g = plain.acquire(None).unwrap();
    assert_eq!(redis::holder(&server.url(), "fv").unwrap(), None);
    assert!(plain.locked().unwrap());
    drop(g);
    assert!(!plain.locked().unwrap());
    session.destroy().unwrap();
}

/// Refreshes of a fast holder racing tries of other callers that spread
/// the name: the holder stays healthy and alone for several ttls.
#[test]
fn refreshes_racing_spreads_keep_one_healthy_holder() {
    let server = RedisServer::start();
    let a = Lock::builder(server.url(), "frace")
        .ttl(MS(300))
        .refresh_interval(MS(20))
        .build()
        .unwrap();
    let guard = a.acquire(None).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let pokers: Vec<_> = (0..2)
        .map(|_| {
            let (url, stop) = (server.url(), stop.clone());
            std::thread::spawn(move || {
                let b = Lock::builder(url, "frace").ttl(MS(300)).build().unwrap();
                let mut got = 0;
                while !stop.load(Ordering::SeqCst) {
                    if b.try_acquire().unwrap().is_some() {
                        got += 1;
                    }
                }
                got
            })
        })
        .collect();
    std::thread::sleep(MS(1500));
    stop.store(true, Ordering::SeqCst);
    let stolen: u32 = pokers.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(stolen, 0, "another caller was granted the held lock");
    assert!(guard.healthy());
    assert!(guard.release().unwrap());
}

/// A fast holder's lease runs out (the process stalls): a waiter queued
/// behind it is granted soon after the deadline (not stuck), and the old
/// holder reports the lock lost.
#[test]
fn a_waiter_behind_a_fast_holder_that_runs_out_is_granted() {
    let server = RedisServer::start();
    let mut conn = server.raw().unwrap();
    let granted = raw_acquire(&mut conn, "fs", "stalled", 400, 0);
    assert_eq!(granted[0], 1);
    let b = lock(&server, "fs", MS(2000));
    let started = Instant::now();
    let g = b.acquire(Some(MS(3000))).unwrap();
    assert!(started.elapsed() < MS(1000), "{:?}", started.elapsed());
    assert!(g.fencing_token() as i64 > granted[1]);
    let renewed = raw_refresh(&mut conn, "fs", "stalled", 400);
    assert_eq!(renewed[0], 0, "the stalled holder finds its lease lost");
    assert_eq!(raw_release(&mut conn, "fs", "stalled"), 0);
    assert!(g.healthy());
}

/// A plain lock holds an election's name on the fast path; a campaign
/// queues behind it (spreading the name) and wins at the release: the
/// leader is reported, its term is recorded with a fence larger than the
/// plain holder's, and nobody is leader while the plain lock held it.
#[test]
fn a_campaign_behind_a_fast_plain_holder_wins_at_its_release() {
    let server = RedisServer::start();
    let url = server.url();
    let plain = lock(&server, "fel", MS(3000));
    let guard = plain.acquire(None).unwrap();
    let session = Session::builder(url.clone()).ttl(MS(3000)).build().unwrap();
    let candidate = redis::Election::new(&url, "fel", &session).unwrap();
    assert_eq!(
        candidate.leader().unwrap(),
        None,
        "a plain holder has no value"
    );
    let won = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| candidate.campaign("c", Some(MS(3000))).unwrap());
        std::thread::sleep(MS(200));
        assert!(guard.healthy());
        let plain_fence = guard.fencing_token();
        assert!(guard.release().unwrap());
        (waiting.join().unwrap(), plain_fence)
    });
    assert!(won.0);
    assert!(candidate.fencing_token().unwrap() > won.1);
    assert_eq!(candidate.leader().unwrap().as_deref(), Some("c"));
    candidate.resign().unwrap();
    session.destroy().unwrap();
}
