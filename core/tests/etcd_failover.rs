//! The etcd lock through member loss, leader change and restarts, on a
//! real 3-member cluster (and a single member restarted on its data dir).

mod etcd_support;

use std::time::{Duration, Instant};

use etcd_support::EtcdServer;
use lockyard::etcd::Lock;

fn cluster_url(members: &[EtcdServer]) -> String {
    let hosts: Vec<String> = members.iter().map(EtcdServer::endpoint).collect();
    format!("etcd://{}", hosts.join(","))
}

/// The member that is the cluster's leader now.
fn leader(members: &[EtcdServer]) -> usize {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        for (i, member) in members.iter().enumerate() {
            let (ok, out) = member.ctl(&["endpoint", "status", "-w", "json"]);
            if ok && out.contains("\"leader\"") {
                // Its own member id equals the leader id it reports.
                let id = field(&out, "member_id");
                if id.is_some() && id == field(&out, "leader") {
                    return i;
                }
            }
        }
        assert!(Instant::now() < until, "no leader");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn field(json: &str, name: &str) -> Option<String> {
    let at = json.find(&format!("\"{name}\":"))? + name.len() + 3;
    let digits: String = json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!digits.is_empty()).then_some(digits)
}

#[test]
fn killing_the_leader_mid_hold_keeps_one_healthy_holder_and_the_lock_usable() {
    let mut members = EtcdServer::cluster(3);
    let url = cluster_url(&members);
    let holder = Lock::builder(&url, "failover")
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let other = Lock::builder(&url, "failover")
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let guard = holder.acquire(Some(Duration::from_secs(10))).unwrap();
    let token = guard.fencing_token();

    let dead = leader(&members);
    members[dead].stop();
    // Through the election and past the ttl: keep-alives reach the new leader.
    let until = Instant::now() + Duration::from_secs(7);
    while Instant::now() < until {
        assert!(
            other.try_acquire().unwrap_or(None).is_none(),
            "a second holder during the failover"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(guard.healthy(), "{:?}", guard.check_health());
    assert!(guard.release().unwrap(), "the hold survived the failover");
    let next = other.acquire(Some(Duration::from_secs(10))).unwrap();
    assert!(next.fencing_token() > token);
    drop(next);
    members[dead].start_again();
}

#[test]
fn a_member_restarted_on_its_data_dir_keeps_the_hold() {
    let mut server = EtcdServer::start();
    let lock = Lock::builder(server.url(), "restart")
        .ttl(Duration::from_secs(6))
        .build()
        .unwrap();
    let guard = lock.acquire(None).unwrap();
    server.stop();
    std::thread::sleep(Duration::from_millis(500));
    server.start_again();
    server.wait_ready();
    let other = Lock::builder(server.url(), "restart").build().unwrap();
    assert!(
        other.try_acquire().unwrap().is_none(),
        "the grant survived the restart"
    );
    // A keep-alive lands after the restart: healthy well past the ttl.
    std::thread::sleep(Duration::from_secs(7));
    assert!(guard.healthy(), "{:?}", guard.check_health());
    assert!(guard.release().unwrap());
    assert!(server.keys().is_empty());
}

#[test]
fn a_waiter_is_served_through_a_leader_change() {
    let mut members = EtcdServer::cluster(3);
    let url = cluster_url(&members);
    let holder = Lock::builder(&url, "handoff")
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let waiter = Lock::builder(&url, "handoff")
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let guard = holder.acquire(None).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .acquire(Some(Duration::from_secs(30)))
                .map(|g| g.fencing_token())
        });
        std::thread::sleep(Duration::from_millis(500));
        let dead = leader(&members);
        members[dead].stop();
        std::thread::sleep(Duration::from_secs(2));
        drop(guard);
        let token = waiting.join().unwrap().expect("the waiter got the lock");
        assert!(token > 0);
    });
}
