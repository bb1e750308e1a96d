//! Adversarial review (fourth round) of the etcd backend: keys that carry
//! their shape (`lockyard/<name>/L1.<nonce>`, `G<limit>.<nonce>`) and the
//! oldest-key rule for `Error::Config`, the stray sweep of a resent
//! acquire, the wait for background work at exit, and `etcds://` URLs with
//! TLS files. Each test states what must hold; every test without a
//! `// holds:` comment fails at 0a44fe7, and its comment tells what that
//! code does instead.

mod etcd_support;

use std::sync::mpsc;
use std::time::Duration;

use etcd_support::{eventually, EtcdServer, LateMember};
use lockyard::etcd::{Lock, WaitGroup};

fn group_at(url: &str, name: &str, limit: u32, ttl: u64) -> WaitGroup {
    WaitGroup::builder(url, name, limit)
        .ttl(Duration::from_secs(ttl))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn lock_at(url: &str, name: &str, ttl: u64) -> Lock {
    Lock::builder(url, name)
        .ttl(Duration::from_secs(ttl))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Must hold (queue.rs module doc; the Redis contract,
/// tests/redis_wait_group.rs `a_lock_and_a_wait_group_of_one_name_refuse_each_other`):
/// a Lock and a WaitGroup of one name never hold it at the same time; the
/// second is refused with Config.
///
/// At 0a44fe7 a refused entry put its key first and deleted it after: with
/// that delete 4 s in flight, a lock waiter took over from the holder, the
/// refused group key became the name's oldest, and the group's next `add`
/// was granted a slot while the lock was held. Now the put is conditional
/// on no key of another shape (one Txn): a refused entry writes nothing,
/// which this test checks first.
#[test]
fn a_lock_and_a_wait_group_never_hold_one_name_at_once() {
    let server = EtcdServer::start();
    let name = "mixed-shapes";
    let first = lock_at(&server.url(), name, 30);
    let waiter = lock_at(&server.url(), name, 30);
    let refused_group = group_at(&server.url(), name, 2, 30);
    let quota = group_at(&server.url(), name, 2, 30);
    let guard = first.acquire(Some(Duration::from_secs(5))).unwrap();
    let refused = refused_group.add(Duration::from_secs(10), &|| false);
    assert!(
        matches!(refused, Err(lockyard::Error::Config(_))),
        "{refused:?}"
    );
    assert_eq!(
        server.keys().len(),
        1,
        "a refused entry wrote a key: {:?}",
        server.keys()
    );
    let (added, lock_held) = std::thread::scope(|s| {
        let (held_tx, held_rx) = mpsc::channel();
        let (end_tx, end_rx) = mpsc::channel::<()>();
        let waiter = &waiter;
        let waiting = s.spawn(move || {
            let held = waiter.acquire(Some(Duration::from_secs(10)));
            let ok = held.is_ok();
            held_tx.send(ok).unwrap();
            let _ = end_rx.recv_timeout(Duration::from_secs(10));
            drop(held);
        });
        assert!(
            eventually(Duration::from_secs(3), || server.keys().len() == 2),
            "the lock waiter's key never landed: {:?}",
            server.keys()
        );
        drop(guard);
        let lock_held = held_rx
            .recv_timeout(Duration::from_secs(3))
            .unwrap_or(false);
        let added = quota.add(Duration::from_secs(1), &|| false);
        end_tx.send(()).unwrap();
        waiting.join().unwrap();
        (added, lock_held)
    });
    assert!(lock_held, "the lock waiter did not take the lock");
    if let Ok(token) = &added {
        let _ = quota.done(token);
    }
    assert!(
        matches!(added, Err(lockyard::Error::Config(_))),
        "while a Lock held {name:?}, a WaitGroup of the same name was granted a slot: {added:?}"
    );
}

/// Must hold (`WaitGroup` doc: "a slot is freed only by
/// [`WaitGroup::done`], by its lease running out, or by the end of the
/// Slot guard"; `done`: "Frees the slot of `token`, whichever process took
/// it"; commit 99cf303: a late copy of a resent put "kept holding the
/// lock for as long as the process lived", now mended). A slot freed by
/// `done` from the worker the token was handed to stays free.
///
/// What happens: the adder's put was sent twice (the first member failed
/// mid-way), so `Grant.resent` is set; but the key is handed to the stray
/// sweep only by `grant::give_back` in the adder's own process (its own
/// `done`, `leave`, or a busy try). A token handed off is freed by the
/// worker's `done` (`Queue::remove`), which knows nothing of the resend:
/// the late copy of the put lands after it, on the adder's lease, which
/// the adder keeps alive. The slot is held again by nobody, for as long as
/// the adder lives (8 s here, past the 3 s ttl), and `count` says so.
#[test]
fn a_handed_off_slot_freed_by_done_stays_free_after_a_resent_add() {
    let server = EtcdServer::start();
    let member = LateMember::start(
        server.client_port,
        "request_put",
        Duration::from_millis(1500),
    );
    let url = format!(
        "etcd://127.0.0.1:{},127.0.0.1:{}",
        member.port, server.client_port
    );
    let adder = group_at(&url, "handed-off", 2, 3);
    let worker = group_at(&server.url(), "handed-off", 2, 30);
    let token = adder.add(Duration::from_secs(5), &|| false).unwrap();
    assert!(worker.done(&token).unwrap(), "done of a held slot");
    assert!(server.keys().is_empty(), "freed: {:?}", server.keys());
    std::thread::sleep(Duration::from_secs(8));
    let keys = server.keys();
    let count = worker.count().unwrap();
    assert!(
        keys.is_empty() && count == 0,
        "8 s after the worker's done freed the only slot, a slot is held by a key nobody \
         owns (the adder's first put, landed late, kept alive by the adder): {keys:?}, \
         count {count}"
    );
    drop(adder);
}

/// Must hold (`Lock::locked`: "Asks etcd whether anyone holds the lock";
/// commit 99cf303: "a name held with another shape is a ConfigError there
/// too", for `try_acquire`; admin `holder`: "The oldest key of the name
/// holds, whatever it was taken as"). On a name whose slot a WaitGroup
/// holds, `Lock::locked` answers true or Config, as `try_acquire` (Config)
/// and `etcd::holder` (the group's holder) do.
///
/// What happens: `Lock::locked` reads `Queue::holders`, which reads only
/// the lock's own key range (`L1.`): Ok(false), "nobody holds it", while
/// `try_acquire` of the same lock is refused with Config and
/// `etcd::holder` names the group's holder. Before 99cf303 it read every
/// key of the name and answered true.
#[test]
fn locked_on_a_name_a_wait_group_holds_is_not_false() {
    let server = EtcdServer::start();
    let quota = group_at(&server.url(), "held-as-group", 2, 30);
    let lock = lock_at(&server.url(), "held-as-group", 30);
    let token = quota.add(None, &|| false).unwrap();
    let locked = lock.locked();
    let tried = lock.try_acquire().map(|guard| guard.is_some());
    let holder = lockyard::etcd::holder(&server.url(), "held-as-group").unwrap();
    assert!(quota.done(&token).unwrap());
    assert!(
        matches!(tried, Err(lockyard::Error::Config(_))),
        "{tried:?}"
    );
    assert!(holder.is_some());
    assert!(
        matches!(locked, Ok(true) | Err(lockyard::Error::Config(_))),
        "Lock::locked answered {locked:?} ('nobody holds it') while a WaitGroup held the \
         name (holder: {holder:?}) and try_acquire answered {tried:?}"
    );
}

/// Must hold (target.rs: the URL "without its password, for messages";
/// its unit test `a_bad_url_is_a_config_error_that_hides_the_password`;
/// and before d70d375 `etcd://user:pa?ss@host` was a valid URL whose
/// password was "pa?ss"). A password never shows in an error message.
///
/// What happens: `Target::parse` now splits the query off at the first
/// '?', before the userinfo: a '?' in a password (valid before d70d375,
/// and not escaped by users who copy it from a secret store) makes the
/// rest of the URL a "query", the URL is refused, and the message shows
/// the URL unredacted (`redact` looks for the '@' only before the first
/// '?', finds none) plus, for etcds://, the tail of the password again as
/// the "unknown option".
#[test]
fn a_password_with_a_question_mark_never_shows_in_errors() {
    for url in [
        "etcd://ci:top?secret@127.0.0.1:2379",
        "etcds://ci:top?secret@127.0.0.1:2379",
        "etcds://ci:top?secret=1@127.0.0.1:2379",
    ] {
        let message = match Lock::builder(url, "x").build() {
            Ok(_) => continue,
            Err(e) => e.to_string(),
        };
        assert!(
            !message.contains("secret"),
            "{url}: the password shows in the error: {message}"
        );
    }
}

/// Must hold (target.rs module doc: "a file that cannot be read or parsed
/// ... is an [`Error::Config`], found before anything is sent"; commit
/// d70d375: "a missing or non-PEM file is a ConfigError before anything is
/// sent"). A cacert file whose PEM block is not a certificate is refused by
/// `build`.
///
/// What happens: `Tls::from_query` asks only that
/// `reqwest::Certificate::from_pem_bundle` finds a PEM block labelled
/// CERTIFICATE; its DER is not parsed there. `build` succeeds; the first
/// request fails to build its HTTP client (`Client::http`: "these cannot
/// fail here"), and every acquire is an `Error::Backend` ("building the
/// HTTP client failed") rather than the configuration error it is.
#[test]
fn a_cacert_that_is_not_a_certificate_is_a_config_error_at_build() {
    let dir = std::env::temp_dir().join(format!("lockyard-review4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("junk-ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let url = format!("etcds://127.0.0.1:1?cacert={}", ca.display());
    let built = Lock::builder(&url, "x")
        .connect_timeout(Duration::from_secs(1))
        .build();
    let used = built
        .as_ref()
        .map(|lock| lock.try_acquire().map(|guard| guard.is_some()));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        matches!(built, Err(lockyard::Error::Config(_))),
        "a cacert whose only block is not a certificate was accepted by build; the lock then \
         answered {used:?}"
    );
}

/// The child of the test below: takes a slot for a block, hands its
/// release to the background (what Ruby's finalizer of a group does) and
/// exits at once through C's `exit`, whose `atexit` runs
/// `finish_background_work`.
#[test]
fn child_process_entry() {
    let Ok(url) = std::env::var("LOCKYARD_REVIEW4_CHILD_URL") else {
        return;
    };
    let quota = group_at(&url, "exit-after-block", 2, 30);
    quota.enter(None, &|| false).unwrap();
    quota.release_blocks_in_background();
    std::process::exit(0);
}

/// Must hold (runtime.rs `Background`: "A release handed to the background
/// just before the process exits (a lock freed by Ruby's finalizers at
/// exit) would otherwise die with it and leave the lock to its `ttl`: so
/// the process waits for them at exit"; `WaitGroup::release_blocks_in_background`:
/// "Frees the slots of open blocks in the background"). A process that
/// frees its group's blocks in the background and exits leaves no slot.
///
/// What happens: the etcd group's `release_blocks_in_background` runs its
/// deletes with `runtime::spawn`, not `spawn_awaited` (the Lock's goes
/// through `spawn_blocking`, which is awaited, and so does the Redis
/// group's): `finish_background_work` at exit does not wait for it, the
/// process ends before the delete is sent, and the slot stays held until
/// its ttl (30 s here).
#[test]
fn a_group_block_freed_in_the_background_at_exit_is_freed() {
    let server = EtcdServer::start();
    for run in 0..3 {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_process_entry", "--nocapture"])
            .env("LOCKYARD_REVIEW4_CHILD_URL", server.url())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
        let keys = server.keys();
        assert!(
            keys.is_empty(),
            "run {run}: a process that freed its group's block in the background and exited \
             left the slot held (until its 30 s ttl): {keys:?}"
        );
    }
}
