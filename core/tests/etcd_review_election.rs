//! Adversarial review of the etcd Election and exclusive workers (b913783).
//! Each test states what must hold. Every test marked `// FINDING n` fails
//! on b913783 (run: `cargo test -p lockyard --test etcd_review_election --
//! --test-threads=2`), and its comment tells what that code does instead; a
//! test marked `// holds:` passes there and pins a property a plausible
//! regression could break.

mod etcd_support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use etcd_support::{
    answer_parent, began, child_answer, ended, eventually, pipe, session_at, EtcdServer,
};
use lockyard::etcd::{exclusive, Election};
use lockyard::Error;

const NEVER: &dyn Fn() -> bool = &|| false;
const WAIT: Option<Duration> = Some(Duration::from_secs(5));

/// How many watches the member has had opened on it, from its /metrics.
fn watches_started(server: &EtcdServer) -> u64 {
    let mut conn = std::net::TcpStream::connect(server.endpoint()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        conn,
        "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n",
        server.endpoint()
    )
    .unwrap();
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    body.lines()
        .filter(|l| {
            l.starts_with("grpc_server_started_total") && l.contains("grpc_method=\"Watch\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn watchers_open(server: &EtcdServer) -> u64 {
    let mut conn = std::net::TcpStream::connect(server.endpoint()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        conn,
        "GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n",
        server.endpoint()
    )
    .unwrap();
    let mut body = String::new();
    let _ = conn.read_to_string(&mut body);
    body.lines()
        .find(|l| l.starts_with("etcd_debugging_mvcc_watcher_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .expect("etcd_debugging_mvcc_watcher_total in /metrics")
}

// FINDING 3 (an observer blind for 30 s while its member is frozen).
//
// Must hold (queue.rs `wait_turn`: "a member frozen under the watch
// (SIGSTOP, a partition that keeps TCP alive) sends nothing, not even an
// error", mended for waiters after etcd_review.rs
// `a_waiter_sees_a_release_while_the_member_it_watches_is_stopped`, which
// sees a release within 10 s): an observer whose watch sits on a member
// that freezes sees the next term, which the two other members commit,
// within a few request timeouts (2 s here).
//
// What happens: the Observer has no tick that reads the line while it
// watches, so it is blind until WATCH_RENEWAL (30 s) drops the silent
// watch. (The watch is then opened again with `Client::stream`, which has
// no request timeout and stays on the preferred member: a frozen member's
// kernel accepts the connection and the request waits forever. Here the
// session's keep-alive, on the same client, has moved `preferred` to a
// live member by then, so the observer recovers after ~30 s instead of
// never; that open has no bound of its own.)
#[test]
fn an_observer_whose_member_freezes_still_sees_the_next_term() {
    let members = EtcdServer::cluster(3);
    let all = format!(
        "etcd://{},{},{}",
        members[0].endpoint(),
        members[1].endpoint(),
        members[2].endpoint()
    );
    let others = format!("etcd://{},{}", members[1].endpoint(), members[2].endpoint());
    let watching = session_at(&all, 6, 0, 2);
    let observed = Election::new(&all, "frozen", &watching).unwrap();
    let mut observer = observed.observe();
    assert_eq!(
        observer.next_change(WAIT, NEVER).unwrap(),
        Some(ended(0)),
        "nobody leads yet"
    );
    // Opens the watch, on the first member.
    assert_eq!(
        observer
            .next_change(Some(Duration::from_millis(500)), NEVER)
            .unwrap(),
        None
    );
    members[0].signal("STOP");
    let campaigning = session_at(&others, 6, 0, 2);
    let b = Election::new(&others, "frozen", &campaigning).unwrap();
    assert!(b.campaign("node-b", Some(Duration::from_secs(20))).unwrap());
    let token = b.fencing_token().unwrap();
    let started = Instant::now();
    let seen = observer.next_change(Some(Duration::from_secs(12)), NEVER);
    let waited = started.elapsed();
    members[0].signal("CONT");
    assert_eq!(
        seen.map_err(|e| e.to_string()),
        Ok(Some(began("node-b", token))),
        "node-b has led for {waited:?} (committed by two of three members), yet \
         the observer watching the frozen member has not seen it"
    );
}

// FINDING 4 (a bar left behind by a resign, for the session's life).
//
// Must hold (the design: "a clean destroy() frees them at once", "nothing
// is left once every holder and waiter is gone"; queue.rs
// `leave_holding`: a bar whose key was deleted by hand "would bar the name
// as long as the session lives"): a leader whose key was deleted (by an
// operator's `etcdctl del`, not `lockyard release --force`) resigns; no
// session was lost, so no lock_delay applies, and another session can
// lead.
//
// What happens: the keep-alive (every ttl/3) finds the key gone first and
// marks the hold lost; the resign then runs with `was_live` false, so its
// Txn leaves the bar alone (as for a lost session), and nothing else ever
// deletes it: the bar rides on the bar lease that the live session keeps
// renewing. The name stays barred for every other session for as long as
// this one lives; only the review-5 fix's narrow case (a resign that
// starts before the keep-alive looked) deletes it.
#[test]
fn a_resign_after_the_keep_alive_saw_the_key_deleted_leaves_no_bar() {
    let server = EtcdServer::start();
    let url = server.url();
    let live = session_at(&url, 3, 2, 2);
    let a = Election::new(&url, "cut", &live).unwrap();
    assert!(a.campaign("node-a", WAIT).unwrap());
    let key = server
        .keys()
        .into_iter()
        .find(|k| k.starts_with("lockyard/cut/"))
        .unwrap();
    assert!(server.ctl(&["del", &key]).0);
    assert!(
        eventually(Duration::from_secs(5), || !a.is_leader()),
        "the keep-alive notices the deleted key"
    );
    assert!(!a.resign().unwrap(), "its key was gone");
    // Well past the bar lease's ttl + lock_delay (5 s): only a live
    // session's renewals can keep a bar now.
    std::thread::sleep(Duration::from_secs(6));
    assert!(live.healthy());
    let other = session_at(&url, 5, 0, 2);
    let b = Election::new(&url, "cut", &other).unwrap();
    let led = b.campaign("node-b", Some(Duration::from_secs(3)));
    assert!(
        matches!(led, Ok(true)),
        "nobody leads \"cut\", no session was lost, yet another session cannot lead: \
         {led:?}, keys {:?}",
        server.keys()
    );
}

// FINDING 1 (lock_delay silently gone after bar renewals fail).
//
// Must hold (the design: "a lost session's names stay closed for
// lock_delay after its lease ran out"; session.rs: the bar lease is
// "renewed right after the first and only while it is"; review 5's
// `a_session_whose_bar_lease_is_gone_stays_healthy`): a leader whose
// session can no longer bar its name (its bar lease ran out on etcd) is
// not a healthy leader: it would be replaced at once, with no lock_delay,
// when its session is lost.
//
// What happens: `renew_bars` answers true on any failure but "lease not
// found", so bar keep-alives that keep timing out (here: only those are
// held up, the session's own go through) are ignored; the bar lease runs
// out on etcd after ttl + lock_delay and its bar is deleted, while the
// leader stays healthy (its health follows the session lease alone). When
// the session is then lost, another session leads at once: the 20 s
// lock_delay never happens, and both report is_leader() at the same time.
#[test]
fn a_leader_whose_bar_lease_ran_out_is_not_healthy() {
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};
    let server = EtcdServer::start();
    let marker = Arc::new(Mutex::new("matches nothing".to_owned()));
    let proxy = etcd_support::Proxy::start_marking(server.client_port, marker.clone());
    let url = format!("etcd://127.0.0.1:{}", proxy.port);
    let s = session_at(&url, 6, 2, 2);
    let a = Election::new(&url, "unbarred", &s).unwrap();
    assert!(a.campaign("node-a", WAIT).unwrap());
    let bar = "lockyard/unbarred.bar".to_owned();
    assert!(server.keys().contains(&bar), "{:?}", server.keys());
    // The bar lease (ttl 6 + lock_delay 2): its keep-alives are held up
    // past their request timeout; the session lease's are not.
    let bar_lease = server.lease_granted_with(8);
    let id = i64::from_str_radix(&bar_lease, 16).unwrap();
    *marker.lock().unwrap() = format!("{{\"ID\":{id}}}");
    proxy.delay_ms.store(60_000, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(15), || !server.keys().contains(&bar)),
        "the bar lease ran out"
    );
    let still_leader = a.is_leader();
    // The session is lost now (a partition, say): its key goes.
    let session_lease = server.lease_granted_with(6);
    assert!(server.ctl(&["lease", "revoke", &session_lease]).0);
    let other = session_at(&server.url(), 5, 0, 2);
    let b = Election::new(&server.url(), "unbarred", &other).unwrap();
    let b_led = b.campaign("node-b", Some(Duration::ZERO)).unwrap();
    let both = still_leader && a.is_leader() && b.is_leader();
    proxy.down.store(true, Ordering::SeqCst);
    assert!(
        !still_leader,
        "the bar is gone from etcd, yet the election reports itself a healthy leader; \
         once its session was lost another session led at once (no 2 s lock_delay): \
         {b_led}; both is_leader() at the same time: {both}"
    );
}

// FINDING 2 (a waiting campaign fails on a graceful etcd restart).
//
// Must hold (etcd_review.rs `a_wait_rides_out_a_short_etcd_restart`: "a
// waiter with 40 s left rides out an etcd restart of a few seconds ...
// rather than failing with the first request that finds no member"; the
// design: a wait ends on its timeout, an interrupt, or its own lease
// lost): a standby campaigning for 40 s rides out a restart of the member
// by SIGTERM (`systemctl restart etcd`, a rolling upgrade) and leads when
// the leader resigns afterwards.
//
// What happens: while etcd shuts down, its gateway answers the waiter's
// read with `{"error": "grpc: the client connection is closing", "code":
// 1}` (gRPC Canceled). `is_passing` knows neither the code nor the text,
// so the client does not try again: the campaign fails at once with a
// non-transient Backend error "reading the lock: grpc: the client
// connection is closing". (The same `Queue::take` serves `Lock::acquire`.)
// Its key, handed to the stray sweep while etcd is down, is deleted only
// after the restart, and when the leader resigns first the observer
// reports a term for the campaign that failed (began("node-b"), then
// ended), and leader() names it meanwhile.
#[test]
fn a_waiting_campaign_rides_out_a_graceful_etcd_restart() {
    let mut server = EtcdServer::start();
    let url = server.url();
    let (sa, sb) = (session_at(&url, 20, 0, 2), session_at(&url, 20, 0, 2));
    let a = Election::new(&url, "graceful", &sa).unwrap();
    let b = Election::new(&url, "graceful", &sb).unwrap();
    assert!(a.campaign("node-a", Some(Duration::ZERO)).unwrap());
    let led = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| b.campaign("node-b", Some(Duration::from_secs(40))));
        assert!(eventually(Duration::from_secs(5), || server.keys().len() == 2));
        std::thread::sleep(Duration::from_millis(300));
        server.signal("TERM");
        std::thread::sleep(Duration::from_secs(2));
        server.stop();
        server.start_again();
        server.wait_ready();
        assert!(a.resign().unwrap());
        waiting.join().unwrap()
    });
    assert!(
        matches!(led, Ok(true)),
        "the standby's 40 s campaign across a 2 s graceful restart: {led:?}"
    );
}

// FINDING 5 (a refused watch makes the observer spin, never an error).
//
// Must hold (`Observer::next_change`: "[`Error::Backend`] if etcd refuses
// the watch"): with etcd's auth on and a user allowed the name's keys
// (`lockyard/jobs/` and its bar `lockyard/jobs.bar`, with which campaign,
// leader and the observer's first read all work), the observer's watch is
// refused (it spans `[lockyard/jobs.bar, lockyard/jobs/L1/)`, i.e. every
// other name `jobs.<x>` between them) and next_change says so.
//
// What happens: etcd answers the watch with `canceled: true` and a
// cancel_reason ("permission denied") but no compact_revision; the
// observer drops the watch and opens it again at once, with no pause and
// no error, in a tight loop (hundreds of watches a second on the member)
// until its deadline, then answers Ok(None) as if nothing had changed;
// the endless iterator (`observe()`) spins forever.
#[test]
fn an_observer_whose_watch_is_refused_fails_instead_of_spinning() {
    let server = EtcdServer::start();
    let root = ["--user=root:rootpw"];
    let ctl = |args: &[&str]| {
        let all: Vec<&str> = root.iter().chain(args).copied().collect();
        assert!(server.ctl(&all).0, "etcdctl {args:?}");
    };
    assert!(
        server
            .ctl(&["user", "add", "root", "--new-user-password=rootpw"])
            .0
    );
    assert!(server.ctl(&["auth", "enable"]).0);
    ctl(&["role", "add", "app"]);
    ctl(&[
        "role",
        "grant-permission",
        "app",
        "readwrite",
        "lockyard/jobs/",
        "--prefix=true",
    ]);
    ctl(&[
        "role",
        "grant-permission",
        "app",
        "readwrite",
        "lockyard/jobs.bar",
    ]);
    ctl(&["user", "add", "app", "--new-user-password=apppw"]);
    ctl(&["user", "grant-role", "app", "app"]);
    let url = format!("etcd://app:apppw@{}", server.endpoint());
    let s = session_at(&url, 5, 5, 2);
    let e = Election::new(&url, "jobs", &s).unwrap();
    assert!(e.campaign("node-a", WAIT).unwrap());
    assert_eq!(e.leader().unwrap().as_deref(), Some("node-a"));
    let token = e.fencing_token().unwrap();
    let mut observer = e.observe();
    assert_eq!(
        observer.next_change(WAIT, NEVER).unwrap(),
        Some(began("node-a", token))
    );
    let before = watches_started(&server);
    let got = observer.next_change(Some(Duration::from_secs(2)), NEVER);
    let opened = watches_started(&server) - before;
    assert!(
        matches!(got, Err(Error::Backend { .. })),
        "etcd refused the watch; next_change answered {got:?} after opening {opened} \
         watches in 2 s"
    );
}

// FINDING 8 (the first next_change overruns its deadline).
//
// Must hold (`Observer::next_change`: "Waits until `deadline` ... Ok(None)
// when the deadline passed first ... (no member answering is waited out,
// up to the deadline)"; `Lock::acquire` with the same deadline does end
// at it): the first next_change with 300 ms while no member answers ends
// at its deadline with Ok(None).
//
// What happens: the first look runs with no deadline at all (`until =
// None` whenever the deadline is not a resumed, spent one), so it takes
// the whole request timeout (connect_timeout, 2 s here and 5 s by
// default) and then fails with a Backend error.
#[test]
fn the_first_look_of_an_observer_keeps_its_deadline() {
    let mut server = EtcdServer::start();
    let url = server.url();
    let s = session_at(&url, 10, 0, 2);
    let e = Election::new(&url, "down", &s).unwrap();
    let mut observer = e.observe();
    server.stop();
    let started = Instant::now();
    let got = observer.next_change(Some(Duration::from_millis(300)), NEVER);
    let took = started.elapsed();
    server.start_again();
    server.wait_ready();
    assert!(
        took < Duration::from_secs(1) && matches!(got, Ok(None)),
        "next_change(300 ms) with no member answering took {took:?} and answered {:?}",
        got.map_err(|e| e.to_string())
    );
}

// FINDING 7 (a claim read on another thread).
//
// Must hold (`Claim::fencing_token`: "The grant's fencing token";
// `Claim::check_health`: "The session's health, which is the claim's"):
// a claim handed to a worker thread (a `Claim` is `Send`; the natural
// `for claim in exclusive(..) { pool.execute(move || run(claim)) }`)
// reports its grant's token and its health there.
//
// What happens: both ask the lock's per-thread hold of the calling
// thread: on any thread but the winner's `fencing_token()` is 0 (the
// `unwrap_or_default`) and `check_health()` is `NotLocked`, while the
// claim holds the task. (Its doc also says a claim dropped on another
// thread leaves the lock to the session; it is in fact released at once,
// since `Lock::drop` gives back every thread's hold.)
#[test]
fn a_claim_handed_to_another_thread_keeps_its_token_and_health() {
    let server = EtcdServer::start();
    let url = server.url();
    let s = session_at(&url, 5, 0, 2);
    let claim = exclusive(&url, ["task-1"], &s).next().unwrap().unwrap();
    let token = claim.fencing_token();
    assert!(token > 0 && claim.check_health().is_ok());
    let (seen_token, seen_health) = std::thread::spawn(move || {
        let seen = (
            claim.fencing_token(),
            claim.check_health().map_err(|e| e.to_string()),
        );
        drop(claim);
        seen
    })
    .join()
    .unwrap();
    assert_eq!(
        (seen_token, seen_health),
        (token, Ok(())),
        "the claim of task-1 (token {token}) read on a worker thread"
    );
}

// FINDING 6 (an observer kept across fork() is blind in the child).
//
// Must hold (DESIGN §4: "One lazily created tokio runtime, re-created
// after fork()"; the etcd Client keeps its HTTP connections per pid so a
// child never uses its parent's): an observer whose watch was open when
// the process forked goes on reporting changes in the child.
//
// What happens: the Observer keeps the parent's open watch (a reqwest
// response driven by the parent's runtime, which has no thread in the
// child); in the child it never yields anything, and only WATCH_RENEWAL
// (30 s) replaces it: the child misses the parent's resign for 30 s.
#[test]
fn an_observer_carried_into_a_forked_child_sees_the_next_change() {
    let server = EtcdServer::start();
    let url = server.url();
    let s = session_at(&url, 10, 0, 2);
    let e = Election::new(&url, "forked-observer", &s).unwrap();
    assert!(e.campaign("node-a", WAIT).unwrap());
    let token = e.fencing_token().unwrap();
    let mut observer = e.observe();
    assert_eq!(
        observer.next_change(WAIT, NEVER).unwrap(),
        Some(began("node-a", token))
    );
    // Opens the watch.
    assert_eq!(
        observer
            .next_change(Some(Duration::from_millis(300)), NEVER)
            .unwrap(),
        None
    );
    let fds = pipe();
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let got = observer.next_change(Some(Duration::from_secs(8)), NEVER);
        let seen = format!("{:?}\n", got.map_err(|e| e.to_string()));
        answer_parent(fds, &seen);
    }
    std::thread::sleep(Duration::from_millis(1000));
    assert!(e.resign().unwrap());
    let seen = child_answer(pid, fds, Duration::from_secs(20)).expect("the child hung");
    assert_eq!(
        seen.trim(),
        format!("{:?}", Ok::<_, String>(Some(ended(token)))),
        "the child's observer, 7 s after the parent resigned"
    );
}

// holds: a forked child neither ends nor shares its parent's term: its
// is_leader() is false, its campaign on the parent's session is refused
// (Config), its resign is NotLocked, and dropping its Election and Session
// leaves the parent leading and healthy with the same token.
#[test]
fn a_forked_child_cannot_end_or_share_its_parents_term() {
    let server = EtcdServer::start();
    let url = server.url();
    let s = session_at(&url, 3, 5, 2);
    let e = Election::new(&url, "forked", &s).unwrap();
    assert!(e.campaign("parent", WAIT).unwrap());
    let token = e.fencing_token().unwrap();
    let fds = pipe();
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let seen = format!(
            "{} {} {} {}\n",
            e.is_leader(),
            matches!(e.campaign("child", WAIT), Err(Error::Config(_))),
            matches!(e.resign(), Err(Error::NotLocked(_))),
            {
                drop(e);
                drop(s);
                "dropped"
            },
        );
        answer_parent(fds, &seen);
    }
    let seen = child_answer(pid, fds, Duration::from_secs(20)).expect("the child hung");
    assert_eq!(seen.trim(), "false true true dropped", "child");
    // Past the session's ttl: the parent's keep-alive goes on.
    std::thread::sleep(Duration::from_secs(4));
    assert!(e.is_leader() && e.check_health().is_ok());
    assert_eq!(e.fencing_token(), Some(token));
    assert_eq!(e.leader().unwrap().as_deref(), Some("parent"));
    assert!(e.resign().unwrap());
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

// holds: an observer rides out an etcd restart (its watch breaks, it
// watches again from the revision last seen) and reports a resign made
// after it, in order; dropping it closes its watch on the member.
#[test]
fn an_observer_rides_out_a_restart_and_closes_its_watch_when_dropped() {
    let mut server = EtcdServer::start();
    let url = server.url();
    let s = session_at(&url, 10, 0, 2);
    let e = Election::new(&url, "restart", &s).unwrap();
    assert!(e.campaign("node-a", WAIT).unwrap());
    let token = e.fencing_token().unwrap();
    let mut observer = e.observe();
    assert_eq!(
        observer.next_change(WAIT, NEVER).unwrap(),
        Some(began("node-a", token))
    );
    assert_eq!(
        observer
            .next_change(Some(Duration::from_millis(300)), NEVER)
            .unwrap(),
        None
    );
    server.stop();
    std::thread::sleep(Duration::from_secs(1));
    server.start_again();
    server.wait_ready();
    assert!(e.resign().unwrap());
    assert_eq!(
        observer
            .next_change(Some(Duration::from_secs(10)), NEVER)
            .unwrap(),
        Some(ended(token))
    );
    let open = watchers_open(&server);
    assert!(open >= 1, "the observer's watch is open: {open}");
    drop(observer);
    assert!(
        eventually(Duration::from_secs(5), || watchers_open(&server)
            == open - 1),
        "a dropped observer's watch stays open: {}",
        watchers_open(&server)
    );
}

// holds: a resign whose reply was lost (the client sends its Txn again,
// which finds the key gone) answers Ok(true), and under a session with a
// lock_delay it leaves no bar: another session leads at once.
#[test]
fn a_resign_whose_reply_was_lost_answers_true_and_leaves_no_bar() {
    use std::sync::atomic::Ordering;
    let server = EtcdServer::start();
    let proxy = etcd_support::Proxy::start(server.client_port, "request_delete_range");
    let url = format!("etcd://127.0.0.1:{}", proxy.port);
    let s = session_at(&url, 5, 20, 2);
    let e = Election::new(&url, "lost-reply", &s).unwrap();
    assert!(e.campaign("node-a", Some(Duration::ZERO)).unwrap());
    assert_eq!(server.keys().len(), 2, "key and bar: {:?}", server.keys());
    proxy.lose_next.store(true, Ordering::SeqCst);
    let resigned = e.resign();
    assert!(
        !proxy.lose_next.load(Ordering::SeqCst),
        "the reply was lost"
    );
    assert!(matches!(resigned, Ok(true)), "{resigned:?}");
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    let other = session_at(&server.url(), 5, 0, 2);
    let b = Election::new(&server.url(), "lost-reply", &other).unwrap();
    assert!(b.campaign("node-b", Some(Duration::ZERO)).unwrap());
    proxy.down.store(true, Ordering::SeqCst);
}

// holds: two threads campaigning on one Election object (under a session
// with a lock_delay) lead one after the other, never both: the second is
// granted only when the first term is resigned, each term has its own
// token, and nothing is left in line or barred after the last resign.
#[test]
fn two_threads_campaigning_on_one_election_lead_in_turn_and_leave_nothing() {
    let server = EtcdServer::start();
    let url = server.url();
    let s = session_at(&url, 5, 10, 2);
    let e = Election::new(&url, "threads", &s).unwrap();
    let first_token = std::thread::scope(|scope| {
        let one = scope.spawn(|| e.campaign("node-a", Some(Duration::from_secs(10))));
        let two = scope.spawn(|| e.campaign("node-a", Some(Duration::from_secs(10))));
        assert!(eventually(Duration::from_secs(5), || e.is_leader()));
        // One term, and the other campaign waiting in line behind it.
        assert!(eventually(Duration::from_secs(5), || server.keys().len() == 3));
        std::thread::sleep(Duration::from_millis(500));
        let first = e.fencing_token().unwrap();
        assert!(e.is_leader() && e.fencing_token() == Some(first));
        assert!(e.resign().unwrap());
        assert!(matches!(one.join().unwrap(), Ok(true)));
        assert!(matches!(two.join().unwrap(), Ok(true)));
        first
    });
    assert!(e.is_leader());
    assert!(e.fencing_token().unwrap() > first_token);
    assert!(matches!(
        e.campaign("node-a", WAIT),
        Err(Error::AlreadyLocked(_))
    ));
    assert!(e.resign().unwrap());
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    let other = session_at(&url, 5, 0, 2);
    let b = Election::new(&url, "threads", &other).unwrap();
    assert!(b.campaign("node-b", Some(Duration::ZERO)).unwrap());
}
