//! Adversarial review of the etcd lock, against a real etcd (Debian's
//! etcd-server). Each test states what must hold.

mod etcd_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use etcd_support::{EtcdServer, Proxy};
use lockyard::etcd::Lock;
use lockyard::Error;

fn lock_ttl(url: &str, name: &str, ttl: u64) -> Lock {
    Lock::builder(url, name)
        .ttl(Duration::from_secs(ttl))
        .build()
        .unwrap()
}

/// Must hold: an acquire made after this process's lease is gone (revoked,
/// or expired while nothing was held) asks for a new lease and takes the
/// free lock. It must not fail because the keep-alive task has not noticed
/// the loss yet (it looks only every ttl/3: 10 s with a 30 s ttl).
#[test]
fn an_acquire_after_the_lease_was_revoked_takes_a_new_lease() {
    let server = EtcdServer::start();
    let lock = lock_ttl(&server.url(), "revoked-idle", 30);
    drop(lock.acquire(Some(Duration::from_secs(5))).unwrap());
    let leases = server.leases();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert!(server.ctl(&["lease", "revoke", &leases[0]]).0);
    let got = lock.acquire(Some(Duration::from_secs(5)));
    assert!(got.is_ok(), "the lock is free, yet: {}", got.err().unwrap());
}

/// Must hold: a waiter whose watch sits on a member that stops answering
/// (SIGSTOP: its kernel still keeps the TCP connection open, and answers
/// TCP keep-alive probes) still sees a release committed through the other
/// two members within about a request timeout (connect_timeout, 2 s here),
/// not only when its watch is renewed after 30 s (`WATCH_RENEWAL`).
#[test]
fn a_waiter_sees_a_release_while_the_member_it_watches_is_stopped() {
    let members = EtcdServer::cluster(3);
    let all = format!(
        "etcd://{},{},{}",
        members[0].endpoint(),
        members[1].endpoint(),
        members[2].endpoint()
    );
    let others = format!("etcd://{},{}", members[1].endpoint(), members[2].endpoint());
    let holder = lock_ttl(&others, "stopped-member", 6);
    let waiter = Lock::builder(all.as_str(), "stopped-member")
        .ttl(Duration::from_secs(6))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let held = holder.acquire(Some(Duration::from_secs(5))).unwrap();
    let waited = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter.acquire(Some(Duration::from_secs(45)));
            (got.map(drop), Instant::now())
        });
        std::thread::sleep(Duration::from_millis(1500));
        members[0].signal("STOP");
        std::thread::sleep(Duration::from_millis(1500));
        let released_at = Instant::now();
        assert!(held.release().unwrap());
        let (got, at) = waiting.join().unwrap();
        members[0].signal("CONT");
        got.unwrap();
        at - released_at
    });
    assert!(
        waited < Duration::from_secs(10),
        "the waiter took {waited:?} to see the release"
    );
}

/// Must hold: a waiter with 40 s left rides out an etcd restart of a few
/// seconds (its key and the holder's stay: leases survive a restart) and
/// takes the lock when the holder releases, rather than failing with the
/// first request that finds no member.
#[test]
fn a_wait_rides_out_a_short_etcd_restart() {
    let mut server = EtcdServer::start();
    let url = server.url();
    let holder = lock_ttl(&url, "restart", 20);
    let waiter = Lock::builder(url.as_str(), "restart")
        .ttl(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let held = holder.acquire(Some(Duration::from_secs(5))).unwrap();
    let got = std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.acquire(Some(Duration::from_secs(40))).map(drop));
        std::thread::sleep(Duration::from_millis(800));
        server.stop();
        std::thread::sleep(Duration::from_secs(3));
        server.start_again();
        server.wait_ready();
        assert!(held.release().unwrap());
        waiting.join().unwrap()
    });
    got.unwrap();
}

/// Must hold: a wait's timeout over 100 years (MAX_WAIT) passed to
/// `acquire` is Error::Config at once, as every other backend answers
/// (they call `Deadline::check`); the etcd lock treats it as "forever".
#[test]
fn an_acquire_timeout_over_100_years_is_a_config_error() {
    let lock = Lock::builder("etcd://127.0.0.1:1", "x")
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = lock
        .acquire(Some(Duration::from_secs(200 * 365 * 24 * 3600)))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

/// Must hold: the key of a wait that failed during an etcd outage is
/// deleted once etcd is back, however long the outage lasted. The key
/// rides on this process's lease, which etcd keeps through a restart and
/// this process keeps alive: left behind, it holds its place (here: the
/// lock itself) for as long as the process lives. The keep-alive task
/// forgot strays after `STRAY_WATCH` (then 60 s, now 20 s) even when it never managed to
/// delete them, and it sweeps only after a keep-alive that succeeded.
#[test]
fn a_wait_that_failed_during_a_long_outage_leaves_no_key_once_etcd_is_back() {
    let mut server = EtcdServer::start();
    let url = server.url();
    let holder = lock_ttl(&url, "outage", 20);
    let waiter = Lock::builder(url.as_str(), "outage")
        .ttl(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let held = holder.acquire(Some(Duration::from_secs(5))).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.acquire(Some(Duration::from_secs(5))).map(drop));
        std::thread::sleep(Duration::from_millis(800));
        server.stop();
        assert!(waiting.join().unwrap().is_err(), "no etcd: the wait fails");
    });
    std::thread::sleep(Duration::from_secs(22));
    server.start_again();
    server.wait_ready();
    assert!(
        held.release().unwrap(),
        "the holder's lease survived the restart"
    );
    let third = lock_ttl(&url, "outage", 7);
    let got = third.acquire(Some(Duration::from_secs(15)));
    assert!(
        got.is_ok(),
        "the lock is still taken by the failed wait's key {:?}: {}",
        server.keys(),
        got.err().unwrap()
    );
}

/// Must hold (`LockBuilder::build`'s own doc): a ttl under 1 s is
/// Error::Config at build; it is silently rounded up to 1 s.
#[test]
fn a_ttl_under_one_second_is_a_config_error() {
    let built = Lock::builder("etcd://127.0.0.1:1", "x")
        .ttl(Duration::from_millis(500))
        .build();
    assert!(matches!(built, Err(Error::Config(_))), "built");
}

/// Must hold: two lock objects built with different credentials for the
/// same members each act with their own. The process's leases are shared by
/// the URL as shown (`user:***@`, password hidden), so the second lock's
/// leases are granted and kept alive with the first lock's client: its
/// password (wrong here; after a rotation, the old one), its
/// connect_timeout.
#[test]
fn locks_with_different_passwords_do_not_share_one_client_for_their_leases() {
    let server = EtcdServer::start();
    assert!(
        server
            .ctl(&["user", "add", "root", "--new-user-password=rootpw"])
            .0
    );
    assert!(server.ctl(&["auth", "enable"]).0);
    let wrong = format!("etcd://root:wrong@{}", server.endpoint());
    let right = format!("etcd://root:rootpw@{}", server.endpoint());
    let stale = lock_ttl(&wrong, "a", 10);
    let lock = lock_ttl(&right, "b", 10);
    let got = lock.acquire(Some(Duration::from_secs(5))).map(drop);
    drop(stale);
    got.unwrap();
}

/// Must hold: a release that failed because etcd was down (the caller got
/// an error, its hold is gone from the lock object) is finished once etcd
/// is back, however long the outage lasted. The first version handed the key to the
/// keep-alive task as a stray, forgotten after `STRAY_WATCH` (then 60 s) without ever being
/// deleted, and kept alive with the process's lease: the lock stayed held
/// by nobody for as long as the process lived.
#[test]
fn a_release_that_failed_during_a_long_outage_frees_the_lock_once_etcd_is_back() {
    let mut server = EtcdServer::start();
    let url = server.url();
    let holder = Lock::builder(url.as_str(), "outage-release")
        .ttl(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let held = holder.acquire(Some(Duration::from_secs(5))).unwrap();
    server.stop();
    assert!(held.release().is_err(), "no etcd: the release fails");
    std::thread::sleep(Duration::from_secs(22));
    server.start_again();
    server.wait_ready();
    let other = lock_ttl(&url, "outage-release", 7);
    let got = other.acquire(Some(Duration::from_secs(15)));
    assert!(
        got.is_ok(),
        "the lock is still taken by the released key {:?}: {}",
        server.keys(),
        got.err().unwrap()
    );
}

/// Must hold: a release whose delete was committed but whose reply was
/// lost (the client retries it, as it retries every request) answers
/// Ok(true): the hold was kept to the end. In the first version the retried compare found
/// the key gone and answered Ok(false), "lost before it was released",
/// logging that another holder may have run meanwhile, which was false.
#[test]
fn a_release_whose_reply_was_lost_still_answers_true() {
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.client_port, "request_delete_range");
    let lock = lock_ttl(
        &format!("etcd://127.0.0.1:{}", proxy.port),
        "lost-reply",
        10,
    );
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    proxy.lose_next.store(true, Ordering::SeqCst);
    let released = guard.release().unwrap();
    assert!(
        !proxy.lose_next.load(Ordering::SeqCst),
        "the reply was lost"
    );
    assert!(server.keys().is_empty());
    assert!(
        released,
        "the hold was kept until the release, which answered Ok(false)"
    );
}

/// Must hold: a member that is not a valid host (a space, an unbracketed
/// IPv6 address, a bracket left open) is Error::Config at build, like the
/// other URL mistakes; the first version built it, and every request then failed with
/// reqwest's "builder error", retried until the request timeout and
/// reported as a transient Backend error ("no member answered").
#[test]
fn a_member_that_is_not_a_host_is_a_config_error_at_build() {
    for url in ["etcd://exa mple:2379", "etcd://::1", "etcd://[::1"] {
        let built = Lock::builder(url, "x").build();
        assert!(matches!(built, Err(Error::Config(_))), "{url} built");
    }
}

/// Must hold: a lease grant whose reply was lost leaves no second lease
/// behind (etcd keeps an orphan lease, with nothing to keep it alive, until
/// its ttl runs out: at most one ttl, minor).
#[test]
fn a_lease_grant_whose_reply_was_lost_leaves_no_lease_behind() {
    let server = EtcdServer::start();
    let proxy = Proxy::start(server.client_port, "\"TTL\"");
    let lock = lock_ttl(
        &format!("etcd://127.0.0.1:{}", proxy.port),
        "lost-grant",
        30,
    );
    proxy.lose_next.store(true, Ordering::SeqCst);
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(
        !proxy.lose_next.load(Ordering::SeqCst),
        "the reply was lost"
    );
    assert_eq!(server.leases().len(), 1, "{:?}", server.leases());
    drop(guard);
}
