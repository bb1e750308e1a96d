//! `lockyard lock` on a quorum of Redis servers, on etcd and on Google
//! Cloud Storage.

mod common;

use std::fs;
use std::process::{Child, Command, Stdio};

use common::*;

fn lockyard_at(urls: &[String]) -> Command {
    let mut command = Command::new(program());
    command.env_remove("LOCKYARD_URL").arg("lock");
    for url in urls {
        command.args(["--url", url]);
    }
    command
}

/// Three `lockyard lock` appending start/end markers never overlap.
fn assert_exclusive(urls: &[String], extra_env: &[(&str, &str)]) {
    let log = scratch("log");
    let script = format!(
        "for i in 1 2; do echo start >> {0}; sleep 0.05; echo end >> {0}; done",
        log.display()
    );
    let workers: Vec<Child> = (0..3)
        .map(|_| {
            lockyard_at(urls)
                .envs(extra_env.iter().copied())
                .args(["--quiet", "shared", "--", "sh", "-c", &script])
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut worker in workers {
        assert_eq!(worker.wait().unwrap().code(), Some(0));
    }
    let lines: Vec<String> = fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 12);
    for pair in lines.chunks(2) {
        assert_eq!(pair, ["start", "end"], "overlap in {lines:?}");
    }
}

#[test]
fn on_a_quorum_writers_exclude_each_other_and_readers_share() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    assert_exclusive(&urls, &[]);

    let reader = lockyard_at(&urls)
        .args(["--read", "--quiet", "shared", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let second_reader = run(lockyard_at(&urls)
        .args(["--read", "--quiet", "--timeout", "5"])
        .args([
            "shared",
            "--",
            "sh",
            "-c",
            "test -z \"$LOCKYARD_FENCING_TOKEN\"",
        ]));
    assert_eq!(status(&second_reader), 0, "readers share, without a token");
    let writer = run(lockyard_at(&urls).args(["--timeout", "0", "shared", "--", "true"]));
    assert_eq!(status(&writer), 75, "a writer waits for the reader");
    stop(reader);

    let read_on_one = run(lockyard_at(&urls[..1]).args(["--read", "shared", "--", "true"]));
    assert_eq!(status(&read_on_one), 64, "--read needs a quorum");
}

#[test]
fn on_gcs_commands_exclude_each_other() {
    let Some(gcs) = common::gcs::start() else {
        return;
    };
    let urls = ["gs://locks/ci".to_owned()];
    assert_exclusive(&urls, &[("STORAGE_EMULATOR_HOST", &gcs.host)]);

    let missing = run(lockyard_at(&["gs://no-such-bucket/ci".to_owned()])
        .env("STORAGE_EMULATOR_HOST", &gcs.host)
        .args(["--timeout", "0", "job", "--", "true"]));
    assert!([64, 69].contains(&status(&missing)), "{missing:?}");
    let limit = run(lockyard_at(&urls).args(["--limit", "2", "job", "--", "true"]));
    assert_eq!(status(&limit), 64);
}

#[test]
fn on_a_quorum_status_shows_each_node_and_release_force_stops_the_holder() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let with_urls = |subcommand: &str| {
        let mut command = Command::new(program());
        command.arg(subcommand);
        for url in &urls {
            command.args(["--url", url]);
        }
        command
    };
    let free = run(with_urls("status").args(["--json", "deploy"]));
    assert_eq!(status(&free), 1);

    let mut holder = lockyard_at(&urls)
        .args([
            "--ttl", "1", "--grace", "0", "--quiet", "deploy", "--", "sleep", "30",
        ])
        .spawn()
        .unwrap();
    eventually(
        std::time::Duration::from_secs(5),
        "the lock is taken",
        || status(&run(with_urls("status").arg("deploy"))) == 0,
    );
    let held = run(with_urls("status").args(["--json", "deploy"]));
    let state: serde_json::Value = serde_json::from_slice(&held.stdout).unwrap();
    assert_eq!(state["holders"].as_array().unwrap().len(), 1, "{state}");
    assert_eq!(state["nodes"].as_array().unwrap().len(), 3);
    assert!(state["holders"][0]["expires_in_ms"].as_u64().unwrap() <= 1000);

    assert_eq!(
        status(&run(with_urls("release").args(["--force", "deploy"]))),
        0
    );
    assert_eq!(
        wait_with_deadline(&mut holder, std::time::Duration::from_secs(3)),
        76
    );
    assert_eq!(status(&run(with_urls("status").arg("deploy"))), 1);
}

#[test]
fn on_gcs_status_shows_the_object_and_release_force_stops_the_holder() {
    let Some(gcs) = common::gcs::start() else {
        return;
    };
    let url = "gs://locks/ci";
    let with_url = |subcommand: &str| {
        let mut command = Command::new(program());
        command
            .env("STORAGE_EMULATOR_HOST", &gcs.host)
            .args([subcommand, "--url", url]);
        command
    };
    assert_eq!(status(&run(with_url("status").arg("deploy"))), 1);
    let mut holder = with_url("lock")
        .args([
            "--ttl", "2", "--grace", "0", "--quiet", "deploy", "--", "sleep", "30",
        ])
        .spawn()
        .unwrap();
    eventually(
        std::time::Duration::from_secs(5),
        "the lock is taken",
        || status(&run(with_url("status").arg("deploy"))) == 0,
    );
    let held = run(with_url("status").args(["--json", "deploy"]));
    let state: serde_json::Value = serde_json::from_slice(&held.stdout).unwrap();
    let token = state["holders"][0]["fencing_token"].as_u64().unwrap();
    // The holder writes its expiry with room for clock differences, and
    // `Date` has whole seconds: up to a few seconds past the TTL.
    let left = state["holders"][0]["expires_in_ms"].as_u64().unwrap();
    assert!((1..=5000).contains(&left), "{state}");

    assert_eq!(
        status(&run(with_url("release").args(["--force", "deploy"]))),
        0
    );
    assert_eq!(
        wait_with_deadline(&mut holder, std::time::Duration::from_secs(4)),
        76
    );
    let next = run(with_url("lock").args([
        "--timeout",
        "0",
        "deploy",
        "--",
        "sh",
        "-c",
        "echo $LOCKYARD_FENCING_TOKEN",
    ]));
    assert_eq!(status(&next), 0);
    let next_token: u64 = String::from_utf8(next.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(next_token > token);
}

#[test]
fn on_etcd_commands_exclude_each_other() {
    let server = common::etcd::EtcdServer::start();
    assert_exclusive(&[server.url()], &[]);
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn on_etcd_a_limit_admits_that_many_commands_at_once() {
    let server = common::etcd::EtcdServer::start();
    let urls = [server.url()];
    let spawn_holder = || {
        lockyard_at(&urls)
            .args(["--limit", "2", "--quiet", "quota", "--", "sleep", "30"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let try_once = ["--limit", "2", "--timeout", "0", "quota", "--", "true"];
    let holders = [spawn_holder(), spawn_holder()];
    eventually(
        std::time::Duration::from_secs(5),
        "two slots are held",
        || server.keys().len() == 2,
    );
    assert_eq!(status(&run(lockyard_at(&urls).args(try_once))), 75);
    assert_eq!(server.keys().len(), 2, "a failed try leaves no key");
    for holder in holders {
        stop(holder); // the command ends its child and frees its slot
    }
    assert!(server.keys().is_empty(), "{:?}", server.keys());
    assert_eq!(status(&run(lockyard_at(&urls).args(try_once))), 0);
}

#[test]
fn on_etcd_status_shows_the_holder_and_release_force_stops_it() {
    let server = common::etcd::EtcdServer::start();
    let url = server.url();
    let with_url = |subcommand: &str| {
        let mut command = Command::new(program());
        command
            .env_remove("LOCKYARD_URL")
            .args([subcommand, "--url", &url]);
        command
    };
    assert_eq!(status(&run(with_url("status").arg("deploy"))), 1);
    let mut holder = with_url("lock")
        .args([
            "--ttl", "3", "--grace", "0", "--quiet", "deploy", "--", "sleep", "30",
        ])
        .spawn()
        .unwrap();
    eventually(
        std::time::Duration::from_secs(5),
        "the lock is taken",
        || status(&run(with_url("status").arg("deploy"))) == 0,
    );
    let held = run(with_url("status").args(["--json", "deploy"]));
    let state: serde_json::Value = serde_json::from_slice(&held.stdout).unwrap();
    let token = state["holders"][0]["fencing_token"].as_u64().unwrap();
    let left = state["holders"][0]["expires_in_ms"].as_u64().unwrap();
    assert!((1000..=3000).contains(&left), "{state}");
    assert!(
        state["holders"][0]["holder"]
            .as_str()
            .unwrap()
            .contains('-'),
        "{state}"
    );

    assert_eq!(
        status(&run(with_url("release").args(["--force", "deploy"]))),
        0
    );
    // The holder's keep-alive task finds its key gone within ttl/3.
    assert_eq!(
        wait_with_deadline(&mut holder, std::time::Duration::from_secs(4)),
        76
    );
    let next = run(with_url("lock").args([
        "--timeout",
        "0",
        "deploy",
        "--",
        "sh",
        "-c",
        "echo $LOCKYARD_FENCING_TOKEN",
    ]));
    assert_eq!(status(&next), 0);
    let next_token: u64 = String::from_utf8(next.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(next_token > token);
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}

#[test]
fn on_etcd_elect_runs_one_leader_at_a_time_and_hands_over_when_it_dies() {
    let server = common::etcd::EtcdServer::start();
    let url = server.url();
    let log = scratch("etcd-leaders");
    let elector = |id: &str| {
        let script = format!("echo {id} $$ >> {}; sleep 30", log.display());
        Command::new(program())
            .env_remove("LOCKYARD_URL")
            .args(["elect", "--url", &url, "--ttl", "2", "--quiet"])
            .args(["--value", id, "scheduler", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let leaders = || fs::read_to_string(&log).unwrap_or_default();
    let mut first = elector("first");
    eventually(
        std::time::Duration::from_secs(5),
        "the first elector leads",
        || leaders().starts_with("first"),
    );
    let second = elector("second");
    eventually(
        std::time::Duration::from_secs(5),
        "the second elector waits in line",
        || server.keys().len() == 2,
    );
    assert!(!leaders().contains("second"), "two leaders at once");
    let status_now = run(Command::new(program()).args(["status", "--url", &url, "scheduler"]));
    assert_eq!(status(&status_now), 0, "status sees the leader");

    // SIGKILL: no resign; the session's lease runs out after its ttl.
    first.kill().unwrap();
    first.wait().unwrap();
    eventually(
        std::time::Duration::from_secs(6),
        "the second elector leads",
        || leaders().contains("second"),
    );
    let first_line = leaders().lines().next().unwrap().to_owned();
    let orphan: i32 = first_line.split(' ').nth(1).unwrap().parse().unwrap();
    // SAFETY: plain system call on a process group this test started.
    unsafe { libc::kill(-orphan, libc::SIGTERM) };
    stop(second); // resigns and destroys its session
    assert!(server.keys().is_empty(), "{:?}", server.keys());
}
