//! Review of e57cda5 ("redis: held slots wait in one refresh schedule per
//! process, as records, not tasks"): a held slot kept alive outside a
//! session is a record in the per-process schedule
//! (core/src/redis/schedule.rs), refreshed by one dispatcher in pipelines
//! per node. One finding (`a_handed_over_slot_survives_a_stuck_background_connection`,
//! which fails on e57cda5); every other test is coverage of a sequence
//! suspected and found correct, and says what it checks.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockyard::redis::{Lock, WaitGroup};
use support::fork::{answer_parent, child_answer, pipe};
use support::{eventually, RedisCluster, RedisServer, StallProxy};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock_with(url: &str, name: &str, ttl: Duration, every: Option<Duration>) -> Lock {
    let mut builder = Lock::builder(url, name).ttl(ttl);
    if let Some(every) = every {
        builder = builder.refresh_interval(every);
    }
    builder.build().unwrap()
}

// ------------------------------------------------------------ safety

/// Checks: a holder is never reported healthy while another client holds
/// the same lock. Tiny leases (15 ms default interval, 25 ms refreshed
/// every 7 ms, 40 ms every 3 ms, 60 ms every 1 ms) refreshed by the
/// schedule while a rival client keeps trying them: whenever the rival
/// gets one, the holder's health (read after the rival's grant, with a
/// 2 ms allowance for Redis' millisecond expiry) must already be false.
/// The health is extended from the send time of the refresh, never from
/// its answer.
#[test]
fn a_holder_is_never_healthy_while_a_rival_holds_its_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let leases: [(u64, Option<u64>); 4] = [(15, None), (25, Some(7)), (40, Some(3)), (60, Some(1))];
    let mine: Vec<Lock> = leases
        .iter()
        .enumerate()
        .map(|(i, (ttl, every))| lock_with(&url, &format!("tiny-{i}"), MS(*ttl), every.map(MS)))
        .collect();
    let rivals: Vec<Lock> = leases
        .iter()
        .enumerate()
        .map(|(i, (ttl, _))| lock_with(&url, &format!("tiny-{i}"), MS(*ttl), None))
        .collect();
    let guards: Vec<_> = mine.iter().map(|l| l.acquire(None).unwrap()).collect();
    let started = Instant::now();
    let mut rival_got = [0u32; 4];
    let mut unhealthy_while_rival = 0;
    while started.elapsed() < MS(1500) {
        for (i, rival) in rivals.iter().enumerate() {
            if let Some(theirs) = rival.try_acquire().unwrap() {
                rival_got[i] += 1;
                std::thread::sleep(MS(2));
                if guards[i].healthy() {
                    unhealthy_while_rival += 1;
                }
                drop(theirs);
            }
        }
    }
    eprintln!("rival grants per lease: {rival_got:?}");
    assert_eq!(
        unhealthy_while_rival, 0,
        "a holder was healthy while a rival held its lock"
    );
    // Not timing-critical: most of them must have been kept.
    assert!(
        rival_got.iter().filter(|&&n| n == 0).count() >= 2,
        "the schedule kept too few tiny leases: {rival_got:?}"
    );
}

/// Checks: a lease is never reported healthy past what the server granted
/// when the network goes silent (every byte swallowed), or when only the
/// replies are lost (the refresh runs on the server, the holder never
/// learns of it): the holder turns unhealthy no later than a ttl after
/// the silence began, and is marked lost once `max_refresh_fails`
/// refreshes in a row failed.
#[test]
fn a_silent_network_never_leaves_a_holder_healthy_past_its_lease() {
    let server = RedisServer::start();
    for replies_only in [false, true] {
        let proxy = StallProxy::start(server.port);
        let name = format!("silent-{replies_only}");
        let ttl = MS(600);
        let lock = lock_with(&proxy.url(), &name, ttl, None);
        let guard = lock.acquire(None).unwrap();
        // A few refreshes first, so the schedule is in its stride.
        std::thread::sleep(MS(250));
        guard.check_health().unwrap();
        let silenced = Instant::now();
        if replies_only {
            proxy.silence_replies();
        } else {
            proxy.silence_all();
        }
        while guard.healthy() {
            assert!(
                silenced.elapsed() < ttl,
                "healthy {:?} after the network went silent, ttl {ttl:?}",
                silenced.elapsed()
            );
            std::thread::sleep(MS(1));
        }
        eventually(MS(4000), "the hold is marked lost", || {
            guard
                .check_health()
                .is_err_and(|e| e.to_string().contains("in a row"))
        });
        // Its lease ran out on the server: a rival takes it.
        let rival = lock_with(&server.url(), &name, ttl, None);
        eventually(MS(2000), "a rival takes the lost lock", || {
            rival.try_acquire().unwrap().is_some()
        });
        assert!(!guard.healthy());
        proxy.speak();
        std::mem::forget(guard);
    }
}

// ------------------------------------------------------------ timing

/// Checks: records are refreshed about once per refresh period, neither
/// far too often nor too late, whatever the period (odd explicit
/// intervals, a 1 ms interval, the default of a 2 s ttl) and whatever
/// was in the schedule before: each lock is taken after a 30 s lease
/// whose first refresh lies far ahead (the dispatcher sleeps toward it and
/// must be woken for every earlier record).
#[test]
fn each_lease_is_refreshed_about_once_per_period() {
    // One server per lock, to count each one's refreshes.
    let far = RedisServer::start();
    let far_lock = lock_with(&far.url(), "far", Duration::from_secs(30), None);
    let _far_guard = far_lock.acquire(None).unwrap();
    // (ttl, interval, expected refreshes per second)
    let cases: [(u64, Option<u64>, f64); 4] = [
        (2000, None, 1000.0 / 222.2),
        (2000, Some(37), 1000.0 / 37.0),
        (900, Some(101), 1000.0 / 101.0),
        (10_000, Some(1), 1000.0),
    ];
    let servers: Vec<RedisServer> = cases.iter().map(|_| RedisServer::start()).collect();
    let locks: Vec<Lock> = cases
        .iter()
        .zip(&servers)
        .map(|((ttl, every, _), server)| lock_with(&server.url(), "timed", MS(*ttl), every.map(MS)))
        .collect();
    let guards: Vec<_> = locks.iter().map(|l| l.acquire(None).unwrap()).collect();
    let before: Vec<u64> = servers.iter().map(RedisServer::evalsha_calls).collect();
    let started = Instant::now();
    std::thread::sleep(MS(1200));
    let after: Vec<u64> = servers.iter().map(RedisServer::evalsha_calls).collect();
    let secs = started.elapsed().as_secs_f64();
    for (i, (ttl, every, per_sec)) in cases.iter().enumerate() {
        let seen = (after[i] - before[i]) as f64;
        let expected = per_sec * secs;
        eprintln!("ttl {ttl} every {every:?}: {seen} refreshes, ~{expected:.0} expected");
        guards[i].check_health().unwrap();
        // At most a quarter period early (the grid), and never skipped.
        assert!(
            seen <= expected * 1.4 + 2.0,
            "ttl {ttl} every {every:?}: {seen} refreshes in {secs:.2} s, too often"
        );
        let least = if *every == Some(1) { 0.25 } else { 0.7 };
        assert!(
            seen >= expected * least - 2.0,
            "ttl {ttl} every {every:?}: {seen} refreshes in {secs:.2} s, too few"
        );
    }
}

/// Checks: a slot handed over to a waiter (it lasts only the 2 s handoff
/// window until its first refresh) is refreshed at once by the schedule,
/// off the grid, even with a ttl whose period is longer than the window,
/// and stays held well past the window; the giver's record is gone.
#[test]
fn a_handed_over_slot_is_taken_up_within_the_handoff_window() {
    let server = RedisServer::start();
    let url = server.url();
    // Period 2.2 s: a first refresh on the grid would come after the
    // handoff window closed.
    let ttl = Duration::from_secs(20);
    let group = Arc::new(
        WaitGroup::builder(url.as_str(), "handoff", 1)
            .ttl(ttl)
            .build()
            .unwrap(),
    );
    let first = group.add(Some(MS(1000)), &|| false).unwrap();
    let waiter = {
        let group = group.clone();
        std::thread::spawn(move || {
            let token = group.add(Some(MS(5000)), &|| false).unwrap();
            let got = Instant::now();
            std::thread::sleep(MS(2600));
            let healthy = group.healthy(&token);
            (token, got, healthy)
        })
    };
    std::thread::sleep(MS(200));
    assert!(group.done(&first).unwrap());
    let (token, _got, healthy) = waiter.join().unwrap();
    assert!(healthy, "the handed-over slot turned unhealthy");
    let rival = WaitGroup::builder(url.as_str(), "handoff", 1)
        .ttl(ttl)
        .build()
        .unwrap();
    assert!(
        rival.add(Some(Duration::ZERO), &|| false).is_err(),
        "two holders of a 1-slot group"
    );
    assert!(group.done(&token).unwrap());
}

// ------------------------------------------------------------ records

/// Checks: no record outlives its hold. Two hundred short leases (period
/// 33 ms) are dropped at all points of their refreshes, many while their
/// refresh is under way (its answer must then be dropped, and the record
/// never come back), and some taken again by the same lock object
/// meanwhile (the old refresh's answer must not touch the new hold). Once
/// all are released, the server sees no more refreshes at all; the holds
/// taken again stayed healthy.
#[test]
fn no_refresh_outlives_its_hold() {
    let server = RedisServer::start();
    let url = server.url();
    let locks: Vec<Lock> = (0..200)
        .map(|i| lock_with(&url, &format!("churn-{i}"), MS(300), None))
        .collect();
    for round in 0..4u64 {
        let guards: Vec<_> = locks.iter().map(|l| l.acquire(None).unwrap()).collect();
        let started = Instant::now();
        for (i, guard) in guards.into_iter().enumerate() {
            // Spread over three periods, 0.5 ms apart.
            while started.elapsed() < Duration::from_micros(500 * i as u64 + 20 * round) {
                std::thread::yield_now();
            }
            guard.check_health().unwrap();
            drop(guard);
            if i % 3 == 0 {
                // Taken again by the same lock, held over a refresh.
                let again = locks[i].acquire(None).unwrap();
                std::thread::sleep(Duration::from_micros(300));
                again.check_health().unwrap();
            }
        }
    }
    let kept = locks[7].acquire(None).unwrap();
    std::thread::sleep(MS(400));
    kept.check_health().unwrap();
    assert!(locks[7].owned().unwrap());
    drop(kept);
    std::thread::sleep(MS(100));
    let before = server.evalsha_calls();
    std::thread::sleep(MS(300));
    let after = server.evalsha_calls();
    assert_eq!(
        after,
        before,
        "{} refreshes after every hold was released",
        after - before
    );
}

/// Checks: a WaitGroup slot adopted by another group (standing for
/// another process) is reported lost by its adder at its next refresh
/// (the script answers Adopted; the adder's record is dropped), while the
/// adopter keeps it alive past several ttls.
#[test]
fn an_adopted_slot_is_lost_to_its_adder_and_kept_by_its_adopter() {
    let server = RedisServer::start();
    let url = server.url();
    let ttl = MS(450);
    let build = || {
        WaitGroup::builder(url.as_str(), "adopted", 2)
            .ttl(ttl)
            .build()
            .unwrap()
    };
    let (adder, adopter) = (build(), build());
    let token = adder.add(Some(MS(1000)), &|| false).unwrap();
    std::thread::sleep(MS(70));
    assert!(adopter.adopt(&token).unwrap());
    eventually(MS(1000), "the adder sees its slot lost", || {
        !adder.healthy(&token)
    });
    let problem = adder.check_health(&token).unwrap_err().to_string();
    assert!(problem.contains("adopted"), "{problem}");
    std::thread::sleep(ttl * 3);
    adopter.check_health(&token).unwrap();
    assert_eq!(adopter.count().unwrap(), 1);
    assert!(adopter.done(&token).unwrap());
}

/// Checks: guards taken with `acquire_async` inside a tokio runtime of the
/// caller's, held over several ttls and dropped inside it: refreshed by
/// lockyard's schedule meanwhile, and released.
#[test]
fn async_holds_are_refreshed_and_released_inside_a_tokio_runtime() {
    let server = RedisServer::start();
    let url = server.url();
    let locks: Vec<Lock> = (0..20)
        .map(|i| lock_with(&url, &format!("async-{i}"), MS(200), None))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut guards = Vec::new();
        for lock in &locks {
            guards.push(lock.acquire_async(Some(MS(2000))).await.unwrap());
        }
        tokio::time::sleep(MS(700)).await;
        for guard in &guards {
            guard.check_health().unwrap();
        }
        drop(guards);
    });
    eventually(MS(2000), "every async hold released", || {
        server.keys().iter().all(|key| !key.contains(":holders"))
    });
}

// ------------------------------------------------------------ cluster

/// Checks: locks held on a Cluster go on being refreshed in per-node
/// pipelines after their slots moved to another master (the pipeline to
/// the old node answers MOVED, the refresh goes alone along the route and
/// the route follows): held and healthy past several ttls, no two holders.
#[test]
fn locks_held_through_a_resharding_stay_refreshed() {
    let cluster = RedisCluster::start();
    let url = cluster.url(0);
    let ttl = MS(600);
    let names: Vec<String> = (0..30).map(|i| format!("reshard-{i}")).collect();
    let locks: Vec<Lock> = names
        .iter()
        .map(|n| lock_with(&url, n, ttl, None))
        .collect();
    let guards: Vec<_> = locks.iter().map(|l| l.acquire(None).unwrap()).collect();
    let masters = cluster.masters();
    for name in names.iter().take(6) {
        let key = format!("lockyard:{{{name}}}:holders");
        let serving = cluster.node_of(&key);
        let to = *masters.iter().find(|&&p| p != serving).unwrap();
        cluster.move_slot_of(&key, to);
    }
    std::thread::sleep(ttl * 2);
    for guard in &guards {
        guard.check_health().unwrap();
    }
    let rival_url = cluster.url(2);
    for name in &names {
        let rival = lock_with(&rival_url, name, ttl, None);
        assert!(
            rival.try_acquire().unwrap().is_none(),
            "{name}: two holders"
        );
    }
}

// ------------------------------------------------------------ fork

/// Checks: forked children, forked while the parent's dispatcher and
/// refreshes are busy (12 locks refreshed every 2 ms, some re-taken
/// before each fork), start a schedule of their own: each child's lock
/// (ttl 90 ms) is refreshed by the child over 250 ms and stays healthy;
/// no child hangs (the schedule, the runtime and the refresh table are
/// held across fork); the parent's own locks stay refreshed in the parent
/// throughout, and the parent's handles dropped in a child change nothing.
#[test]
fn forked_children_keep_their_own_locks_and_the_parent_its_own() {
    let server = RedisServer::start();
    let url = server.url();
    let held: Vec<Lock> = (0..12)
        .map(|i| lock_with(&url, &format!("parent-{i}"), MS(2000), Some(MS(2))))
        .collect();
    let long = lock_with(&url, "parent-long", MS(300), None);
    let long_guard = long.acquire(None).unwrap();
    let mut guards: Vec<_> = held
        .iter()
        .map(|l| Some(l.acquire(None).unwrap()))
        .collect();
    let started = Instant::now();
    let (mut forks, mut failed) = (0usize, Vec::new());
    while started.elapsed() < Duration::from_secs(6) && forks < 16 {
        for i in 0..3 {
            let at = (forks * 3 + i) % held.len();
            drop(guards[at].take());
            guards[at] = Some(held[at].acquire(None).unwrap());
        }
        std::thread::sleep(Duration::from_micros((forks as u64 * 389) % 2000));
        forks += 1;
        let child_lock = lock_with(&url, &format!("child-{forks}"), MS(90), None);
        let fds = pipe();
        // SAFETY: the child only runs lockyard calls and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // The parent's handles, dropped here: nothing to do in a child.
            drop(guards[0].take());
            let answer = match child_lock.acquire(Some(MS(1000))) {
                Ok(guard) => {
                    std::thread::sleep(MS(250));
                    let healthy = guard.healthy();
                    drop(guard);
                    format!("healthy={healthy}")
                }
                Err(e) => format!("error {e}"),
            };
            answer_parent(fds, &answer);
        }
        match child_answer(pid, fds, Duration::from_secs(5)) {
            None => failed.push(format!("child {forks} hung")),
            Some(answer) if answer == "healthy=true" => {}
            Some(answer) => failed.push(format!("child {forks}: {answer}")),
        }
        long_guard.check_health().unwrap();
    }
    for guard in guards.iter().flatten() {
        assert!(guard.healthy(), "a parent's lock turned unhealthy");
    }
    long_guard.check_health().unwrap();
    assert!(long.owned().unwrap());
    assert!(failed.is_empty(), "after {forks} forks: {failed:?}");
}

/// Checks: a child forked while its parent holds a lock acquires the same
/// name only once the parent released it (no two holders across the
/// fork), and a child that takes a lock of its own keeps it alive past its
/// ttl while the parent's are kept by the parent.
#[test]
fn a_child_and_its_parent_never_hold_one_lock_together() {
    let server = RedisServer::start();
    let url = server.url();
    let ttl = MS(200);
    let shared = lock_with(&url, "shared", ttl, None);
    let guard = shared.acquire(None).unwrap();
    let fds = pipe();
    // SAFETY: the child only runs lockyard calls and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mine = lock_with(&url, "shared", ttl, None);
        let early = mine.try_acquire();
        let early = matches!(early, Ok(None));
        // The parent keeps it over 4 ttls, then releases it.
        let got = mine.acquire(Some(MS(3000)));
        let answer = match got {
            Ok(g) => {
                std::thread::sleep(ttl * 3);
                format!("early_refused={early} healthy={}", g.healthy())
            }
            Err(e) => format!("error {e}"),
        };
        answer_parent(fds, &answer);
    }
    std::thread::sleep(ttl * 4);
    guard.check_health().unwrap();
    drop(guard);
    let answer = child_answer(pid, fds, Duration::from_secs(6));
    assert_eq!(answer.as_deref(), Some("early_refused=true healthy=true"));
}

// ------------------------------------------------------------ more

/// Checks: more records due together on one node than one pipeline takes
/// (2,500 locks, pipelines of 1,000): every chunk is sent, one after
/// another, and every lock stays held and healthy over several ttls.
#[test]
fn more_locks_than_one_pipeline_takes_are_all_refreshed() {
    let server = RedisServer::start();
    let url = server.url();
    let ttl = MS(1500);
    let locks: Vec<Lock> = (0..2500)
        .map(|i| lock_with(&url, &format!("bulk-{i}"), ttl, None))
        .collect();
    let guards: Vec<_> = locks.iter().map(|l| l.acquire(None).unwrap()).collect();
    std::thread::sleep(ttl * 2);
    for (i, guard) in guards.iter().enumerate() {
        assert!(guard.healthy(), "bulk-{i} turned unhealthy");
    }
    let rival = lock_with(&url, "bulk-0", ttl, None);
    assert!(rival.try_acquire().unwrap().is_none(), "two holders");
    let rival = lock_with(&url, "bulk-2499", ttl, None);
    assert!(rival.try_acquire().unwrap().is_none(), "two holders");
}

/// Checks: a held lock whose background connection went silent (a stuck
/// connection; new ones work) is refreshed alone on a fresh connection
/// after the pipeline timed out, and stays healthy; and a lock whose
/// server restarted empty is found lost at its next refresh, never
/// reported healthy for long after (the README's promise: at its next
/// refresh).
#[test]
fn a_stuck_connection_costs_a_retry_and_a_restart_loses_the_lock() {
    let mut server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    let ttl = MS(1800);
    let stuck = lock_with(&proxy.url(), "stuck", ttl, None);
    let guard = stuck.acquire(None).unwrap();
    for _ in 0..4 {
        std::thread::sleep(MS(250));
        proxy.stall_existing();
    }
    std::thread::sleep(ttl);
    guard.check_health().unwrap();
    // Its pooled connections may be stuck: not released, left to expire.
    std::mem::forget(guard);
    std::mem::forget(stuck);

    let restarted = lock_with(&server.url(), "restarted", MS(600), None);
    let guard = restarted.acquire(None).unwrap();
    std::thread::sleep(MS(100));
    server.restart();
    let rival = lock_with(&server.url(), "restarted", MS(600), None);
    let theirs = rival.acquire(Some(MS(2000))).unwrap();
    // By design (README, "Redis restarts without persistence") the holder
    // learns it at its next refresh, a period (67 ms) later.
    eventually(MS(500), "the restart is seen as a loss", || {
        guard
            .check_health()
            .is_err_and(|e| e.to_string().contains("lost") || e.to_string().contains("ran out"))
    });
    drop(theirs);
    std::mem::forget(guard);
}

/// Checks: locks held through a Sentinel failover (master killed, replica
/// promoted) are refreshed on the new master once the route found it: the
/// pipeline to the dead master fails, each refresh goes alone along the
/// route, and the leases on the promoted replica are extended.
#[test]
fn locks_held_through_a_sentinel_failover_stay_refreshed() {
    let mut set = support::SentinelSet::start();
    let ttl = Duration::from_secs(9);
    let locks: Vec<Lock> = (0..10)
        .map(|i| lock_with(&set.url(), &format!("failover-{i}"), ttl, None))
        .collect();
    let guards: Vec<_> = locks.iter().map(|l| l.acquire(None).unwrap()).collect();
    set.wait_for_replica();
    let before: Vec<u64> = (0..10)
        .map(|i| deadline_on(&set.replica, &format!("failover-{i}")))
        .collect();
    set.kill_master_and_wait_for_failover();
    eventually(
        Duration::from_secs(15),
        "refreshes on the new master",
        || (0..10).all(|i| deadline_on(&set.replica, &format!("failover-{i}")) > before[i]),
    );
    for guard in &guards {
        guard.check_health().unwrap();
    }
}

/// The lease deadline (server ms) of the one holder of `name` on `server`
/// (0 while there is none).
fn deadline_on(server: &RedisServer, name: &str) -> u64 {
    server.holders(name).first().map_or(0, |(_, at)| *at)
}

/// Checks: the documented hand-over to a worker process, by fork. The
/// parent adds a slot, forks; the child adopts it (its record is the
/// child's schedule's; the parent's inherited handle, replaced, is
/// dropped in the child and changes nothing) and keeps it alive past
/// several ttls; the parent's next refresh answers Adopted, and the parent
/// reports its slot lost while the child holds it.
#[test]
fn a_slot_adopted_in_a_forked_child_is_kept_there_and_lost_here() {
    let server = RedisServer::start();
    let url = server.url();
    let ttl = MS(300);
    let group = WaitGroup::builder(url.as_str(), "forked-adopt", 1)
        .ttl(ttl)
        .build()
        .unwrap();
    let token = group.add(Some(MS(1000)), &|| false).unwrap();
    let fds = pipe();
    // SAFETY: the child only runs lockyard calls and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let answer = match group.adopt(&token) {
            Ok(true) => {
                std::thread::sleep(ttl * 4);
                let healthy = group.healthy(&token);
                let freed = group.done(&token);
                format!("healthy={healthy} freed={freed:?}")
            }
            other => format!("adopt: {other:?}"),
        };
        answer_parent(fds, &answer);
    }
    eventually(MS(1000), "the parent sees its slot adopted", || {
        !group.healthy(&token)
    });
    let problem = group.check_health(&token).unwrap_err().to_string();
    assert!(problem.contains("adopted"), "{problem}");
    let answer = child_answer(pid, fds, Duration::from_secs(5));
    assert_eq!(answer.as_deref(), Some("healthy=true freed=Ok(true)"));
    assert_eq!(group.count().unwrap(), 0);
}

/// FINDING: a slot handed over to a waiter is lost when the waiter's
/// background connection has gone silent, though a fresh connection would
/// take it up at once.
///
/// A handed-over grant lasts only the 2 s handoff window (WAITER_LEASE)
/// until its first refresh, and `schedule::first_refresh_retry` promises
/// that every one of its `max_refresh_fails` tries fits in that window.
/// But one try is `refresh_on` → `refresh_batch::pipelined` on the cached
/// background connection with a limit of `background_timeout()` (ttl/10,
/// up to 10 s; 3 s here), and only after that does the record go alone
/// (`refresh_alone`, on a fresh connection): by then the window has
/// closed, the script answers "lost", and the slot is gone (the session
/// path's `take_up` bounds each try by the window; this one does not).
///
/// Sequence: ttl 30 s (the default ttl: any ttl of 20 s or more does
/// it); a lock refreshed once opens the Server's
/// background connection, which then goes silent (StallProxy
/// `stall_existing`; new connections work); a waiter on that Server gets a
/// 1-slot group's slot handed over. Expected: it keeps the slot. Observed
/// on e57cda5: after 4 s `check_health` fails with "the lease ran out or
/// the slot was taken over before it could be refreshed" (every run, 6 of
/// 6). Not introduced by e57cda5: its parent's per-hold refresher
/// (`refresh_loop` → `Slots::refresh`) had the same two timeouts, and the
/// test fails there too; e57cda5 carries it into `schedule::refresh_on`.
#[test]
fn a_handed_over_slot_survives_a_stuck_background_connection() {
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    let ttl = Duration::from_secs(30);
    // Opens this Server's background connection: one refresh (at 75-100
    // ms), then stuck; the hold is dropped at once (its release, on a
    // stuck connection too, goes on in the background), so nothing else
    // is refreshed on it before the handoff.
    let warm = lock_with(&proxy.url(), "warm", ttl, Some(MS(100)));
    let warm_guard = warm.acquire(None).unwrap();
    std::thread::sleep(MS(120));
    warm_guard.check_health().unwrap();
    proxy.stall_existing();
    std::mem::forget(warm_guard);
    warm.release_all_in_background();
    std::mem::forget(warm);
    // The pooled foreground connections are stuck too: calls that time
    // out on them drop them, and the next ones connect anew.
    let flush = lock_with(&proxy.url(), "flush", ttl, None);
    eventually(MS(3000), "a fresh foreground connection", || {
        flush.acquire(Some(MS(200))).is_ok()
    });

    let direct = WaitGroup::builder(server.url().as_str(), "stuck-handoff", 1)
        .ttl(ttl)
        .build()
        .unwrap();
    let first = direct.add(Some(MS(1000)), &|| false).unwrap();
    let waiter = std::thread::spawn({
        let url = proxy.url();
        move || {
            let group = WaitGroup::builder(url.as_str(), "stuck-handoff", 1)
                .ttl(ttl)
                .build()
                .unwrap();
            let token = group.add(Some(MS(5000)), &|| false).unwrap();
            std::thread::sleep(MS(4000));
            let health = group.check_health(&token);
            let _ = group.done(&token);
            health.map_err(|e| e.to_string())
        }
    });
    std::thread::sleep(MS(300));
    assert!(direct.done(&first).unwrap());
    let outcome = waiter.join().unwrap();
    assert!(
        outcome.is_ok(),
        "the handed-over slot was lost: {}",
        outcome.unwrap_err()
    );
}
