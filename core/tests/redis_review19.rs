//! Review of 7f5d0d2..b1a3b03: scripts that take the name's key prefix
//! and holders key and name the other keys in Lua (ARGV renumbered, `%d`
//! formatting, numbers in hot replies, no shape read on the release and
//! refresh fast paths), the cached process id (`core/src/pid.rs`), the
//! pooled connection that remembers its read timeout, and the refresh
//! dispatcher that keeps a look still ahead.
//!
//! Findings first (each fails on b1a3b03), then coverage of the risky
//! areas checked and found correct.

mod support;

use std::time::{Duration, Instant};

use lockyard::redis::{
    force_release, holder, inspect, Behavior, Election, Lock, Session, WaitGroup,
};
use lockyard::Error;
use support::fork::{answer_parent, child_answer, pipe};
use support::{eventually, DelayProxy, RedisServer};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock_with(url: &str, name: &str, ttl: Duration, every: Option<Duration>) -> Lock {
    let mut builder = Lock::builder(url, name).ttl(ttl);
    if let Some(every) = every {
        builder = builder.refresh_interval(every);
    }
    builder.build().unwrap()
}

/// The key's remaining time to live in ms (-2: no such key).
fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.raw().unwrap())
        .unwrap()
}

// --------------------------------------------------------------- findings

/// FINDING 1 (pid cache): a child made by a fork that runs no
/// `pthread_atfork` handlers acts as its parent: it releases the parent's
/// lock.
///
/// `crate::pid::current()` (core/src/pid.rs) keeps the process id in a
/// static and relies on a `pthread_atfork` child handler to forget it.
/// A fork that runs no atfork handlers keeps the parent's id in the child:
/// the raw `fork`/`clone` system call (`syscall(SYS_fork)`, as sandboxes
/// and some runtimes do), glibc's `_Fork()` (the async-signal-safe fork,
/// glibc 2.34), or `vfork`. Before b1a3b03 every fork check asked the
/// kernel (`std::process::id()`), which is right whatever made the child.
///
/// Sequence: the parent holds a lock (ttl 10 s); it forks with
/// `syscall(SYS_fork)`; the child drops the guard it inherited, as a
/// child leaving a `with` block entered before the fork would, and exits.
/// Observed on b1a3b03: the child finds the hold its own (same cached
/// pid), releases it on Redis over the parent's pooled connection, and
/// the parent, still holding its guard and told nothing, no longer owns
/// the lock: a rival takes it while the parent's guard is healthy (two
/// holders). Expected (as on 7f5d0d2): the child's drop changes nothing,
/// the parent still owns the lock and a rival is refused.
#[test]
fn a_child_forked_without_atfork_handlers_never_releases_its_parents_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let lock = lock_with(&url, "raw-fork", Duration::from_secs(10), None);
    let guard = lock.acquire(Some(Duration::from_secs(2))).unwrap();
    let fds = pipe();
    // SAFETY: the child only drops the guard, writes to the pipe and
    // exits; the raw system call runs no atfork handler (that is the
    // point).
    let pid = unsafe { libc::syscall(libc::SYS_fork) } as i32;
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        drop(guard);
        answer_parent(fds, "dropped");
    }
    let answer = child_answer(pid, fds, Duration::from_secs(10));
    assert_eq!(answer.as_deref(), Some("dropped"), "the child hung");
    let rival = lock_with(&url, "raw-fork", Duration::from_secs(10), None);
    let rival_guard = rival.try_acquire().unwrap();
    assert!(
        rival_guard.is_none() && lock.owned().unwrap(),
        "the child released its parent's lock: a rival holds it ({}) while the parent's guard \
         says healthy={}",
        rival_guard.is_some(),
        guard.healthy()
    );
    guard.check_health().unwrap();
}

// --------------------------------------------------------------- coverage

/// Checked: the dispatcher's look kept ahead (schedule.rs `dispatch`).
/// Suspected: after a burst of locks taken and released before their
/// first refresh (the schedule emptied behind a look still ahead, and
/// put_back no longer notifying for a later look), a lock then held for
/// several ttls would miss its first refresh and run out while its guard
/// says healthy. Sequence, for three rounds: 300 acquire/release cycles
/// of several locks with small pauses (crossing grid points), then one
/// lock (ttl 600 ms, refreshed every 100 ms) held for 2 s. Its holders key
/// must keep a ttl, a rival must be refused throughout, and the guard
/// stays healthy. Correct on b1a3b03.
#[test]
fn a_lock_held_after_a_burst_of_short_holds_is_refreshed_on_time() {
    let server = RedisServer::start();
    let url = server.url();
    let short: Vec<Lock> = (0..4)
        .map(|i| lock_with(&url, &format!("burst-{i}"), MS(600), Some(MS(100))))
        .collect();
    let long = lock_with(&url, "burst-long", MS(600), Some(MS(100)));
    let rival = lock_with(&url, "burst-long", MS(600), None);
    for round in 0..3u64 {
        for cycle in 0..300u64 {
            let lock = &short[(cycle % 4) as usize];
            let guard = lock.acquire(Some(MS(500))).unwrap();
            if cycle % 37 == round {
                std::thread::sleep(MS(cycle % 7 * 3));
            }
            assert!(guard.release().unwrap());
        }
        let guard = long.acquire(Some(MS(500))).unwrap();
        let until = Instant::now() + MS(2000);
        while Instant::now() < until {
            assert!(
                rival.try_acquire().unwrap().is_none(),
                "round {round}: lost"
            );
            assert!(pttl(&server, "lockyard:{burst-long}:holders") > 0);
            guard.check_health().unwrap();
            std::thread::sleep(MS(50));
        }
        assert!(guard.release().unwrap(), "round {round}: ran out");
    }
}

/// Checked: the read timeout a pooled connection remembers
/// (`NodeConnection::set_read_timeout`). Suspected: a request with a
/// short deadline followed by a patient one on the same connection (or
/// the reverse) would wait by the other's timeout. Through a proxy that
/// delays every packet by 150 ms: an acquire given 400 ms (its connection
/// kept with a shorter timeout) is followed by patient reads that must
/// succeed, then by an acquire with a 100 ms deadline on a held name that
/// must give up in time, then by patient reads again. Correct on b1a3b03.
#[test]
fn short_and_patient_requests_on_one_pooled_connection_each_get_their_timeout() {
    let server = RedisServer::start();
    let proxy = DelayProxy::start(server.port, MS(150));
    let slow = lock_with(&proxy.url(), "timeouts", Duration::from_secs(10), None);
    // Warm a pooled connection (connecting takes a few delayed trips).
    assert!(!slow.locked().unwrap());
    for _ in 0..3 {
        let guard = slow.acquire(Some(Duration::from_secs(3))).unwrap();
        assert!(slow.locked().unwrap(), "a patient read after a short one");
        assert!(slow.owned().unwrap());
        assert!(guard.release().unwrap());
    }
    let direct = lock_with(&server.url(), "timeouts", Duration::from_secs(10), None);
    let held = direct.acquire(None).unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        let tried = slow.acquire(Some(MS(100)));
        assert!(
            matches!(
                tried,
                Err(Error::Timeout { .. }) | Err(Error::Backend { .. })
            ),
            "{:?}",
            tried.as_ref().err()
        );
        assert!(
            started.elapsed() < MS(1500),
            "a 100 ms acquire took {:?}",
            started.elapsed()
        );
        assert!(slow.locked().unwrap(), "a patient read after a short one");
    }
    assert!(held.release().unwrap());
}

/// Checked: the renumbered ARGV of every script on their rarely run
/// paths, through the public API on one server: a session-bound lock with
/// a value (`bound`, holder.lua, state.lua's value), an election's terms
/// and leader, a lost session's lock_delay (`delay`), a WaitGroup slot
/// adopted by another object (`owners`, refresh by a refresher id), wait()
/// (watch.lua) woken by the last done, a waiter's timeout (cancel.lua and
/// its tombstone), force_release, and fencing tokens that only grow
/// across the fast and full paths. Correct on b1a3b03.
#[test]
fn every_script_path_keeps_its_arguments() {
    let server = RedisServer::start();
    let url = server.url();

    // Sessions: bound, value, holder, inspect.
    let session = Session::builder(&url)
        .ttl(MS(2000))
        .behavior(Behavior::Release)
        .build()
        .unwrap();
    let bound = Lock::builder(&url, "bound")
        .session(&session)
        .value("worker-1")
        .build()
        .unwrap();
    let guard = bound.try_acquire().unwrap().expect("free");
    assert_eq!(holder(&url, "bound").unwrap().as_deref(), Some("worker-1"));
    let state = inspect(&url, "bound").unwrap();
    assert_eq!(state.holders.len(), 1);
    assert_eq!(state.holders[0].value.as_deref(), Some("worker-1"));
    assert_eq!(state.limit, Some(1));
    drop(guard);

    // Elections: terms and leader.
    let a = Election::new(&url, "elect", &session).unwrap();
    let other = Session::builder(&url).ttl(MS(2000)).build().unwrap();
    let b = Election::new(&url, "elect", &other).unwrap();
    assert!(a.campaign("node-a", Some(Duration::ZERO)).unwrap());
    assert_eq!(b.leader().unwrap().as_deref(), Some("node-a"));
    let first_term = a.fencing_token().unwrap();
    assert!(!b.campaign("node-b", Some(Duration::ZERO)).unwrap());
    assert!(a.resign().unwrap());
    assert!(b.campaign("node-b", Some(Duration::from_secs(2))).unwrap());
    assert!(b.fencing_token().unwrap() > first_term);
    assert_eq!(a.leader().unwrap().as_deref(), Some("node-b"));

    // A lost session's lock_delay.
    let lost = Session::builder(&url)
        .ttl(MS(300))
        .behavior(Behavior::Delete)
        .lock_delay(MS(800))
        .build()
        .unwrap();
    let delayed = Lock::builder(&url, "delayed")
        .session(&lost)
        .build()
        .unwrap();
    let _delayed_guard = delayed.try_acquire().unwrap().unwrap();
    let mut raw = server.raw().unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg("lockyard:{delayed}:holders")
        .arg(0)
        .arg(-1)
        .query(&mut raw)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("lockyard:{delayed}:holders")
        .arg("XX")
        .arg(secs * 1000 + micros / 1000)
        .arg(&members[0])
        .query(&mut raw)
        .unwrap();
    eventually(MS(2000), "the session notices", || !lost.healthy());
    let next = Lock::builder(&url, "delayed").build().unwrap();
    assert!(next.try_acquire().unwrap().is_none(), "barred by the delay");
    assert!(inspect(&url, "delayed").unwrap().lock_delay.is_some());
    let after = next.acquire(Some(Duration::from_secs(3))).unwrap();
    drop(after);

    // A WaitGroup slot adopted by another object.
    let group = WaitGroup::builder(&url, "group", 2)
        .ttl(MS(600))
        .build()
        .unwrap();
    let adopter = WaitGroup::builder(&url, "group", 2)
        .ttl(MS(600))
        .build()
        .unwrap();
    let token = group.add(Some(Duration::from_secs(2)), &|| false).unwrap();
    assert!(adopter.adopt(&token).unwrap());
    eventually(MS(2000), "the adder learns of the adoption", || {
        !group.healthy(&token)
    });
    std::thread::sleep(MS(1200));
    assert!(adopter.healthy(&token), "the adopter keeps it alive");
    assert_eq!(group.count().unwrap(), 1);

    // wait() woken by the last done.
    std::thread::scope(|s| {
        let waiting = s.spawn(|| group.wait(Some(Duration::from_secs(5))).unwrap());
        std::thread::sleep(MS(300));
        assert!(adopter.done(&token).unwrap());
        assert!(waiting.join().unwrap(), "wait() not woken");
    });

    // A waiter's timeout (cancel), then the name is free for a new one.
    let held = lock_with(&url, "cancelled", Duration::from_secs(10), None);
    let held_guard = held.acquire(None).unwrap();
    let waiter = lock_with(&url, "cancelled", Duration::from_secs(10), None);
    assert!(matches!(
        waiter.acquire(Some(MS(200))),
        Err(Error::Timeout { .. })
    ));
    assert_eq!(inspect(&url, "cancelled").unwrap().waiters, 0);
    assert!(held_guard.release().unwrap());
    let taken = waiter.acquire(Some(MS(500))).unwrap();
    let fence = taken.fencing_token();

    // force_release, then fencing tokens keep growing on both paths.
    assert_eq!(force_release(&url, "cancelled").unwrap(), 1);
    assert!(!waiter.owned().unwrap());
    eventually(MS(3000), "the forced-out holder turns unhealthy", || {
        !taken.healthy()
    });
    drop(taken);
    let mut last = fence;
    for round in 0..20 {
        let guard = held.acquire(Some(MS(500))).unwrap();
        let now = guard.fencing_token();
        assert!(now > last, "round {round}: fence {now} after {last}");
        last = now;
        if round % 2 == 0 {
            // The full path next time: a waiter makes the name busy.
            let _ = waiter.acquire(Some(MS(20)));
        }
        assert!(guard.release().unwrap());
    }
}

/// Checked: a grant handed to a waiter just as its slot starts to move
/// between Cluster masters (every script refused with TRYAGAIN while the
/// slot is half-moved, so the waiter's take-up cannot land). Sequence: H
/// holds a lock, W waits for it (15 s); H releases, and the migration
/// begins at once; it lasts 1.5 s (keys on the source, then moved), then
/// ends. Whatever W got, never two holders: whenever a rival R is granted,
/// W's guard is no longer healthy; and nothing is stuck: within 10 s of
/// the move's end, W holds the lock healthy or R can take it. Correct on
/// b1a3b03.
#[test]
fn a_grant_handed_over_as_its_slot_begins_to_move_is_never_held_twice() {
    let cluster = support::RedisCluster::start();
    let seed = cluster.ports()[0];
    let url = cluster.url_of(seed);
    let name = (0..)
        .map(|i| format!("handed-{i}"))
        .find(|name| cluster.node_of(&format!("lockyard:{{{name}}}:holders")) == seed)
        .unwrap();
    let key = format!("lockyard:{{{name}}}:holders");
    let (slot, from) = (cluster.slot_of(&key), cluster.node_of(&key));
    let to = *cluster.masters().iter().find(|&&p| p != from).unwrap();
    let build = || {
        Lock::builder(&url, &name)
            .ttl(MS(3000))
            .max_refresh_fails(20)
            .build()
            .unwrap()
    };
    let (h, w, r) = (build(), build(), build());
    let held = h.acquire(Some(MS(2000))).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let got = w.acquire(Some(Duration::from_secs(15)));
            let Ok(guard) = got else {
                return format!("waiter: {:?}", got.err());
            };
            // Hold it for a while, watching for a rival.
            let until = Instant::now() + MS(6000);
            while Instant::now() < until {
                let healthy_before = guard.healthy();
                if let Some(rival) = r.try_acquire().ok().flatten() {
                    if healthy_before && guard.healthy() {
                        return "two holders".to_owned();
                    }
                    drop(rival);
                    return "lost, then taken by the rival".to_owned();
                }
                std::thread::sleep(MS(30));
            }
            format!("held healthy={}", guard.healthy())
        });
        std::thread::sleep(MS(500));
        assert!(held.release().unwrap());
        cluster.begin_migration(slot, from, to);
        std::thread::sleep(MS(700));
        cluster.migrate_slot_keys(slot, from, to);
        std::thread::sleep(MS(800));
        cluster.finish_migration(slot, to);
        let outcome = waiter.join().unwrap();
        eprintln!("waiter: {outcome}");
        assert_ne!(outcome, "two holders");
        if outcome != "held healthy=true" {
            eventually(Duration::from_secs(10), "the name frees", || {
                r.try_acquire().ok().flatten().is_some()
            });
        }
    });
}

/// Checked: pipelined refreshes, a session's renewal and an election while
/// one of their slots is half-moved between Cluster masters (its scripts
/// refused with TRYAGAIN, the other names' refreshes in the same pipeline
/// answered). Sequence: twelve locks on one master (ttl 3 s, refreshed
/// every 100 ms, so their refreshes go out in pipelines), an election led
/// under a session (ttl 3 s) on a name of that master; the slot of one
/// lock and of the election is half-moved for 1.5 s, then the move ends.
/// Throughout and after, every lock stays healthy and owned, a rival is
/// refused everywhere, and the leader stays the leader. Correct on
/// b1a3b03.
#[test]
fn pipelined_refreshes_and_an_election_ride_out_a_half_moved_slot() {
    let cluster = support::RedisCluster::start();
    let seed = cluster.ports()[0];
    let url = cluster.url_of(seed);
    let served = |prefix: &str, count: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}-{i}"))
            .filter(|name| cluster.node_of(&format!("lockyard:{{{name}}}:holders")) == seed)
            .take(count)
            .collect()
    };
    let names = served("piped", 12);
    let locks: Vec<Lock> = names
        .iter()
        .map(|name| {
            Lock::builder(&url, name)
                .ttl(MS(3000))
                .refresh_interval(MS(100))
                .max_refresh_fails(20)
                .build()
                .unwrap()
        })
        .collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|l| l.acquire(Some(MS(2000))).unwrap())
        .collect();
    let session = Session::builder(&url).ttl(MS(3000)).build().unwrap();
    let elected = served("elected", 1).remove(0);
    let leader = Election::new(&url, &elected, &session).unwrap();
    assert!(leader.campaign("leader", Some(MS(2000))).unwrap());
    let rival_session = Session::builder(&url).ttl(MS(3000)).build().unwrap();
    let rival_election = Election::new(&url, &elected, &rival_session).unwrap();
    let moved = [names[5].clone(), elected.clone()];
    for name in &moved {
        let key = format!("lockyard:{{{name}}}:holders");
        let (slot, from) = (cluster.slot_of(&key), cluster.node_of(&key));
        let to = *cluster.masters().iter().find(|&&p| p != from).unwrap();
        cluster.begin_migration(slot, from, to);
        let until = Instant::now() + MS(1500);
        while Instant::now() < until {
            for guard in &guards {
                guard.check_health().unwrap();
            }
            assert!(leader.is_leader());
            std::thread::sleep(MS(100));
        }
        cluster.migrate_slot_keys(slot, from, to);
        cluster.finish_migration(slot, to);
    }
    std::thread::sleep(MS(3500));
    for (guard, lock) in guards.iter().zip(&locks) {
        guard.check_health().unwrap();
        assert!(lock.owned().unwrap());
    }
    for name in &names {
        let rival = Lock::builder(&url, name).build().unwrap();
        assert!(rival.try_acquire().unwrap().is_none(), "{name} held twice");
    }
    assert!(leader.is_leader());
    leader.check_health().unwrap();
    assert!(!rival_election.campaign("rival", Some(MS(200))).unwrap());
    assert_eq!(rival_election.leader().unwrap().as_deref(), Some("leader"));
}

/// Checked: a grant handed over to a waiter (due for its take-up at once,
/// within the 2 s handoff window) while the dispatcher looks far ahead
/// (another lock's first refresh 10 s away) and after a burst of locks
/// taken and released emptied the schedule behind that look. Put back
/// due now, it must wake the dispatcher: B, handed the lock, still owns it
/// 4 s later (past the handoff window), healthy, and a rival is refused.
/// Correct on b1a3b03.
#[test]
fn a_handed_over_grant_is_taken_up_while_the_dispatcher_looks_far_ahead() {
    let server = RedisServer::start();
    let url = server.url();
    let far = lock_with(&url, "far", Duration::from_secs(30), None);
    let _far_guard = far.acquire(Some(MS(2000))).unwrap();
    let burst = lock_with(&url, "burst", Duration::from_secs(30), None);
    for _ in 0..50 {
        assert!(burst.acquire(Some(MS(500))).unwrap().release().unwrap());
    }
    let a = lock_with(&url, "handed", Duration::from_secs(30), None);
    let b = lock_with(&url, "handed", Duration::from_secs(30), None);
    let rival = lock_with(&url, "handed", Duration::from_secs(30), None);
    let held = a.acquire(Some(MS(2000))).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let guard = b.acquire(Some(Duration::from_secs(10))).unwrap();
            std::thread::sleep(MS(4000));
            let healthy = guard.healthy();
            let taken = rival.try_acquire().unwrap().is_some();
            (healthy, taken, b.owned().unwrap())
        });
        std::thread::sleep(MS(300));
        assert!(held.release().unwrap());
        let (healthy, taken, owned) = waiting.join().unwrap();
        assert!(
            healthy && !taken && owned,
            "healthy {healthy}, taken by a rival {taken}, owned {owned}"
        );
    });
}

/// One trial of [`a_child_forked_while_lockyard_first_asks_its_pid_does_not_hang`],
/// in a process of its own (lockyard not yet used in it): a thread makes
/// lockyard's first call while the main thread forks children that make
/// theirs. Prints how many children hung.
fn first_call_fork_trial() {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let other = barrier.clone();
    let first = std::thread::spawn(move || {
        other.wait();
        lockyard::note_process_start();
    });
    barrier.wait();
    let mut children = Vec::new();
    let started = Instant::now();
    while started.elapsed() < MS(3) && children.len() < 64 {
        // SAFETY: the child makes one lockyard call and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            lockyard::note_process_start();
            unsafe { libc::_exit(0) };
        }
        children.push(pid);
    }
    first.join().unwrap();
    // Every child ends at once unless it hangs: 2 s for all of them.
    let waited = Instant::now();
    let mut left = children;
    while !left.is_empty() && waited.elapsed() < MS(2000) {
        let mut status = 0;
        left.retain(|&pid| unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0);
        std::thread::sleep(MS(1));
    }
    let hung = left.len();
    if let Some(pid) = left.first() {
        // Where it hangs, when gdb is there.
        if let Ok(out) = std::process::Command::new("gdb")
            .args(["-batch", "-p", &pid.to_string(), "-ex", "bt 16"])
            .output()
        {
            let text = String::from_utf8_lossy(&out.stdout);
            for frame in text.lines().filter(|l| l.starts_with('#')) {
                println!("HUNG CHILD {frame}");
            }
        }
    }
    for pid in left {
        let mut status = 0;
        unsafe { libc::kill(pid, libc::SIGKILL) };
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
    println!("HUNG={hung}");
}

/// FINDING 2 (pid cache): a child forked while another thread makes
/// lockyard's first call in the process hangs at its own first call.
///
/// `pid::current()` registers its `pthread_atfork` handler inside a
/// `OnceLock` on the first call (and `note_process_start` calls it inside
/// another `OnceLock`, `STARTED_IN`). `pthread_atfork` takes glibc's atfork
/// lock, which `fork()` holds across the fork: a fork waiting for it goes
/// ahead the moment the registration releases it, while the registering
/// thread is still inside both `get_or_init` calls. The child inherits the
/// two `OnceLock`s in their "running" state with no thread to finish them,
/// and its first lockyard call (any lock built, or `note_process_start`)
/// waits on them forever. Before b1a3b03 `STARTED_IN` ran only `getpid`
/// (no lock shared with fork), and every fork check asked the kernel.
///
/// Sequence, in fresh processes (this test binary re-run): one thread
/// calls `lockyard::note_process_start()` while the main thread forks
/// children that call it too and exit. Expected: no child ever hangs.
/// Observed on b1a3b03: see the count in the failure message.
#[test]
fn a_child_forked_while_lockyard_first_asks_its_pid_does_not_hang() {
    if std::env::var_os("REVIEW19_FIRST_CALL_TRIAL").is_some() {
        first_call_fork_trial();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let (mut hung, mut trials, mut stack) = (0, 0, String::new());
    let started = Instant::now();
    while trials < 200 && started.elapsed() < Duration::from_secs(40) {
        trials += 1;
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "a_child_forked_while_lockyard_first_asks_its_pid_does_not_hang",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("REVIEW19_FIRST_CALL_TRIAL", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let count: u32 = text
            .split("HUNG=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(|n| n.parse().unwrap())
            .unwrap_or_else(|| panic!("no trial outcome: {text}"));
        hung += count;
        for frame in text
            .lines()
            .filter(|l| l.contains("HUNG CHILD") && l.contains("lockyard"))
        {
            stack.push_str(frame);
            stack.push('\n');
        }
        if hung > 0 {
            break;
        }
    }
    assert_eq!(
        hung, 0,
        "{hung} child(ren) hung at their first lockyard call ({trials} trials), in:\n{stack}"
    );
}
