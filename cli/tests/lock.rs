//! `lockyard lock` as a user runs it: real processes against a real
//! redis-server.

mod common;

use std::fs;
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use common::*;

#[test]
fn two_commands_under_one_lock_never_overlap() {
    let server = RedisServer::start();
    let log = scratch("log");
    let script = format!(
        "for i in 1 2 3; do echo start >> {0}; sleep 0.05; echo end >> {0}; done",
        log.display()
    );
    let workers: Vec<Child> = (0..3)
        .map(|_| {
            lockyard(&server)
                .args(["lock", "--quiet", "shared", "--", "sh", "-c", &script])
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
    assert_eq!(lines.len(), 18);
    for pair in lines.chunks(2) {
        assert_eq!(pair, ["start", "end"], "overlap in {lines:?}");
    }
}

#[test]
fn the_exit_status_is_the_commands_own() {
    let server = RedisServer::start();
    let ok = run(lockyard(&server).args(["lock", "job", "--", "true"]));
    assert_eq!(status(&ok), 0);
    let failed = run(lockyard(&server).args(["lock", "job", "--", "sh", "-c", "exit 3"]));
    assert_eq!(status(&failed), 3);
    let killed = run(lockyard(&server).args(["lock", "job", "--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(status(&killed), 128 + 15);
    let env = run(lockyard(&server).args([
        "lock",
        "job",
        "--",
        "sh",
        "-c",
        "echo $LOCKYARD_NAME $LOCKYARD_FENCING_TOKEN",
    ]));
    let printed = String::from_utf8(env.stdout).unwrap();
    let [name, token] = printed.split_whitespace().collect::<Vec<_>>()[..] else {
        panic!("unexpected environment {printed:?}");
    };
    assert_eq!(name, "job");
    assert!(token.parse::<u64>().unwrap() > 0);
    assert!(!held(&server, "job"), "released after each command");
}

#[test]
fn bad_input_exits_64_without_starting_the_command_or_writing() {
    let server = RedisServer::start();
    let marker = scratch("started");
    let touch = format!("touch {}", marker.display());
    let cases: [&[&str]; 9] = [
        &[
            "lock",
            "--url",
            "http://127.0.0.1/",
            "job",
            "--",
            "sh",
            "-c",
            &touch,
        ],
        &["lock", "job", "sh", "-c", &touch],
        &["lock", "", "--", "sh", "-c", &touch],
        &["lock", "--limit", "0", "job", "--", "sh", "-c", &touch],
        &["lock", "--ttl", "0", "job", "--", "sh", "-c", &touch],
        &["lock", "--ttl", "-1", "job", "--", "sh", "-c", &touch],
        &["lock", "--bogus", "job", "--", "sh", "-c", &touch],
        &["lock", "job{x}", "--", "sh", "-c", &touch],
        &["frobnicate", "job"],
    ];
    for args in cases {
        let output = run(lockyard(&server).args(args));
        assert_eq!(status(&output), 64, "{args:?}");
        let message = String::from_utf8(output.stderr).unwrap();
        assert!(!message.trim().is_empty(), "{args:?} says nothing");
    }
    assert!(!marker.exists(), "a command was started");
    assert!(
        server.keys().is_empty(),
        "bad input wrote {:?}",
        server.keys()
    );
}

#[test]
fn an_unreachable_server_exits_69() {
    let port = free_port();
    let output = run(Command::new(program()).args([
        "lock",
        "--url",
        &format!("redis://127.0.0.1:{port}/0"),
        "job",
        "--",
        "true",
    ]));
    assert_eq!(status(&output), 69);
    let message = String::from_utf8(output.stderr).unwrap();
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains(&port.to_string()), "{message}");
}

#[test]
fn a_lock_held_by_another_exits_75_after_the_timeout() {
    let server = RedisServer::start();
    let holder = holding(&server, "deploy", &[], "sleep 30");
    let marker = scratch("started");
    let touch = format!("touch {}", marker.display());
    let once =
        run(lockyard(&server).args(["lock", "--timeout", "0", "deploy", "--", "sh", "-c", &touch]));
    assert_eq!(status(&once), 75);
    let started = Instant::now();
    let waited = run(lockyard(&server).args([
        "lock",
        "--timeout",
        "0.7",
        "deploy",
        "--",
        "sh",
        "-c",
        &touch,
    ]));
    assert_eq!(status(&waited), 75);
    assert!(started.elapsed() >= Duration::from_millis(700));
    let said = String::from_utf8(waited.stderr).unwrap();
    assert!(said.contains("held by"), "no waiting line in {said:?}");
    assert!(!marker.exists(), "the command ran without the lock");
    stop(holder);
}

#[test]
fn a_lost_lock_stops_the_commands_process_group_and_exits_76() {
    let server = RedisServer::start();
    let pid_file = scratch("grandchild");
    // The grandchild ignores SIGTERM: only the SIGKILL after --grace stops it.
    let script = format!(
        "sh -c 'trap \"\" TERM; echo $$ > {0}; sleep 30' & sleep 30",
        pid_file.display()
    );
    let mut holder = holding(&server, "deploy", &["--ttl", "1", "--grace", "1"], &script);
    eventually(Duration::from_secs(5), "the grandchild runs", || {
        fs::read_to_string(&pid_file).is_ok_and(|pid| pid.trim().parse::<i32>().is_ok())
    });
    let grandchild: i32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let started = Instant::now();
    let release = run(lockyard(&server).args(["release", "--force", "deploy"]));
    assert_eq!(status(&release), 0);
    // The next refresh (every ttl/9) finds the grant gone; then the grace.
    assert_eq!(wait_with_deadline(&mut holder, Duration::from_secs(4)), 76);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    eventually(Duration::from_secs(1), "the grandchild is gone", || {
        !alive(grandchild)
    });
}

#[test]
fn sigint_reaches_the_command_and_the_lock_is_released_after_it_exits() {
    let server = RedisServer::start();
    let log = scratch("log");
    let ready = scratch("ready");
    // Exits 7 a little after SIGINT, holding on while it cleans up (long
    // enough for `held` below to ask even through a slow entry point).
    let script = format!(
        "trap 'echo interrupted > {0}; sleep 1.5; kill $!; exit 7' INT; echo > {1}; sleep 30 & wait",
        log.display(),
        ready.display()
    );
    let mut holder = holding(&server, "deploy", &[], &script);
    eventually(Duration::from_secs(5), "the trap is set", || ready.exists());
    // SAFETY: plain system call on our own child.
    unsafe { libc::kill(holder.id() as i32, libc::SIGINT) };
    eventually(Duration::from_secs(2), "COMMAND got SIGINT", || {
        log.exists()
    });
    assert!(held(&server, "deploy"), "released before COMMAND exited");
    assert_eq!(wait_with_deadline(&mut holder, Duration::from_secs(5)), 7);
    assert!(!held(&server, "deploy"));
}

#[test]
fn a_limit_admits_that_many_commands_at_once() {
    let server = RedisServer::start();
    let first = holding(&server, "quota", &["--limit", "2"], "sleep 30");
    let try_once = [
        "lock",
        "--limit",
        "2",
        "--timeout",
        "0",
        "quota",
        "--",
        "true",
    ];
    assert_eq!(status(&run(lockyard(&server).args(try_once))), 0);
    let second = lockyard(&server)
        .args(["lock", "--limit", "2", "quota", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(5), "two slots are held", || {
        holders(&server, "quota") == 2
    });
    assert_eq!(status(&run(lockyard(&server).args(try_once))), 75);
    for child in [first, second] {
        stop(child);
    }
}

/// COMMAND starts as from a shell whichever entry point ran lockyard:
/// Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored
/// across exec (`yes | head` would then never end on a broken pipe).
#[test]
fn the_command_inherits_no_ignored_signals_from_the_entry_point() {
    let server = RedisServer::start();
    let output = run(lockyard(&server).args([
        "lock",
        "--quiet",
        "signals",
        "--",
        "sh",
        "-c",
        "grep SigIgn /proc/$$/status",
    ]));
    assert_eq!(status(&output), 0);
    let text = String::from_utf8_lossy(&output.stdout);
    let mask = u64::from_str_radix(text.trim().trim_start_matches("SigIgn:").trim(), 16)
        .unwrap_or_else(|_| panic!("no SigIgn line in {text:?}"));
    for (signal, name) in [(libc::SIGPIPE, "SIGPIPE"), (libc::SIGXFSZ, "SIGXFSZ")] {
        assert_eq!(mask >> (signal - 1) & 1, 0, "COMMAND ignores {name}");
    }
}

/// On a terminal the waiting line is redrawn in place (once a second) and
/// wiped before lockyard goes on; in a log it is a plain line (see
/// `operate.rs`).
#[test]
fn on_a_terminal_the_waiting_line_is_redrawn_in_place() {
    let server = RedisServer::start();
    let holder = holding(&server, "busy", &[], "sleep 30");
    let inner = format!(
        "LOCKYARD_URL={} {} lock --timeout 2.6 busy -- true",
        server.url(),
        program()
    );
    // `script` gives lockyard a pseudo-terminal as its stderr.
    let output = Command::new("script")
        .args(["-qefc", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    stop(holder);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(75), "{text:?}");
    let redraw = "\r\x1b[2Klockyard: waiting ";
    assert!(text.matches(redraw).count() >= 2, "not redrawn: {text:?}");
    assert_eq!(
        text.matches("lockyard: waiting ").count(),
        text.matches(redraw).count(),
        "a waiting line not drawn in place: {text:?}"
    );
    let first = text.find(redraw).unwrap();
    let wiped = text.rfind("\r\x1b[2K").unwrap();
    assert!(wiped > text.rfind(redraw).unwrap(), "not wiped: {text:?}");
    assert!(
        !text[first..wiped].contains('\n'),
        "new lines while waiting: {text:?}"
    );
    assert!(text[wiped..].contains("lockyard: "), "{text:?}");
}
