//! Clients of two versions on one name, as during a rolling upgrade: this
//! version and the one before the short form (its scripts are kept in
//! tests/fixtures/scripts-before-short-form). The older scripts know only
//! the holders set: a name this version holds in the short form must make
//! them fail, never look free, or an upgrade would grant it twice.

mod support;

use std::time::Duration;

use lockyard::redis::{Lock, WaitGroup};
use support::RedisServer;

const OLD: &str = "tests/fixtures/scripts-before-short-form";

/// An older client's script `body` (prelude + body, as it sent them).
fn old_script(body: &str) -> redis::Script {
    let read = |file: &str| {
        std::fs::read_to_string(format!("{}/{OLD}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    redis::Script::new(&format!("{}{}", read("prelude.lua"), read(body)))
}

/// An older client's call of `body` on `name`: KEYS and the shared ARGV as
/// it sent them, then `args`.
fn old_call(
    server: &RedisServer,
    body: &str,
    name: &str,
    limit: u32,
    args: &[&str],
) -> redis::RedisResult<redis::Value> {
    let script = old_script(body);
    let mut invocation = script.prepare_invoke();
    for key in [
        "holders", "grants", "queue", "leases", "fence", "watchers", "bound", "delay", "value",
        "terms", "shape", "owners",
    ] {
        invocation.key(format!("lockyard:{{{name}}}:{key}"));
    }
    invocation
        .arg(format!("lockyard:{{{name}}}:wake:"))
        .arg(limit)
        .arg(0);
    for arg in args {
        invocation.arg(*arg);
    }
    invocation.invoke(&mut server.raw().unwrap())
}

/// An older client's try_acquire of a Lock: Ok(true) if granted.
fn old_try_acquire(server: &RedisServer, name: &str, token: &str) -> redis::RedisResult<bool> {
    let reply: Vec<i64> = redis::from_redis_value(old_call(
        server,
        "acquire.lua",
        name,
        1,
        &[token, "30000", "0", "2000", "", "1"],
    )?)?;
    Ok(reply[0] == 1)
}

#[test]
fn an_older_client_fails_on_a_name_held_in_the_short_form_and_never_takes_it() {
    let server = RedisServer::start();
    let lock = Lock::builder(server.url(), "upgrade").build().unwrap();
    let guard = lock.acquire(None).unwrap();
    assert_eq!(server.holders("upgrade").len(), 1);

    let tried = old_try_acquire(&server, "upgrade", "old-client");
    let error = tried.expect_err("an older client took a held name");
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");
    // Its waits, wait() and inspections fail the same way, and write
    // nothing: the holder keeps the name.
    let waited = old_call(
        &server,
        "acquire.lua",
        "upgrade",
        1,
        &["old-waiter", "30000", "2000", "2000", "", "1"],
    );
    assert!(waited.is_err());
    assert!(old_call(&server, "watch.lua", "upgrade", 1, &["old-watcher", "2000"]).is_err());
    assert!(old_call(&server, "inspect.lua", "upgrade", 1, &[""]).is_err());
    assert!(old_call(&server, "release.lua", "upgrade", 1, &["old-client"]).is_err());
    assert!(guard.healthy());
    assert!(lock.owned().unwrap());

    assert!(guard.release().unwrap());
    assert!(
        old_try_acquire(&server, "upgrade", "old-client").unwrap(),
        "free once released"
    );
}

#[test]
fn a_name_an_older_client_holds_is_held_for_this_version() {
    let server = RedisServer::start();
    assert!(old_try_acquire(&server, "mixed", "old-client").unwrap());
    let lock = Lock::builder(server.url(), "mixed").build().unwrap();
    assert!(lock.try_acquire().unwrap().is_none(), "two holders");
    let group = WaitGroup::builder(server.url(), "mixed", 2)
        .build()
        .unwrap();
    assert!(
        group.add(Some(Duration::ZERO), &|| false).is_err(),
        "a lock is not a group"
    );
    let released: i64 = redis::from_redis_value(
        old_call(&server, "release.lua", "mixed", 1, &["old-client"]).unwrap(),
    )
    .unwrap();
    assert_eq!(released, 1);
    assert!(lock.try_acquire().unwrap().is_some());
}

#[test]
fn a_spread_name_is_what_an_older_client_knows() {
    let server = RedisServer::start();
    let holder = Lock::builder(server.url(), "spread").build().unwrap();
    let guard = holder.acquire(None).unwrap();
    // Another caller of this version spreads the short form into the sets.
    let rival = Lock::builder(server.url(), "spread").build().unwrap();
    assert!(rival.try_acquire().unwrap().is_none());
    // Now an older client sees the holder, and is refused as before.
    assert!(!old_try_acquire(&server, "spread", "old-client").unwrap());
    assert!(guard.release().unwrap());
    assert!(old_try_acquire(&server, "spread", "old-client").unwrap());
}
