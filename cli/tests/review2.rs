//! Review findings (review2) on `lockyard lock` as a process.

mod common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// COMMAND runs in its own process group with no tie to lockyard's life:
/// when lockyard itself is SIGKILLed (OOM killer, a CI runner killing the
/// job's process group, `kill -9`), COMMAND runs on after the lease ran out
/// and another `lockyard lock` took the name: two COMMANDs at once.
#[test]
fn a_sigkilled_lockyard_does_not_leave_its_command_running_unlocked() {
    let server = RedisServer::start();
    let pid_file = scratch("command-pid");
    let script = format!("echo $$ > {}; sleep 30", pid_file.display());
    let mut holder = holding(&server, "job", &["--ttl", "1"], &script);
    eventually(Duration::from_secs(5), "COMMAND runs", || {
        fs::read_to_string(&pid_file).is_ok_and(|p| p.trim().parse::<i32>().is_ok())
    });
    let command: i32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    eventually(Duration::from_secs(3), "the lease runs out", || {
        !held(&server, "job")
    });
    let still = alive(command);
    // SAFETY: cleanup of the process this test started.
    unsafe { libc::kill(command, libc::SIGKILL) };
    assert!(
        !still,
        "COMMAND (pid {command}) still runs after lockyard was killed and the lock ran out"
    );
}

/// COMMAND's own process group is not the terminal's foreground group: run
/// from an interactive shell, a COMMAND that reads the terminal is stopped
/// by SIGTTIN and lockyard waits for it forever, holding the lock.
#[test]
fn a_command_reading_the_terminal_is_not_stopped_by_sigttin() {
    let server = RedisServer::start();
    let pid_file = scratch("reader-pid");
    let inner = format!(
        "LOCKYARD_URL={} {} lock --quiet tty -- sh -c 'echo $$ > {}; read answer; echo got-$answer'",
        server.url(),
        program(),
        pid_file.display()
    );
    // `script` gives lockyard a pseudo-terminal as its controlling terminal.
    let mut session = Command::new("script")
        .args(["-qefc", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    {
        use std::io::Write;
        let stdin = session.stdin.as_mut().unwrap();
        let _ = stdin.write_all(b"yes\n");
        let _ = stdin.flush();
    }
    let started = Instant::now();
    let finished = loop {
        if session.try_wait().unwrap().is_some() {
            break true;
        }
        if started.elapsed() > Duration::from_secs(5) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !finished {
        // Cleanup: the stopped reader, then lockyard exits on its own.
        if let Ok(pid) = fs::read_to_string(&pid_file) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: the process this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = session.kill();
    }
    let output = session.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        finished && printed.contains("got-yes"),
        "COMMAND never read the terminal (stopped by SIGTTIN?): finished={finished}, output={printed:?}"
    );
}

/// On GCS the holder identity is `<hostname>-<pid>` (plus a thread number),
/// and a holder whose identity the object already names takes it over at
/// once (the gem's instant recovery). Two `lockyard lock` in containers
/// that share the hostname (host network / UTS) and each run lockyard with
/// the same pid (own pid namespace: here both are pid 1) are one holder:
/// both run COMMAND. Needs `unshare` (root) and a fake-gcs-server
/// (LOCKYARD_FAKE_GCS_SERVER).
#[test]
fn on_gcs_lockyards_with_the_same_hostname_and_pid_are_not_one_holder() {
    let Some(gcs) = common::gcs::start() else {
        return;
    };
    let in_own_pid_namespace = |args: &[&str]| {
        let mut command = Command::new("unshare");
        command
            .args(["--pid", "--fork", "--kill-child"])
            .arg(program())
            .args(["lock", "--url", "gs://locks/ci", "--quiet"])
            .args(args)
            .env_remove("LOCKYARD_URL")
            .env("STORAGE_EMULATOR_HOST", &gcs.host)
            .stdin(Stdio::null());
        command
    };
    let marker = scratch("first-runs");
    let script = format!("echo $PPID > {}; sleep 30", marker.display());
    let mut first = in_own_pid_namespace(&["deploy", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(10), "the first holds", || {
        marker.exists()
    });
    let lockyard_pid = fs::read_to_string(&marker).unwrap();
    let second = run(&mut in_own_pid_namespace(&[
        "--timeout",
        "0",
        "deploy",
        "--",
        "sh",
        "-c",
        "echo $PPID; exit 0",
    ]));
    first.kill().unwrap(); // --kill-child: its namespace goes with it
    first.wait().unwrap();
    assert_eq!(
        status(&second),
        75,
        "the second lockyard (pid {:?}) ran COMMAND while the first (pid {:?}) held the lock",
        String::from_utf8_lossy(&second.stdout).trim(),
        lockyard_pid.trim()
    );
}
