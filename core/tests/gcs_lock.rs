//! The GCS lock's algorithm against a faithful in-process store: the
//! precondition races fake-gcs-server cannot show (it ignores
//! preconditions on PATCH and DELETE), and injected faults.

mod gcs_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gcs_support::{builder, FaithfulStore, Fault, Op};
use lockyard::gcs::{Lock, LockBuilder, Store, StoreError};
use lockyard::wait::InTime;
use lockyard::Error;

const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn uncontended_lock_and_unlock_is_one_create_and_one_delete() {
    let store = FaithfulStore::new();
    let lock = builder(&store).build().unwrap();
    let guard = lock.acquire(None).unwrap();
    let token = guard.fencing_token();
    assert_eq!(store.object().unwrap().version.generation as u64, token);
    assert!(guard.release().unwrap());
    assert_eq!(
        (
            store.creates.load(Ordering::SeqCst),
            store.deletes.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    assert_eq!(store.requests(), 2);
    assert!(store.object().is_none());
}

#[test]
fn a_waiter_polls_with_reads_and_never_writes() {
    let store = FaithfulStore::new();
    store.put("someone-else", 60.0);
    let lock = builder(&store).build().unwrap();
    let started = Instant::now();
    assert!(!lock
        .acquire_interruptibly(Some(MS(600)), &|| false)
        .in_time()
        .unwrap());
    assert!(started.elapsed() >= MS(600));
    assert_eq!(
        store.creates.load(Ordering::SeqCst),
        1,
        "only the first attempt creates"
    );
    assert_eq!(store.writes(), 1);
    let reads = store.gets.load(Ordering::SeqCst);
    assert!(
        (5..=31).contains(&reads),
        "{reads} reads in 600 ms with waits of 20..100 ms"
    );
}

#[test]
fn a_released_lock_passes_to_a_waiter() {
    let store = FaithfulStore::new();
    let lock = Arc::new(builder(&store).build().unwrap());
    let guard = lock.acquire(None).unwrap();
    let first = guard.fencing_token();
    let waiter = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
            guard.fencing_token()
        })
    };
    thread::sleep(MS(150));
    drop(guard);
    assert!(waiter.join().unwrap() > first, "fencing tokens grow");
}

#[test]
fn the_same_identity_recovers_its_abandoned_lock_at_once() {
    let store = FaithfulStore::new();
    let make = || {
        builder(&store)
            .ttl(Duration::from_secs(60))
            .instance_identity_prefix("ci-runner-7")
            .thread_safe(false)
            .build()
            .unwrap()
    };
    let crashed = make();
    assert!(crashed
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    assert!(crashed.abandon());
    assert!(!crashed.locked_according_to_internal_state());
    let restarted = make();
    let started = Instant::now();
    assert!(restarted
        .acquire_interruptibly(Some(Duration::ZERO), &|| false)
        .in_time()
        .unwrap());
    assert!(started.elapsed() < MS(500));
    assert!(restarted.owned().unwrap());
}

/// Issue 21, case 6: a child forked from a process where lockyard ran never
/// has its parent's identity, whether it inherited the parent's lock or
/// built its own from the same settings (as pre-forking servers do), with a
/// prefix or without; a lock built afresh in the parent, as a restarted
/// program would, keeps the gem's identity and its instant recovery.
#[test]
fn forked_children_never_share_their_parents_identity() {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};

    let store = FaithfulStore::new();
    let make = || {
        builder(&store)
            .instance_identity_prefix("worker")
            .build()
            .unwrap()
    };
    let inherited = make();
    let unprefixed = builder(&store).build().unwrap();
    let parent = inherited.identity();
    assert!(parent.starts_with("worker/"), "{parent}");
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let seen = format!(
            "{}\n{}\n{}\n",
            inherited.identity(),
            make().identity(),
            unprefixed.identity()
        );
        unsafe {
            libc::write(fds[1], seen.as_ptr().cast(), seen.len());
            libc::_exit(0);
        }
    }
    unsafe { libc::close(fds[1]) };
    let mut seen = String::new();
    std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fds[0]) })
        .read_to_string(&mut seen)
        .unwrap();
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    let child: Vec<&str> = seen.lines().collect();
    let own = format!("worker-{pid}/");
    assert!(child[0].starts_with(&own), "inherited lock: {child:?}");
    assert!(
        child[1].starts_with(&own),
        "lock built in the child: {child:?}"
    );
    assert_ne!(child[2], unprefixed.identity());
    assert!(child[2].contains(&format!("-{pid}/")), "{child:?}");
    assert_eq!(
        make().identity(),
        parent,
        "a program started afresh keeps it"
    );
}

#[test]
fn a_stale_lock_is_taken_over_after_its_ttl_and_not_before() {
    let store = FaithfulStore::new();
    store.put("crashed", 1.0);
    let lock = builder(&store).build().unwrap();
    assert!(
        !lock
            .acquire_interruptibly(Some(MS(500)), &|| false)
            .in_time()
            .unwrap(),
        "free before its ttl"
    );
    let started = Instant::now();
    assert!(lock
        .acquire_interruptibly(Some(Duration::from_secs(5)), &|| false)
        .in_time()
        .unwrap());
    // Date has whole seconds: up to a second late, never early.
    assert!(started.elapsed() < MS(2200), "{:?}", started.elapsed());
    assert_eq!(store.object().unwrap().identity, Some(lock.identity()));
}

#[test]
fn a_paused_holder_turns_unhealthy_after_takeover_and_its_unlock_reports_false() {
    let store = FaithfulStore::new();
    let holder = builder(&store).refresh_interval(MS(100)).build().unwrap();
    assert!(holder
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    // Its next refresh hangs past the TTL, as if the process were paused:
    // past the `expires_at` it wrote last, which may be up to a second (the
    // resolution of `Date`) beyond the TTL.
    store.inject(Op::Update, Fault::Slow(MS(3500)), 1);
    let taker = {
        let store = store.clone();
        thread::spawn(move || {
            let lock = builder(&store).build().unwrap();
            assert!(lock
                .acquire_interruptibly(Some(Duration::from_secs(5)), &|| false)
                .in_time()
                .unwrap());
            let token = lock.fencing_token().unwrap();
            lock.abandon();
            token
        })
    };
    let taken_with = taker.join().unwrap();
    assert!(!holder.healthy(), "its lease ran out before the takeover");
    // The hung refresh lands after the takeover: 412, lost at once.
    thread::sleep(MS(1200));
    assert!(matches!(
        holder.check_health(),
        Err(Error::LockUnhealthy { .. })
    ));
    assert!(holder
        .last_refresh_error()
        .unwrap()
        .contains("another holder"));
    assert!(!holder.release().unwrap(), "it had been lost");
    let survivor = store.object().unwrap();
    assert_eq!(
        survivor.version.generation as u64, taken_with,
        "the new holder's object survives"
    );
}

fn block<T>(
    future: lockyard::gcs::StoreFuture<'_, T>,
) -> Result<lockyard::gcs::Reply<T>, StoreError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn deleting_with_an_old_version_never_removes_a_recreated_object() {
    let store = FaithfulStore::new();
    let old = store.put("a", 60.0);
    store.remove();
    let new = store.put("b", 60.0);
    assert_eq!(
        new.version.metageneration, old.version.metageneration,
        "metageneration restarts"
    );
    assert_eq!(
        block(store.delete(old.version)).unwrap_err(),
        StoreError::PreconditionFailed
    );
    assert!(store.object().is_some());
}

#[test]
fn a_deleted_lock_object_makes_the_holder_unhealthy_at_once() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(50)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.remove();
    thread::sleep(MS(200));
    assert!(!lock.healthy());
    assert!(lock.last_refresh_error().unwrap().contains("deleted"));
    assert!(!lock.release().unwrap());
}

#[test]
fn transient_failures_are_retried_and_never_taken_for_free_or_lost() {
    let store = FaithfulStore::new();
    store.inject(Op::Create, Fault::Unavailable, 2);
    store.inject(Op::Create, Fault::Reset, 1);
    let lock = builder(&store).refresh_interval(MS(50)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.inject(Op::Update, Fault::Unavailable, 2);
    thread::sleep(MS(400));
    assert!(lock.healthy(), "two failures in a row of three allowed");
    assert!(lock.last_refresh_error().unwrap().contains("503"));
    store.inject(Op::Delete, Fault::Unavailable, 1);
    assert!(lock.release().unwrap());
}

/// Polls `check` every 5 ms for up to `limit`.
fn eventually(limit: Duration, check: impl Fn() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if check() {
            return true;
        }
        thread::sleep(MS(5));
    }
    check()
}

#[test]
fn max_refresh_fails_transient_failures_in_a_row_make_it_unhealthy_until_one_lands() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(50)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.inject(Op::Update, Fault::Unavailable, 3);
    assert!(eventually(MS(600), || !lock.healthy()));
    assert!(lock
        .check_health()
        .unwrap_err()
        .to_string()
        .contains("3 refreshes in a row failed"));
    // The next refresh lands on our own version: nobody can have had it.
    assert!(eventually(MS(600), || lock.healthy()));
    assert!(lock.release().unwrap());
}

#[test]
fn a_refresh_whose_reply_was_lost_is_not_a_loss() {
    let store = FaithfulStore::new();
    let lock = builder(&store).refresh_interval(MS(50)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    store.inject(Op::Update, Fault::LoseReply, 1);
    thread::sleep(MS(300));
    assert!(lock.healthy());
    assert!(lock.release().unwrap());
    assert!(store.object().is_none());
}

#[test]
fn a_create_whose_reply_was_lost_is_recovered_by_identity() {
    let store = FaithfulStore::new();
    store.inject(Op::Create, Fault::LoseReply, 1);
    let lock = builder(&store).build().unwrap();
    assert!(lock
        .acquire_interruptibly(Some(Duration::ZERO), &|| false)
        .in_time()
        .unwrap());
    assert_eq!(store.object().unwrap().identity, Some(lock.identity()));
}

#[test]
fn slow_replies_count_as_transient() {
    let store = FaithfulStore::new();
    store.inject(Op::Create, Fault::Slow(MS(400)), 1);
    let lock = builder(&store).request_timeout(MS(100)).build().unwrap();
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    assert_eq!(store.creates.load(Ordering::SeqCst), 2);
}

#[test]
fn a_skewed_server_clock_changes_nothing() {
    for skew in [-3600.0, 3600.0] {
        let store = FaithfulStore::new();
        store.set_skew(skew);
        let holder = builder(&store).refresh_interval(MS(100)).build().unwrap();
        assert!(holder
            .acquire_interruptibly(None, &|| false)
            .in_time()
            .unwrap());
        let waiter = builder(&store).build().unwrap();
        thread::scope(|s| {
            s.spawn(|| {
                assert!(!waiter
                    .acquire_interruptibly(Some(Duration::from_secs(2)), &|| false)
                    .in_time()
                    .unwrap())
            });
        });
        assert!(holder.healthy(), "skew {skew}");
        assert!(holder.release().unwrap());
    }
}

#[test]
fn threads_racing_for_a_stale_lock_exclude_each_other() {
    let store = FaithfulStore::new();
    store.put("crashed", -1.0);
    let lock = Arc::new(builder(&store).build().unwrap());
    let inside = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (lock, inside) = (lock.clone(), inside.clone());
            thread::spawn(move || {
                for _ in 0..3 {
                    let guard = lock.acquire(Some(Duration::from_secs(20))).unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    thread::sleep(MS(5));
                    inside.store(false, Ordering::SeqCst);
                    assert!(guard.release().unwrap());
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn the_gems_rules_for_lock_and_unlock() {
    let store = FaithfulStore::new();
    let lock = builder(&store).build().unwrap();
    assert!(matches!(lock.release(), Err(Error::NotLocked(_))));
    assert!(matches!(lock.check_health(), Err(Error::NotLocked(_))));
    assert!(!lock.healthy());
    assert!(!lock.abandon());
    assert!(lock
        .acquire_interruptibly(None, &|| false)
        .in_time()
        .unwrap());
    assert!(matches!(
        lock.acquire_interruptibly(None, &|| false).in_time(),
        Err(Error::AlreadyLocked(_))
    ));
    assert!(lock.owned_according_to_internal_state() && lock.locked_according_to_internal_state());
    assert!(lock.owned().unwrap() && lock.locked().unwrap());
    thread::scope(|s| {
        s.spawn(|| {
            assert!(!lock.owned_according_to_internal_state());
            assert!(lock.locked_according_to_internal_state());
            assert!(!lock.owned().unwrap());
        });
    });
    assert!(lock.release().unwrap());
    assert!(!lock.locked().unwrap());
}

#[test]
fn an_interrupt_ends_a_wait() {
    let store = FaithfulStore::new();
    store.put("someone-else", 60.0);
    let lock = builder(&store).build().unwrap();
    let started = Instant::now();
    let interrupted = || started.elapsed() > MS(200);
    assert!(matches!(
        lock.acquire_interruptibly(None, &interrupted).in_time(),
        Err(Error::Interrupted(_))
    ));
    assert!(started.elapsed() < MS(400));
}

#[test]
fn bad_options_are_config_errors() {
    let store = FaithfulStore::new();
    let s = Duration::from_secs;
    let cases: Vec<(&str, LockBuilder)> = vec![
        ("empty bucket", Lock::builder("", "p")),
        ("empty path", Lock::builder("b", "")),
        ("zero ttl", builder(&store).ttl(Duration::ZERO)),
        (
            "refresh too slow",
            builder(&store).ttl(s(30)).refresh_interval(s(10)),
        ),
        (
            "no refresh failures allowed",
            builder(&store).max_refresh_fails(0),
        ),
        (
            "backoff_min > backoff_max",
            builder(&store).backoff_min(s(2)).backoff_max(s(1)),
        ),
        (
            "negative multiplier",
            builder(&store).backoff_multiplier(-1.0),
        ),
        ("unknown acl", builder(&store).object_acl("everyone")),
        ("empty prefix", builder(&store).instance_identity_prefix("")),
    ];
    for (case, builder) in cases {
        assert!(matches!(builder.build(), Err(Error::Config(_))), "{case}");
    }
    assert_eq!(store.requests(), 0);
}

/// Issue 16, item 10: periods past 30 days and waits past 100 years are
/// Config errors, never an `Instant` overflow (a panic).
#[test]
fn durations_out_of_range_are_config_errors() {
    let store = FaithfulStore::new();
    let huge = Duration::from_secs_f64(1e19);
    let days = |n: u64| Duration::from_secs(n * 24 * 3600);
    type Setter = fn(LockBuilder, Duration) -> LockBuilder;
    let too_long: [(&str, Setter); 5] = [
        ("ttl", |b, d| b.ttl(d)),
        ("backoff_min", |b, d| b.backoff_min(d).backoff_max(d)),
        ("backoff_max", |b, d| b.backoff_max(d)),
        ("request_timeout", |b, d| b.request_timeout(d)),
        ("timeout", |b, d| b.timeout(Some(d + lockyard::MAX_WAIT))),
    ];
    for (what, set) in too_long {
        for length in [days(31), huge] {
            let built = set(builder(&store), length).build();
            assert!(matches!(built, Err(Error::Config(_))), "{what} {length:?}");
        }
    }
    let lock = builder(&store).build().unwrap();
    for length in [huge, Duration::from_millis(u64::MAX), Duration::MAX] {
        assert!(matches!(lock.acquire(Some(length)), Err(Error::Config(_))));
    }
    assert_eq!(store.requests(), 0, "refused before any request");
    assert!(lock.acquire(Some(lockyard::MAX_WAIT)).is_ok());
}
