//! `lockyard status`, `lockyard release` and `lockyard elect` as operators
//! and schedulers use them, against a real redis-server.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::*;

fn status_json(server: &RedisServer, name: &str) -> (i32, serde_json::Value) {
    let output = run(lockyard(server).args(["status", "--json", name]));
    (
        status(&output),
        serde_json::from_slice(&output.stdout).unwrap(),
    )
}

#[test]
fn status_shows_the_holder_while_held_and_exits_1_when_free() {
    let server = RedisServer::start();
    let (free, before) = status_json(&server, "deploy");
    assert_eq!(free, 1);
    assert_eq!(before["name"], "deploy");
    assert_eq!(before["holders"].as_array().unwrap().len(), 0);
    assert_eq!(before["waiters"], 0);

    let holder = holding(&server, "deploy", &["--ttl", "20"], "sleep 30");
    let (held, during) = status_json(&server, "deploy");
    assert_eq!(held, 0);
    let first = &during["holders"][0];
    assert!(first["fencing_token"].as_u64().unwrap() > 0);
    let left = first["expires_in_ms"].as_u64().unwrap();
    assert!((15_000..=20_000).contains(&left), "{left} ms left");
    let text = run(lockyard(&server).args(["status", "deploy"]));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("fencing token"), "{text}");

    stop(holder);
    let (free, after) = status_json(&server, "deploy");
    assert_eq!(free, 1);
    assert_eq!(after["holders"].as_array().unwrap().len(), 0);
}

#[test]
fn release_without_force_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let holder = holding(&server, "deploy", &[], "sleep 30");
    let refused = run(lockyard(&server).args(["release", "deploy"]));
    assert_eq!(status(&refused), 64);
    let message = String::from_utf8(refused.stderr).unwrap();
    assert!(message.contains("--force"), "{message}");
    assert!(held(&server, "deploy"));
    stop(holder);
}

#[test]
fn a_forced_release_lets_the_next_holder_in_with_a_larger_token() {
    let server = RedisServer::start();
    let holder = holding(
        &server,
        "deploy",
        &["--ttl", "5", "--grace", "0"],
        "sleep 30",
    );
    let (_, state) = status_json(&server, "deploy");
    let old_token = state["holders"][0]["fencing_token"].as_u64().unwrap();
    assert_eq!(
        status(&run(
            lockyard(&server).args(["release", "--force", "deploy"])
        )),
        0
    );
    let next = run(lockyard(&server).args([
        "lock",
        "--timeout",
        "0",
        "deploy",
        "--",
        "sh",
        "-c",
        "echo $LOCKYARD_FENCING_TOKEN",
    ]));
    assert_eq!(status(&next), 0);
    let token: u64 = String::from_utf8(next.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(token > old_token);
    stop(holder);
}

#[test]
fn a_second_elector_takes_over_when_the_leader_is_killed() {
    let server = RedisServer::start();
    let log = scratch("leaders");
    let elector = |id: &str| {
        let script = format!("echo {id} $$ >> {}; sleep 30", log.display());
        lockyard(&server)
            .args(["elect", "--ttl", "1", "--value", id, "scheduler", "--"])
            .args(["sh", "-c", &script])
            .spawn()
            .unwrap()
    };
    let leaders = || fs::read_to_string(&log).unwrap_or_default();
    let mut first = elector("first");
    eventually(Duration::from_secs(5), "the first elector leads", || {
        leaders().starts_with("first")
    });
    let second = elector("second");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!leaders().contains("second"), "two leaders at once");

    let killed = Instant::now();
    first.kill().unwrap();
    first.wait().unwrap();
    eventually(Duration::from_secs(4), "the second elector leads", || {
        leaders().contains("second")
    });
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
    // The first leader's command outlived its SIGKILLed lockyard; it leads
    // its own process group.
    let first_line = leaders().lines().next().unwrap().to_owned();
    let orphan: i32 = first_line.split(' ').nth(1).unwrap().parse().unwrap();
    // SAFETY: plain system call on a process group this test started.
    unsafe { libc::kill(-orphan, libc::SIGTERM) };
    stop(second);
}

#[test]
fn elect_with_bad_input_exits_64_and_writes_nothing() {
    let server = RedisServer::start();
    for args in [
        &["elect", "--value", "me", "bad{name}", "--", "true"][..],
        &["elect", "--value", "", "scheduler", "--", "true"],
        &[
            "elect",
            "--ttl",
            "0",
            "--value",
            "me",
            "scheduler",
            "--",
            "true",
        ],
        &["elect", "scheduler", "--", "true"],
    ] {
        assert_eq!(status(&run(lockyard(&server).args(args))), 64, "{args:?}");
    }
    assert!(
        server.keys().is_empty(),
        "bad input wrote {:?}",
        server.keys()
    );
}
