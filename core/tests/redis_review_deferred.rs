//! Review of 10203e1 ("redis holds: a lock's refresher starts when its
//! first refresh is due"): a hold's refresher now waits in a per-process
//! timetable (core/src/deferred.rs) that one dispatcher task on lockyard's
//! runtime thread serves. Findings first (tests that fail on 10203e1), then
//! coverage of sequences suspected and found correct.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lockyard::redis::{Lock, WaitGroup};
use support::fork::{answer_parent, child_answer, pipe};
use support::{eventually, RedisServer, StallProxy};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock_with(server_url: &str, name: &str, ttl: Duration, every: Option<Duration>) -> Lock {
    let mut builder = Lock::builder(server_url, name).ttl(ttl);
    if let Some(every) = every {
        builder = builder.refresh_interval(every);
    }
    builder.build().unwrap()
}

// ---------------------------------------------------------------- fork

/// Forks a child that tries `lock` once and tells what it got: "acquired",
/// or the error; None if it had not ended within 5 s.
fn child_tries(lock: &Lock) -> Option<String> {
    let fds = pipe();
    // SAFETY: the child only runs lockyard calls and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let answer = match lock.try_acquire() {
            Ok(Some(guard)) => {
                drop(guard);
                "acquired".to_owned()
            }
            other => format!("{:?}", other.map(|g| g.is_some())),
        };
        answer_parent(fds, &answer);
    }
    child_answer(pid, fds, Duration::from_secs(5))
}

/// FINDING 1: a child forked while lockyard's runtime thread is inside the
/// timetable's lock hangs for good at its first acquire.
///
/// The dispatcher (`deferred::dispatch`) takes the static `TIMETABLE`
/// mutex on lockyard's runtime thread every time a hold's first refresh
/// falls due, and starts the due refreshers while holding it. `fork()`
/// copies only the forking thread: a child forked while the runtime
/// thread held that mutex inherits it locked with no thread left to
/// unlock it, and `spawn_at` locks it *before* it looks at the pid (to
/// start the child's own timetable). So the child's first acquire that
/// succeeds blocks forever in `Hold::keep` → `deferred::spawn_at` →
/// `timetable()`. Before 10203e1 the runtime thread took no lock an
/// acquire needs (each hold spawned its own refresher), and the README
/// promises "After `fork()` the child starts fresh"; the Python binding
/// already guards its log queue with `pthread_atfork` against exactly this
/// (bindings-python/src/logging.rs, test_logging_fork.py).
///
/// Sequence: one thread (the test's; a single-threaded Python/Ruby
/// pre-forking server) holds locks refreshed every 2 ms, re-acquiring a
/// few before each fork so that first refreshes keep falling due; it forks
/// again and again, each child acquiring a lock of its own and exiting.
/// Expected: every child acquires and exits. Observed on 10203e1: a child
/// hangs (gdb: its only thread in `futex_wait` under
/// `deferred::timetable` ← `spawn_at` ← `Hold::keep`), typically within
/// 20–120 forks (5–10 s; the test forks for 12 s). The same test on
/// 10203e1^ forked 5950 children in 40 s, none hung. Fixed by holding the
/// timetable and the runtime across fork (`runtime::held_across_fork`).
#[test]
fn a_child_forked_while_refreshers_fall_due_can_still_acquire() {
    let server = RedisServer::start();
    let url = server.url();
    let held: Vec<Lock> = (0..12)
        .map(|i| lock_with(&url, &format!("parent-{i}"), MS(2000), Some(MS(2))))
        .collect();
    let child_lock = lock_with(&url, "child", MS(2000), None);
    let mut guards: Vec<_> = held
        .iter()
        .map(|l| Some(l.acquire(None).unwrap()))
        .collect();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let started = Instant::now();
    let (mut forks, mut hung) = (0, 0);
    while started.elapsed() < Duration::from_secs(12) && hung == 0 {
        // A few holds renewed: their first refreshes fall due 2 ms from
        // now, while the next child is being forked.
        for i in 0..4 {
            let at = (forks * 4 + i) % held.len();
            drop(guards[at].take());
            guards[at] = Some(held[at].acquire(None).unwrap());
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_micros(seed % 3000));
        forks += 1;
        match child_tries(&child_lock) {
            None => hung += 1,
            Some(answer) => assert_eq!(answer, "acquired", "child {forks}"),
        }
    }
    eprintln!("{forks} children forked, {hung} hung");
    for guard in guards.into_iter().flatten() {
        assert!(guard.healthy(), "a parent's lock turned unhealthy");
    }
    assert_eq!(hung, 0, "a child forked after {forks} hung in its acquire");
}

/// FINDING 2 (same root cause as finding 1; a hazard that existed before,
/// widened by 10203e1): a child forked while another thread of the parent
/// takes or releases a lock hangs at its own first acquire, even on
/// another server and with the dispatcher idle.
///
/// `spawn_at` (every acquire) and `Deferred::drop` (every release before
/// the first refresh) hold the process-wide `TIMETABLE` mutex, the latter
/// while it also frees the refresh future; a fork from another thread in
/// that window leaves it locked in the child, whose first acquire then
/// waits on it forever (`spawn_at` locks before it checks the pid).
///
/// Sequence: a thread acquires and releases a lock on server A in a loop
/// (ttl 30 s: nothing is ever due, the dispatcher sleeps); the main thread
/// forks again and again, each child acquiring a lock on server B and
/// exiting. Expected: every child acquires and exits. Observed on 10203e1:
/// a child hangs within ~20 forks, in `deferred::timetable` ← `spawn_at` ←
/// `Hold::keep`. Before 10203e1 the same test hung too, but once in ~9000
/// forks (30 s of forking), on `runtime::RUNTIME` (which every acquire's
/// `runtime::spawn` locked for the clone of a handle): the change makes the
/// window hundreds of times wider. Passes once both are held across fork
/// (`runtime::held_across_fork`); the test forks for 10 s.
#[test]
fn a_child_forked_while_another_thread_acquires_can_still_acquire() {
    let (churned, forked) = (RedisServer::start(), RedisServer::start());
    let churn_lock = Arc::new(lock_with(
        &churned.url(),
        "churn",
        Duration::from_secs(30),
        None,
    ));
    drop(churn_lock.acquire(None).unwrap());
    let child_lock = lock_with(&forked.url(), "child", Duration::from_secs(30), None);
    drop(child_lock.acquire(None).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicUsize::new(0));
    let churn = {
        let (lock, stop, cycles) = (churn_lock.clone(), stop.clone(), cycles.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(lock.acquire(None).unwrap());
                cycles.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let started = Instant::now();
    let (mut forks, mut hung) = (0, 0);
    while started.elapsed() < Duration::from_secs(10) && hung == 0 {
        forks += 1;
        match child_tries(&child_lock) {
            None => hung += 1,
            Some(answer) => assert_eq!(answer, "acquired", "child {forks}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    eprintln!(
        "{forks} children forked, {hung} hung; {} acquire/release cycles meanwhile",
        cycles.load(Ordering::Relaxed)
    );
    assert_eq!(hung, 0, "a child forked after {forks} hung in its acquire");
}

// ------------------------------------------------------- coverage (pass)

/// The server's clock, in ms.
fn server_ms(server: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.raw().unwrap())
        .unwrap();
    s * 1000 + us / 1000
}

/// How long `name`'s lease has left on the server, in ms (negative: none).
fn left_ms(server: &RedisServer, name: &str) -> i64 {
    let now = server_ms(server) as i64;
    server
        .holders(name)
        .iter()
        .map(|(_, deadline)| *deadline as i64 - now)
        .max()
        .unwrap_or(-1)
}

/// Holds `guard` of `name` for `hold`, checking every few ms that it
/// stays healthy; at the end it must still be held on the server with a
/// lease extended since the acquire. Returns the first unhealthy moment.
fn held_throughout(
    server: &RedisServer,
    name: &str,
    healthy: impl Fn() -> bool,
    hold: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    while started.elapsed() < hold {
        if !healthy() {
            return Err(format!("{name} unhealthy after {:?}", started.elapsed()));
        }
        std::thread::sleep(MS(3));
    }
    let left = left_ms(server, name);
    if left <= 0 {
        return Err(format!(
            "{name}: no live lease on the server after {hold:?} ({left} ms)"
        ));
    }
    Ok(())
}

/// Many locks of different ttls and refresh intervals (30 ms ttl, a
/// refresh every 3 ms, up to a 30 s ttl) taken and released from eight
/// threads at once, each held for several of its refresh intervals: entries
/// added while the dispatcher sleeps toward a later or an earlier time,
/// removed before their time, many due in the same millisecond. Every hold
/// stays healthy and its lease live on the server while it is held.
#[test]
fn many_locks_of_many_leases_from_many_threads_stay_refreshed() {
    let server = Arc::new(RedisServer::start());
    let leases: [(u64, Option<u64>); 7] = [
        (30, None),
        (60, Some(5)),
        (120, None),
        (250, Some(40)),
        (700, None),
        (3_000, Some(900)),
        (30_000, None),
    ];
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (server, barrier) = (server.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let url = server.url();
                let locks: Vec<(String, Lock, u64)> = leases
                    .iter()
                    .enumerate()
                    .map(|(i, (ttl, every))| {
                        let name = format!("many-{t}-{i}");
                        let lock = lock_with(&url, &name, MS(*ttl), every.map(MS));
                        (name, lock, *ttl)
                    })
                    .collect();
                barrier.wait();
                for round in 0..3u64 {
                    // Short holds churn the timetable: added and removed
                    // before (or just as) their first refresh is due.
                    for (_, lock, ttl) in &locks {
                        let guard = lock.acquire(Some(MS(2000))).map_err(|e| e.to_string())?;
                        std::thread::sleep(MS((ttl / 9).min(20) + round));
                        drop(guard);
                    }
                    // Then all of them at once, for a while.
                    let guards = locks
                        .iter()
                        .map(|(_, lock, _)| lock.acquire(Some(MS(2000))))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| e.to_string())?;
                    let started = Instant::now();
                    while started.elapsed() < MS(400) {
                        for ((name, _, _), guard) in locks.iter().zip(&guards) {
                            if !guard.healthy() {
                                return Err(format!(
                                    "{name} unhealthy {:?} into round {round}: {:?}",
                                    started.elapsed(),
                                    guard.check_health().err()
                                ));
                            }
                        }
                        std::thread::sleep(MS(2));
                    }
                    for (name, _, _) in &locks {
                        let left = left_ms(&server, name);
                        if left <= 0 {
                            return Err(format!("{name}: lease gone on the server ({left} ms)"));
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    let failed: Vec<String> = threads
        .into_iter()
        .filter_map(|t| t.join().unwrap().err())
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

/// A lock with a 30 s ttl puts the dispatcher to sleep toward its first
/// refresh 3.3 s away; a lock with a 150 ms ttl taken next is due in 17 ms
/// and must wake it (spawn_at's `at < looks_at`). The long one is then
/// released before its time (the entry the dispatcher would sleep toward
/// removed, `looks_at` left stale) and a 300 ms one taken, due later than
/// the stale `looks_at`: no wake, the dispatcher must find it at its next
/// look. Both short ones stay refreshed for a second.
#[test]
fn entries_sooner_and_later_than_the_dispatchers_next_look_start_on_time() {
    let server = RedisServer::start();
    let url = server.url();
    let long = lock_with(&url, "long", Duration::from_secs(30), None);
    let short = lock_with(&url, "short", MS(150), None);
    let later = lock_with(&url, "later", MS(300), None);
    let held_long = long.acquire(None).unwrap();
    let held_short = short.acquire(None).unwrap();
    held_throughout(&server, "short", || held_short.healthy(), MS(600)).unwrap();
    // A short entry added and removed before its time: the dispatcher
    // sleeps toward a time nothing is due at.
    let brief = lock_with(&url, "brief", MS(150), None);
    drop(brief.acquire(None).unwrap());
    drop(held_long);
    let held_later = later.acquire(None).unwrap();
    held_throughout(
        &server,
        "later",
        || held_later.healthy(),
        Duration::from_secs(1),
    )
    .unwrap();
    assert!(held_short.healthy());
}

/// A 50 ms ttl (a refresh every 5.6 ms, the first one started by the
/// dispatcher) held for a second, three times: healthy all along, alive on
/// the server. (A 30 ms version failed once in ~16 runs of the file while
/// another session loaded the 2-core machine and never again in 30; with
/// ~25 ms of slack a scheduling stall alone can lapse it, so it was not
/// counted as a finding; 30 ms ttls stay in the many-locks test.)
#[test]
fn a_50ms_lease_held_for_a_second_stays_healthy() {
    let server = RedisServer::start();
    let lock = lock_with(&server.url(), "tiny", MS(50), None);
    for _ in 0..3 {
        let guard = lock.acquire(None).unwrap();
        held_throughout(&server, "tiny", || guard.healthy(), Duration::from_secs(1)).unwrap();
        assert!(guard.release().unwrap(), "released while lost");
    }
}

/// Holds released at every moment around their first refresh (before the
/// dispatcher starts the refresher, as it does, and after), from four
/// threads, each lock taken again at once by the same Lock object: the
/// new hold is healthy and kept alive; once every hold is released no
/// refresh is ever sent again (no refresher survives its hold's drop).
#[test]
fn holds_dropped_around_their_first_refresh_leave_no_refresher_behind() {
    let server = Arc::new(RedisServer::start());
    let url = server.url();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (url, server) = (url.clone(), server.clone());
            std::thread::spawn(move || {
                let name = format!("churn-{t}");
                // ttl 90 ms: the first refresh is due 10 ms after the grant.
                let lock = lock_with(&url, &name, MS(90), None);
                for i in 0..120u64 {
                    let guard = lock.acquire(None).unwrap();
                    std::thread::sleep(Duration::from_micros(8_000 + (i * 37 % 4_000)));
                    assert!(guard.healthy(), "{name} round {i}");
                    drop(guard);
                }
                let guard = lock.acquire(None).unwrap();
                held_throughout(&server, &name, || guard.healthy(), MS(500)).unwrap();
            })
        })
        .collect();
    // All joined before any failure is raised: no thread outlives the
    // test with a handle on the server.
    let joined: Vec<_> = threads.into_iter().map(|t| t.join()).collect();
    joined.into_iter().for_each(|j| j.unwrap());
    let calls = || -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut server.raw().unwrap())
            .unwrap();
        info.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    std::thread::sleep(MS(200));
    let before = calls();
    std::thread::sleep(MS(500));
    assert_eq!(
        calls(),
        before,
        "scripts still run after every hold was released"
    );
    assert_eq!(
        server
            .keys()
            .iter()
            .filter(|k| !k.ends_with(":fence"))
            .count(),
        0,
        "{:?}",
        server.keys()
    );
}

/// A WaitGroup slot and a lock taken with the async twins on the caller's
/// runtime, and a lock taken with the blocking API inside it: all kept
/// alive for several ttls by refreshers the dispatcher starts.
#[test]
fn holds_taken_inside_a_tokio_runtime_and_with_the_async_twins_stay_refreshed() {
    let server = RedisServer::start();
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let lock = lock_with(&url, "async-lock", MS(150), None);
    let blocking = lock_with(&url, "blocking-in-tokio", MS(150), None);
    let group = WaitGroup::builder(url.as_str(), "async-group", 2)
        .ttl(MS(150))
        .build()
        .unwrap();
    runtime.block_on(async {
        let guard = lock.acquire_async(None).await.unwrap();
        let slot = group.acquire_async(None).await.unwrap();
        let plain = blocking.acquire(None).unwrap();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(1) {
            assert!(
                guard.healthy(),
                "async lock unhealthy at {:?}",
                started.elapsed()
            );
            assert!(
                plain.healthy(),
                "blocking lock unhealthy at {:?}",
                started.elapsed()
            );
            slot.check_health().unwrap();
            tokio::time::sleep(MS(5)).await;
        }
        assert!(left_ms(&server, "async-lock") > 0);
        assert!(left_ms(&server, "blocking-in-tokio") > 0);
        assert!(left_ms(&server, "async-group") > 0);
        drop(plain);
        drop(slot);
        assert!(guard.release_async().await.unwrap());
    });
}

/// The network goes silent right after the grant, before the dispatcher
/// started the refresher: the hold turns unhealthy by its ttl (and not
/// while refreshes still land); when it speaks again a new hold of the same
/// Lock object is healthy.
#[test]
fn a_hold_whose_first_refresh_never_lands_turns_unhealthy_by_its_ttl() {
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    let lock = lock_with(&proxy.url(), "silent", MS(600), None);
    let guard = lock.acquire(None).unwrap();
    held_throughout(&server, "silent", || guard.healthy(), MS(400)).unwrap();
    drop(guard);
    let guard = lock.acquire(None).unwrap();
    let granted = Instant::now();
    proxy.silence_all();
    eventually(MS(1500), "the silenced hold turns unhealthy", || {
        !guard.healthy()
    });
    assert!(
        granted.elapsed() < MS(700),
        "unhealthy only after {:?}",
        granted.elapsed()
    );
    assert!(guard.check_health().is_err());
    proxy.speak();
    drop(guard);
    eventually(MS(2000), "the lease runs out", || {
        left_ms(&server, "silent") <= 0
    });
    let again = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    held_throughout(&server, "silent", || again.healthy(), MS(1500)).unwrap();
}

/// A child forked while its parent holds locks: the child's own locks are
/// refreshed in the child (its own timetable and dispatcher), the guard it
/// inherited and drops frees nothing, and the parent's locks stay
/// refreshed in the parent.
#[test]
fn a_forked_childs_locks_and_its_parents_are_each_refreshed_in_their_process() {
    let server = RedisServer::start();
    let url = server.url();
    let parents = lock_with(&url, "in-parent", MS(200), None);
    let childs = lock_with(&url, "in-child", MS(200), None);
    let held = parents.acquire(None).unwrap();
    // A pending entry (due later than anything the child adds) and a
    // started one in the parent's timetable when it forks.
    let pending = lock_with(&url, "pending", Duration::from_secs(30), None);
    let pending_held = pending.acquire(None).unwrap();
    std::thread::sleep(MS(100));
    let fds = pipe();
    // SAFETY: the child only runs lockyard calls and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let answer = (|| -> Result<String, String> {
            drop(held);
            drop(pending_held);
            let guard = childs.acquire(Some(MS(2000))).map_err(|e| e.to_string())?;
            let started = Instant::now();
            while started.elapsed() < MS(1000) {
                if !guard.healthy() {
                    return Err(format!("child's lock unhealthy at {:?}", started.elapsed()));
                }
                std::thread::sleep(MS(5));
            }
            Ok(format!("{}", guard.release().map_err(|e| e.to_string())?))
        })();
        answer_parent(fds, &format!("{answer:?}"));
    }
    let started = Instant::now();
    while started.elapsed() < MS(700) {
        assert!(
            held.healthy(),
            "parent's lock unhealthy at {:?}",
            started.elapsed()
        );
        assert!(
            left_ms(&server, "in-parent") > 0,
            "the child freed the parent's lock"
        );
        assert!(
            left_ms(&server, "pending") > 0,
            "the child freed the parent's pending lock"
        );
        std::thread::sleep(MS(10));
    }
    let answer = child_answer(pid, fds, Duration::from_secs(10)).expect("the child hung");
    assert_eq!(answer, "Ok(\"true\")");
    held_throughout(&server, "in-parent", || held.healthy(), MS(500)).unwrap();
    assert!(pending_held.healthy());
}
