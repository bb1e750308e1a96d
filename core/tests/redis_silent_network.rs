//! Callers' waits on a network gone silent (connections open, no byte
//! passing) or slow: the caller's timeout and interrupt bound them, not
//! the 10 s command timeout, and what a wait gave up on is given back.

mod support;

use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockyard::redis::{Election, Lock, Session, WaitGroup};
use lockyard::wait::InTime;
use lockyard::Error;
use support::{DelayProxy, RedisServer, StallProxy};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock(url: String, name: &str) -> Lock {
    Lock::builder(url, name)
        .ttl(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// A connection pooled first, so the silence meets it mid-use.
fn warm(lock: &Lock) {
    drop(lock.acquire(Some(MS(500))).unwrap());
}

#[test]
fn a_wait_ends_at_the_callers_timeout_when_the_network_goes_silent() {
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    let lock = lock(proxy.url(), "silent-wait");
    warm(&lock);
    proxy.silence_all();
    let started = Instant::now();
    let outcome = lock.acquire(Some(Duration::from_secs(1)));
    let waited = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Timeout { .. })),
        "{:?}",
        outcome.map(|_| ())
    );
    assert!(
        waited >= MS(950) && waited < MS(1600),
        "an acquire with timeout 1 s on a silent network took {waited:?}"
    );
}

#[test]
fn a_wait_group_wait_ends_at_the_callers_timeout_when_the_network_goes_silent() {
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    let group = WaitGroup::builder(proxy.url(), "silent-group", 2)
        .build()
        .unwrap();
    let slot = group.acquire(Some(MS(500))).unwrap();
    proxy.silence_all();
    let started = Instant::now();
    let idle = group.wait(Some(Duration::from_secs(1)));
    let waited = started.elapsed();
    assert!(matches!(idle, Ok(false)), "{idle:?}");
    assert!(waited < MS(1600), "wait(timeout=1 s) took {waited:?}");
    proxy.speak();
    drop(slot);
}

#[test]
fn an_observer_ends_at_the_callers_timeout_when_the_network_goes_silent() {
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    // The session reaches the server directly: only the observer's
    // requests cross the silence.
    let session = Session::builder(server.url())
        .ttl(Duration::from_secs(20))
        .build()
        .unwrap();
    let election = Election::new(&proxy.url(), "silent-election", &session).unwrap();
    let mut observer = election.observe();
    let first = observer.next_change(Some(MS(500)), &|| false).unwrap();
    assert!(first.is_some_and(|term| term.value.is_none()));
    proxy.silence_all();
    let started = Instant::now();
    let next = observer.next_change(Some(Duration::from_secs(1)), &|| false);
    let waited = started.elapsed();
    assert!(matches!(next, Ok(None)), "{next:?}");
    assert!(
        waited < MS(1600),
        "next_change(timeout=1 s) took {waited:?}"
    );
}

#[test]
fn a_grant_whose_reply_was_lost_is_given_back() {
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    let lost = lock(proxy.url(), "lost-reply");
    warm(&lost);
    // The acquire reaches the server and is granted; its answer is lost.
    proxy.silence_replies();
    let started = Instant::now();
    let outcome = lost.acquire(Some(MS(700))).map(|_| ());
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert!(started.elapsed() < MS(1300), "{:?}", started.elapsed());
    // Giving the grant back goes on in the background once answers pass
    // again: the name is free long before the grant's 20 s ttl.
    proxy.speak();
    let other = lock(server.url(), "lost-reply");
    let started = Instant::now();
    let guard = other.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the lost grant kept the name for {:?}",
        started.elapsed()
    );
    drop(guard);
}

extern "C" fn do_nothing(_: libc::c_int) {}

/// What a binding does on Ctrl-C or `Thread#raise`: the interrupt check
/// turns true and a signal, handled without SA_RESTART, reaches the thread.
#[test]
fn an_interrupt_ends_a_read_the_network_left_silent() {
    // SAFETY: a handler that does nothing, installed without SA_RESTART.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = do_nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()),
            0
        );
    }
    let server = RedisServer::start();
    let proxy = StallProxy::start(server.port);
    let lock = Arc::new(lock(proxy.url(), "silent-interrupt"));
    warm(&lock);
    proxy.silence_all();
    let interrupted = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (lock, interrupted) = (lock.clone(), interrupted.clone());
        std::thread::spawn(move || {
            let outcome = lock
                .acquire_interruptibly(None, &|| interrupted.load(Ordering::SeqCst))
                .in_time();
            (outcome, Instant::now())
        })
    };
    std::thread::sleep(MS(300));
    interrupted.store(true, Ordering::SeqCst);
    let sent = Instant::now();
    // SAFETY: the thread is alive until joined below.
    unsafe {
        libc::pthread_kill(waiter.as_pthread_t(), libc::SIGUSR2);
    }
    let (outcome, ended) = waiter.join().unwrap();
    assert!(matches!(outcome, Err(Error::Interrupted(_))), "{outcome:?}");
    let late = ended.duration_since(sent);
    assert!(
        late < MS(300),
        "the interrupt took {late:?} to end the wait"
    );
}

/// 100 ms each way: a wait that gives up before its answer comes leaves
/// nothing queued or held behind it.
#[test]
fn a_slow_network_costs_time_not_a_place_in_the_queue() {
    let server = RedisServer::start();
    let slow = DelayProxy::start(server.port, MS(100));
    let holder = lock(server.url(), "slow-link");
    let far = lock(slow.url(), "slow-link");
    let near = lock(server.url(), "slow-link");
    // Free: a wait with time to spare is granted across the slow link.
    drop(far.acquire(Some(Duration::from_secs(3))).unwrap());
    let held = holder.acquire(Some(MS(500))).unwrap();
    // Busy: the far wait gives up at its deadline, its request still on
    // the way or queued.
    let started = Instant::now();
    let outcome = far.acquire(Some(MS(150))).map(|_| ());
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    // Its timeout, plus a few of the link's 200 ms round trips: an answer
    // on its way gets three, and so does the give-back.
    assert!(started.elapsed() < MS(1500), "{:?}", started.elapsed());
    // Its place is given back in the background within a round trip or
    // two: the release hands the lock to the next live waiter, not to the
    // far one's stale place for its 2 s handoff window.
    std::thread::sleep(MS(1000));
    drop(held);
    let started = Instant::now();
    drop(near.acquire(Some(Duration::from_secs(5))).unwrap());
    assert!(
        started.elapsed() < MS(500),
        "the next waiter waited {:?}",
        started.elapsed()
    );
}
