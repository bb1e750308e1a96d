//! The etcd lock against a real etcd member (Debian's etcd-server).

mod etcd_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_support::EtcdServer;
use lockyard::etcd::{holder, Lock};
use lockyard::Error;

fn lock(server: &EtcdServer, name: &str) -> Lock {
    Lock::builder(server.url(), name)
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[test]
fn a_lock_is_held_once_fenced_and_leaves_nothing_behind() {
    let server = EtcdServer::start();
    let first = lock(&server, "deploy");
    let second = lock(&server, "deploy");
    let guard = first.acquire(Some(Duration::from_secs(5))).unwrap();
    let token = guard.fencing_token();
    assert!(guard.healthy());
    guard.check_health().unwrap();
    assert!(first.owned().unwrap() && first.locked().unwrap());
    assert!(!second.owned().unwrap());
    assert_eq!(
        holder(&server.url(), "deploy").unwrap(),
        Some(first.identity())
    );
    assert!(second.try_acquire().unwrap().is_none());
    assert!(matches!(first.acquire(None), Err(Error::AlreadyLocked(_))));
    assert_eq!(
        server.keys().len(),
        1,
        "a failed try leaves no key: {:?}",
        server.keys()
    );
    assert!(guard.release().unwrap());
    assert!(!first.locked().unwrap());
    let again = second.try_acquire().unwrap().expect("free after release");
    assert!(again.fencing_token() > token);
    drop(again);
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    assert!(matches!(first.release(), Err(Error::NotLocked(_))));
}

#[test]
fn threads_sharing_one_lock_never_overlap_and_are_served_in_arrival_order() {
    let server = EtcdServer::start();
    let lock = Arc::new(lock(&server, "counter"));
    let inside = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let guard = lock.acquire(None).unwrap();
    let threads: Vec<_> = (0..6)
        .map(|i| {
            // Each waiter queues before the next starts.
            std::thread::sleep(Duration::from_millis(150));
            let (lock, inside, order) = (lock.clone(), inside.clone(), order.clone());
            std::thread::spawn(move || {
                let guard = lock.acquire(Some(Duration::from_secs(30))).unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(20));
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.fencing_token()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    drop(guard);
    let tokens: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(server.keys().is_empty());
}

#[test]
fn a_wait_that_times_out_or_is_interrupted_leaves_no_key() {
    let server = EtcdServer::start();
    let holder = lock(&server, "busy");
    let waiter = lock(&server, "busy");
    let _held = holder.acquire(None).unwrap();
    let started = Instant::now();
    let err = std::thread::scope(|s| {
        s.spawn(|| {
            waiter
                .acquire(Some(Duration::from_millis(400)))
                .err()
                .unwrap()
        })
        .join()
        .unwrap()
    });
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let asked = Instant::now();
    let err = std::thread::scope(|s| {
        s.spawn(|| {
            waiter
                .acquire_interruptibly(None, &|| asked.elapsed() > Duration::from_millis(300))
                .unwrap_err()
        })
        .join()
        .unwrap()
    });
    assert!(matches!(err, Error::Interrupted(_)), "{err}");
    let until = Instant::now() + Duration::from_secs(3);
    while server.keys().len() > 1 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        server.keys().len(),
        1,
        "only the holder's key: {:?}",
        server.keys()
    );
}

#[test]
fn a_holder_whose_lease_is_revoked_turns_unhealthy_and_its_release_says_so() {
    let server = EtcdServer::start();
    let lock = Lock::builder(server.url(), "revoked")
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let guard = lock.acquire(None).unwrap();
    for lease in server.leases() {
        assert!(server.ctl(&["lease", "revoke", &lease]).0);
    }
    let until = Instant::now() + Duration::from_secs(3);
    while guard.healthy() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !guard.healthy(),
        "still healthy after its lease was revoked"
    );
    assert!(matches!(
        guard.check_health(),
        Err(Error::LockUnhealthy { .. })
    ));
    assert!(
        !guard.release().unwrap(),
        "a release after the loss says so"
    );
    // The next acquire is granted a new lease, and holds.
    let again = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert!(again.healthy());
}

#[test]
fn a_holder_whose_key_is_deleted_turns_unhealthy() {
    let server = EtcdServer::start();
    let lock = Lock::builder(server.url(), "deleted")
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let guard = lock.acquire(None).unwrap();
    assert!(server.ctl(&["del", "--prefix", "lockyard/"]).0);
    let until = Instant::now() + Duration::from_secs(4);
    while guard.healthy() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!guard.healthy(), "still healthy after its key was deleted");
    assert!(!guard.release().unwrap());
}

#[test]
fn a_waiter_whose_own_lease_is_lost_gets_an_error_not_an_endless_wait() {
    let server = EtcdServer::start();
    let holder = Lock::builder(server.url(), "w")
        .ttl(Duration::from_secs(2))
        .build()
        .unwrap();
    let waiter = Lock::builder(server.url(), "w")
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    let _held = holder.acquire(None).unwrap();
    let waiting = std::thread::scope(|s| {
        let waiting = s.spawn(|| waiter.acquire(Some(Duration::from_secs(20))).err());
        std::thread::sleep(Duration::from_millis(500));
        let (_, out) = server.ctl(&["get", "--prefix", "lockyard/", "-w", "json"]);
        // Revoke the waiter's lease: the one with ttl 3.
        for lease in server.leases() {
            let (_, ttl) = server.ctl(&["lease", "timetolive", &lease]);
            if ttl.contains("granted with TTL(3s)") {
                assert!(server.ctl(&["lease", "revoke", &lease]).0, "{out}");
            }
        }
        waiting.join().unwrap()
    });
    let err = waiting.expect("the wait ended with an error");
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(err.to_string().contains("lease"), "{err}");
}

#[test]
fn bad_options_are_config_errors_before_anything_is_sent() {
    for url in ["etcd://", "redis://127.0.0.1:2379", "etcd://h:1/path"] {
        let err = Lock::builder(url, "x").build().err().unwrap();
        assert!(matches!(err, Error::Config(_)), "{url}: {err}");
    }
    let url = "etcd://127.0.0.1:1";
    for builder in [
        Lock::builder(url, ""),
        Lock::builder(url, "x").ttl(Duration::ZERO),
        Lock::builder(url, "x").ttl(Duration::from_secs_f64(1e19)),
        Lock::builder(url, "x").timeout(Some(Duration::from_secs_f64(1e19))),
    ] {
        let err = builder.build().err().unwrap();
        assert!(matches!(err, Error::Config(_)), "{err}");
    }
}

#[test]
fn unreachable_members_are_a_backend_error_naming_them_within_the_timeout() {
    let lock = Lock::builder("etcd://127.0.0.1:1,127.0.0.1:2", "x")
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = lock.acquire(Some(Duration::from_secs(3))).err().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, Error::Backend { .. }) || err.is_timeout(),
        "{err}"
    );
    if let Error::Backend { message, .. } = &err {
        assert!(
            message.contains("127.0.0.1:1") && message.contains("127.0.0.1:2"),
            "{message}"
        );
    }
}

#[test]
fn names_with_slashes_do_not_share_a_line() {
    let server = EtcdServer::start();
    let outer = lock(&server, "a");
    let inner = lock(&server, "a/b");
    let _outer = outer.acquire(None).unwrap();
    let _inner = inner.try_acquire().unwrap().expect("a/b is its own lock");
}

#[test]
fn inspect_shows_the_holder_and_its_waiters_and_force_release_removes_the_holder() {
    let server = EtcdServer::start();
    let holder_lock = lock(&server, "inspected");
    let waiter = lock(&server, "inspected");
    let guard = holder_lock.acquire(None).unwrap();
    let state = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .acquire(Some(Duration::from_secs(10)))
                .map(|g| g.fencing_token())
        });
        let until = Instant::now() + Duration::from_secs(3);
        while server.keys().len() < 2 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let state = lockyard::etcd::inspect(&server.url(), "inspected").unwrap();
        assert_eq!(
            lockyard::etcd::force_release(&server.url(), "inspected").unwrap(),
            1
        );
        let taken = waiting.join().unwrap().expect("the waiter took over");
        assert!(taken > guard.fencing_token());
        state
    });
    assert!(state.held());
    assert_eq!(state.waiters, 1);
    assert_eq!(state.holders[0].holder, holder_lock.identity());
    assert_eq!(state.holders[0].fencing_token, guard.fencing_token());
    assert!(state.holders[0].expires_in <= Duration::from_secs(5));
    let until = Instant::now() + Duration::from_secs(4);
    while guard.healthy() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!guard.healthy(), "a holder removed by force stays healthy");
    assert!(!guard.release().unwrap());
    assert!(!lockyard::etcd::inspect(&server.url(), "inspected")
        .unwrap()
        .held());
}

#[test]
fn etcds_with_a_private_ca_and_a_client_certificate_locks_and_anything_less_is_refused() {
    let server = EtcdServer::start_tls();
    let lock = Lock::builder(server.url(), "over-tls")
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let guard = lock.acquire(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(server.keys().len(), 1, "{:?}", server.keys());
    assert!(guard.check_health().is_ok());
    drop(guard);
    assert!(server.keys().is_empty(), "{:?}", server.keys());

    let port = server.client_port;
    let (ca, other_ca) = (server.tls_file("ca.pem"), server.tls_file("other-ca.pem"));
    let (cert, key) = (server.tls_file("client.pem"), server.tls_file("client.key"));
    let refused = |url: String, why: &str| {
        let lock = Lock::builder(url.as_str(), "over-tls")
            .connect_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let err = lock.try_acquire().err();
        assert!(
            matches!(err, Some(Error::Backend { .. })),
            "{why}: {url} gave {err:?}"
        );
    };
    // The system's roots do not know the test CA.
    refused(format!("etcds://127.0.0.1:{port}"), "no cacert");
    refused(
        format!("etcds://127.0.0.1:{port}?cacert={other_ca}&cert={cert}&key={key}"),
        "a CA that did not sign the member's certificate",
    );
    refused(
        format!("etcds://127.0.0.1:{port}?cacert={ca}"),
        "no client certificate for a member with --client-cert-auth",
    );
    refused(
        format!("etcd://127.0.0.1:{port}"),
        "plain HTTP to a TLS member",
    );
}
