//! Review findings (review2): a WaitGroup's limit and keys around adopt()
//! and force_release().

mod support;

use std::time::Duration;

use lockyard::redis::{self, WaitGroup};
use support::{eventually, RedisServer};

const TTL: Duration = Duration::from_millis(600);

fn group(server: &RedisServer, name: &str, limit: u32) -> WaitGroup {
    WaitGroup::builder(server.url(), name, limit)
        .ttl(TTL)
        .build()
        .unwrap()
}

/// A name held by a WaitGroup of limit 1 with one waiter queued; `poke`
/// is then called on a group of the same name built with limit 3. Returns
/// the live holders afterwards.
fn holders_after(name: &str, poke: impl FnOnce(&WaitGroup)) -> usize {
    let server = RedisServer::start();
    let adder = group(&server, name, 1);
    let _token = adder.add(None, &|| false).unwrap();
    let (url, waited) = (server.url(), name.to_owned());
    let waiter = std::thread::spawn(move || {
        let g = WaitGroup::builder(url, waited, 1).ttl(TTL).build().unwrap();
        let got = g.add(Some(Duration::from_secs(3)), &|| false);
        std::thread::sleep(Duration::from_millis(300));
        got.is_ok()
    });
    eventually(Duration::from_secs(2), "the waiter queues", || {
        redis::inspect(&server.url(), name).unwrap().waiters == 1
    });
    poke(&group(&server, name, 3));
    let holders = redis::inspect(&server.url(), name).unwrap().holders.len();
    drop(waiter.join());
    holders
}

/// adopt.lua (like refresh, release and inspect) runs promote() with the
/// caller's limit, not the name's recorded one: a group built with a
/// larger limit admits queued waiters past the limit the name was taken
/// with. Only acquire.lua checks the recorded shape.
#[test]
fn adopt_from_a_group_with_a_larger_limit_never_overfills_the_name() {
    let holders = holders_after("quota", |bigger| {
        // A group of another limit may not adopt at all; before the fix it
        // answered Ok(false), admitting waiters with limit 3 on the way.
        let refused = bigger.adopt("no-such-token").unwrap_err();
        assert!(matches!(refused, lockyard::Error::Config(_)), "{refused}");
    });
    assert!(holders <= 1, "{holders} holders of a WaitGroup of limit 1");
}

/// The same through done() of a stale token (release.lua).
#[test]
fn done_from_a_group_with_a_larger_limit_never_overfills_the_name() {
    let holders = holders_after("quota-done", |bigger| {
        assert!(!bigger.done("no-such-token").unwrap());
    });
    assert!(
        holders <= 1,
        "done: {holders} holders of a WaitGroup of limit 1"
    );
}

/// The same through count() (inspect.lua), which reads as harmless.
#[test]
fn count_from_a_group_with_a_larger_limit_never_overfills_the_name() {
    let holders = holders_after("quota-count", |bigger| {
        bigger.count().unwrap();
    });
    assert!(
        holders <= 1,
        "count: {holders} holders of a WaitGroup of limit 1"
    );
}

/// force_release.lua drops holders and grants but not the `owners` entry
/// of an adopted slot (release, cancel and purge all go through
/// forget_grants, which does).
#[test]
fn force_release_of_an_adopted_slot_leaves_no_owners_entry() {
    let server = RedisServer::start();
    let adder = group(&server, "handed", 2);
    let worker = group(&server, "handed", 2);
    let token = adder.add(None, &|| false).unwrap();
    assert!(worker.adopt(&token).unwrap());
    assert_eq!(redis::force_release(&server.url(), "handed").unwrap(), 1);
    assert_eq!(server.keys(), ["lockyard:{handed}:fence"]);
    drop((adder, worker));
}

/// adopt.lua overwrites `owners` unconditionally: a second adopter takes
/// the slot from the first, which stays healthy (and keeps working) until
/// its next refresh finds code 2. A slot already adopted by a live
/// refresher elsewhere should not be adoptable again (or the first must
/// not count as healthy): two workers run on one slot of a limit-1 group.
#[test]
fn a_slot_adopted_by_one_worker_is_not_also_healthy_in_a_second() {
    let server = RedisServer::start();
    let adder = group(&server, "twice", 1);
    let first = WaitGroup::builder(server.url(), "twice", 1)
        .ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let second = group(&server, "twice", 1);
    let token = adder.add(None, &|| false).unwrap();
    assert!(first.adopt(&token).unwrap());
    let adopted_twice = second.adopt(&token).unwrap();
    assert!(
        !(adopted_twice && first.healthy(&token) && second.healthy(&token)),
        "two processes hold the one slot of a limit-1 group, both healthy"
    );
}
