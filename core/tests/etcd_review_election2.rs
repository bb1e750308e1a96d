//! Second adversarial review of the etcd Election (after ff6e81a and
//! 3d4ff29): the observer's re-reads and revision guard, session health
//! capped by the bar lease, `is_passing` on gRPC Cancelled, and
//! `give_back` deciding a holder's bar from the lease's health.
//!
//! Each test states what must hold. Every test marked `// FINDING n` fails
//! on ddeee58 (run: `cargo test -p lockyard --test etcd_review_election2
//! -- --test-threads=1`), and its comment tells what that code does
//! instead; a test marked `// holds:` passes there and pins a property a
//! plausible regression could break.

mod etcd_support;

use std::time::{Duration, Instant};

use etcd_support::{began, ended, session_at, Act, EtcdServer, RuleProxy};
use lockyard::etcd::{Election, Session};

const NEVER: &dyn Fn() -> bool = &|| false;
const WAIT: Option<Duration> = Some(Duration::from_secs(5));

// holds: an observer rides out a graceful restart of its member.
//
// Must hold (`Observer::next_change`: "no member answering is waited out"
// until the deadline, "[`Error::Backend`] if etcd refuses the read or the
// watch"; the holds-test `an_observer_rides_out_a_restart_...` of the
// first review, which kills etcd with SIGKILL; the first review's FINDING
// 2, whose fix made `is_passing` take gRPC Cancelled and "connection is
// closing" as a member going away): an observer whose watch is open when
// its member is restarted by SIGTERM (`systemctl restart etcd`, a rolling
// upgrade) rides it out and reports the resign made afterwards.
#[test]
fn an_observer_rides_out_a_graceful_restart_of_its_member() {
    let mut server = EtcdServer::start();
    let url = server.url();
    let s = session_at(&url, 20, 0, 2);
    let e = Election::new(&url, "graceful-observer", &s).unwrap();
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
    server.signal("TERM");
    let during = observer.next_change(Some(Duration::from_millis(1500)), NEVER);
    server.stop();
    server.start_again();
    server.wait_ready();
    assert!(e.resign().unwrap());
    let after = if during.is_ok() {
        observer.next_change(Some(Duration::from_secs(10)), NEVER)
    } else {
        Ok(None)
    };
    assert!(
        matches!(during, Ok(None)) && matches!(&after, Ok(Some(t)) if *t == ended(token)),
        "while etcd shut down: {:?}; after the restart and the resign: {:?}",
        during.map_err(|e| e.to_string()),
        after.map_err(|e| e.to_string())
    );
}

// FINDING 1 (destroy() leaves the bars standing when its revoke's reply
// was lost: lock_delay after a clean destroy).
//
// Must hold (`Session::destroy`: "Frees every lock held under the session
// at once (no lock_delay): revokes its leases, so that its keys and bars
// go"; client.rs: "Every request the recipes send is safe to repeat after
// a lost reply"): a leader whose session is destroyed while the reply to
// the revoke of its lease is lost (the client sends it again, as it now
// also does for gRPC Cancelled, "connection is closing" and every
// unanswered attempt) leaves nothing in etcd, and another session leads
// at once.
//
// What happens: the revoke sent again finds the lease gone ("requested
// lease not found", its own first attempt having revoked it), and
// `Leases::end` takes that for "Lost meanwhile: its bars stand" and
// returns Ok(()) without revoking the bar lease. destroy() answers Ok, the
// bar stays on its lease (ttl + lock_delay: 35 s here) and the name stays
// barred for every other session: lock_delay applied to a clean destroy.
// The fix: a revoke answered "not found" after a resend (`call_tracked`'s
// flag) is the revoke, not a loss; go on to revoke the bar lease.
#[test]
fn a_destroy_whose_revoke_reply_was_lost_still_frees_the_name() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let url = proxy.url();
    let s = session_at(&url, 5, 30, 2);
    let e = Election::new(&url, "destroyed", &s).unwrap();
    assert!(e.campaign("node-a", Some(Duration::ZERO)).unwrap());
    assert_eq!(server.keys().len(), 2, "key and bar: {:?}", server.keys());
    proxy.rule("lease/revoke", Act::LoseReply, Some(1));
    let destroyed = s.destroy();
    assert_eq!(proxy.left("lease/revoke"), Some(0), "the reply was lost");
    assert!(destroyed.is_ok(), "{destroyed:?}");
    drop(e);
    let other = session_at(&server.url(), 5, 0, 2);
    let b = Election::new(&server.url(), "destroyed", &other).unwrap();
    let led = b.campaign("node-b", Some(Duration::from_secs(2)));
    assert!(
        matches!(led, Ok(true)),
        "after a destroy that answered Ok, another session's campaign of 2 s: {led:?}; \
         left in etcd: {:?}",
        server.keys()
    );
}

// FINDING 2 (before its first renewal a session is healthy past its bar
// lease: the grant is not capped).
//
// Must hold (leases.rs `keep_alive`: a session with a lock_delay is "Live
// only while a loss would still bar its names for the whole lock_delay";
// session.rs: "a lost session's bars outlive its keys by lock_delay"):
// a session's health never runs past the point where its bar lease, as
// etcd keeps it, has less than lock_delay left. Here the bar lease (ttl 2
// + lock_delay 1 = 3 s) is granted at t0, but its grant's reply takes
// 2.5 s to come back (a slow network; the client waits, within its 5 s
// request timeout); then no keep-alive gets through (a partition). The
// session may then be healthy until t0 + 2 s at most, and once it (and
// its leader) is unhealthy another session must not lead within the
// lock_delay (1 s).
//
// What happens: the session lease is granted after the bar lease's reply,
// at t0 + 2.5 s, and its health starts at its own grant's send time + ttl
// (t0 + 4.5 s), uncapped: `extend` caps only renewals, and `fetch_max`
// keeps the uncapped start. The bar lease runs out on etcd at t0 + 3 s,
// while the session and its leader still report healthy; when the session
// lease runs out (~t0 + 4.5 s) the name is free at once, and another
// session leads the moment the leader's health ends: no lock_delay at all.
// The fix: start the session's health (and valid_until) at
// min(own grant, bar grant's send time + ttl), or grant the session lease
// before the bar lease.
#[test]
fn a_session_whose_first_renewal_fails_is_not_healthy_past_its_bar_lease() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    // The bar lease's grant: {"ID":..,"TTL":3}.
    proxy.rule(
        "\"TTL\":3}",
        Act::HoldReply(Duration::from_millis(2500)),
        Some(1),
    );
    proxy.rule("lease/keepalive", Act::Refuse, None);
    let url = proxy.url();
    let t0 = Instant::now();
    let built = Session::builder(&url)
        .ttl(Duration::from_secs(2))
        .lock_delay(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(5))
        .build();
    let replied = t0.elapsed();
    assert!(
        replied >= Duration::from_millis(2400),
        "the bar grant's reply was held: {replied:?}"
    );
    // A session that is never healthy (or not built) keeps the rule.
    let Ok(s) = built else { return };
    // The lease is granted before its bar lease: held up this long, the
    // session is unhealthy as it is built, and nothing can lead under it.
    let Ok(e) = Election::new(&url, "first-renewal", &s) else {
        assert!(!s.healthy());
        return;
    };
    let led = e.campaign("node-a", Some(Duration::ZERO));
    let mut last_healthy = None;
    while t0.elapsed() < Duration::from_secs(10) {
        let now = t0.elapsed();
        if !s.healthy() {
            break;
        }
        last_healthy = Some(now);
        std::thread::sleep(Duration::from_millis(5));
    }
    let rival = session_at(&server.url(), 5, 0, 2);
    let b = Election::new(&server.url(), "first-renewal", &rival).unwrap();
    let rival_led = if matches!(led, Ok(true)) {
        b.campaign("node-b", Some(Duration::from_millis(800)))
            .map_err(|e| e.to_string())
    } else {
        Ok(false)
    };
    assert!(
        last_healthy.is_none_or(|t| t <= Duration::from_millis(2200))
            && matches!(rival_led, Ok(false)),
        "bar lease (3 s) granted at t0, its reply back at t0 + {replied:?}; the session \
         was last seen healthy at t0 + {last_healthy:?}; the leader's campaign: {:?}; \
         another session's campaign of 0.8 s once the leader was unhealthy: {rival_led:?}",
        led.map_err(|e| e.to_string())
    );
}

// FINDING 3 (a resign whose Txn lands after the lease ran out deletes the
// bar: lock_delay skipped).
//
// Must hold (grant.rs `give_back`: "a key gone from a lease that may have
// run out must leave its bar standing"; session.rs: "a lost session's
// bars outlive its keys by lock_delay"): a leader whose keep-alives stop
// getting through resigns while its session is still healthy, but its
// Txn reaches etcd only after the session lease ran out there (held up
// 3.5 s in the network, within the 5 s request timeout). The key was
// taken by the lease's end, not by the resign: the bar must stand for the
// lock_delay (10 s), and another session must not lead at once.
//
// What happens: `give_back` samples `grant.lease.health.is_healthy()`
// before sending, and the Txn's failure branch then deletes the bar
// whatever made the key go. resign() answers Ok(false) ("already lost")
// and the name is free at once. The fix: decide after the answer: delete
// the bar in the failure branch only if the lease is still surely live
// once the answer is in (health read after the reply, when etcd has
// applied the Txn), else leave it (or send a second, conditional Txn).
#[test]
fn a_resign_that_lands_after_the_lease_ran_out_leaves_the_bar() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let url = proxy.url();
    let s = session_at(&url, 2, 10, 5);
    let e = Election::new(&url, "late-resign", &s).unwrap();
    assert!(e.campaign("node-a", Some(Duration::ZERO)).unwrap());
    assert_eq!(server.keys().len(), 2, "key and bar: {:?}", server.keys());
    proxy.rule("lease/keepalive", Act::Refuse, None);
    proxy.rule(
        "request_delete_range",
        Act::HoldRequest(Duration::from_millis(3500)),
        Some(1),
    );
    assert!(e.is_leader(), "healthy when the resign begins");
    let resigned = e.resign().map_err(|e| e.to_string());
    let rival = session_at(&server.url(), 5, 0, 2);
    let b = Election::new(&server.url(), "late-resign", &rival).unwrap();
    let rival_led = b.campaign("node-b", Some(Duration::ZERO));
    assert!(
        matches!(rival_led, Ok(false)),
        "the resign (answered {resigned:?}) reached etcd after the session lease ran \
         out; another session's campaign right after: {rival_led:?}; left in etcd: {:?}",
        server.keys()
    );
}

// FINDING 4 (`lockyard release --force` reports "removed 0 holder(s)"
// after removing the holder, when its delete's reply was lost).
//
// Must hold (`force_release`: "Returns how many holders were removed";
// client.rs: "Every request the recipes send is safe to repeat after a
// lost reply": a repeat must not change the answer): force_release of a
// held election whose delete's reply is lost (the client sends it again,
// as it now also does on gRPC Cancelled and "connection is closing")
// answers 1.
//
// What happens: the repeat of the plain `kv/deleterange` finds the key
// gone (its first attempt deleted it) and answers `deleted: 0`, which is
// summed as is: Ok(0), and the CLI tells the operator it removed no one.
// The fix: delete with a Txn guarded by the key's create revision (read
// just before), and count a resent one that finds the key gone as removed
// (`call_tracked`'s flag, as `leave_holding` does).
#[test]
fn a_force_release_whose_reply_was_lost_counts_the_holder_it_removed() {
    let server = EtcdServer::start();
    let proxy = RuleProxy::start(server.client_port);
    let s = session_at(&server.url(), 10, 0, 2);
    let e = Election::new(&server.url(), "forced", &s).unwrap();
    assert!(e.campaign("node-a", Some(Duration::ZERO)).unwrap());
    proxy.rule("kv/deleterange", Act::LoseReply, Some(1));
    let removed = lockyard::etcd::force_release(&proxy.url(), "forced");
    assert_eq!(proxy.left("kv/deleterange"), Some(0), "the reply was lost");
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    assert!(
        matches!(removed, Ok(1)),
        "force_release removed the leader's key; it answered {removed:?}"
    );
}
