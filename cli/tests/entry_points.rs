//! What an adversarial review of the three entry points (the binary, the
//! wheel's console script, the gem's executable) found, as tests; each runs
//! in every form through LOCKYARD_COMMAND (see scripts/test).

mod common;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Stdio};
use std::thread;
use std::time::Duration;

use common::*;

/// A pipe whose reading end is already closed: writing to the other end
/// fails with EPIPE, as when a log reader or `head` went away.
fn broken_pipe() -> Stdio {
    let mut ends = [0; 2];
    // SAFETY: pipe fills both descriptors, which are then owned here.
    assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(read);
    Stdio::from(write)
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: plain system call on our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
}

/// `nohup lockyard lock …` keeps running (and so does COMMAND) when the
/// terminal hangs up: an ignored SIGHUP stays ignored.
#[test]
fn a_signal_ignored_at_start_stays_ignored() {
    let server = RedisServer::start();
    let done = scratch("done");
    let mut command = lockyard(&server);
    command
        .args(["lock", "--quiet", "nohup", "--", "sh", "-c"])
        .arg(format!("sleep 0.5; echo done > {}", done.display()))
        .stdin(Stdio::null());
    // SAFETY: signal is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut holder = command.spawn().unwrap();
    eventually(Duration::from_secs(5), "the lock is taken", || {
        held(&server, "nohup")
    });
    signal(&holder, libc::SIGHUP);
    assert_eq!(wait_with_deadline(&mut holder, Duration::from_secs(5)), 0);
    assert!(done.exists(), "COMMAND did not run to its end");
}

/// A signal lockyard does not forward (here SIGUSR1) ends a waiting
/// lockyard as it ends any program: COMMAND never runs. (The gem's Ruby
/// used to defer it until COMMAND had run.)
#[test]
fn an_unforwarded_signal_while_waiting_ends_lockyard_without_running_the_command() {
    let server = RedisServer::start();
    let holder = holding(&server, "busy", &[], "sleep 30");
    let ran = scratch("ran");
    let mut waiter = lockyard(&server)
        .args(["lock", "--quiet", "busy", "--", "sh", "-c"])
        .arg(format!("echo ran > {}", ran.display()))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(5), "lockyard waits", || {
        let output = run(lockyard(&server).args(["status", "--json", "busy"]));
        let state: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        state["waiters"] == 1
    });
    signal(&waiter, libc::SIGUSR1);
    let status = waiter.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGUSR1), "{status:?}");
    stop(holder);
    thread::sleep(Duration::from_millis(200));
    assert!(!ran.exists(), "COMMAND ran after lockyard was told to die");
}

/// A lost lock still stops COMMAND and exits 76 when stderr is a broken
/// pipe (the message cannot be written; it used to panic first).
#[test]
fn a_lost_lock_with_stderr_gone_still_exits_76() {
    let server = RedisServer::start();
    let mut holder = lockyard(&server)
        .args(["lock", "--quiet", "--ttl", "1", "--grace", "1", "gone"])
        .args(["--", "sleep", "30"])
        .stdin(Stdio::null())
        .stderr(broken_pipe())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(5), "the lock is taken", || {
        held(&server, "gone")
    });
    let release = run(lockyard(&server).args(["release", "--force", "gone"]));
    assert_eq!(status(&release), 0);
    assert_eq!(wait_with_deadline(&mut holder, Duration::from_secs(5)), 76);
}

/// `lockyard status … | head -c0`: the reader is gone; the status is still
/// the answer (1: free), with no panic.
#[test]
fn status_into_a_broken_pipe_answers_without_a_panic() {
    let server = RedisServer::start();
    for args in [&["status", "free"][..], &["status", "--json", "free"]] {
        let output = lockyard(&server)
            .args(args)
            .stdin(Stdio::null())
            .stdout(broken_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panic"), "{args:?}: {err}");
    }
}

/// Every line lockyard writes to stderr is its own (`lockyard: …`), in
/// every form: no warning of the library beside it (the console script
/// used to add Python's logging of the lost lease).
#[test]
fn after_a_lost_lock_stderr_has_only_lockyards_lines() {
    let server = RedisServer::start();
    let mut holder = lockyard(&server)
        .args(["lock", "--quiet", "--ttl", "1", "--grace", "0", "lost"])
        .args(["--", "sleep", "30"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(5), "the lock is taken", || {
        held(&server, "lost")
    });
    assert_eq!(
        status(&run(lockyard(&server).args(["release", "--force", "lost"]))),
        0
    );
    assert_eq!(wait_with_deadline(&mut holder, Duration::from_secs(5)), 76);
    let mut err = String::new();
    holder
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.is_empty());
    for line in err.lines() {
        assert!(
            line.starts_with("lockyard: "),
            "a line not lockyard's: {err:?}"
        );
    }
}

/// Arguments reach COMMAND as bytes, as from a shell: a file name need
/// not be UTF-8.
#[test]
fn command_arguments_need_not_be_utf8() {
    let server = RedisServer::start();
    let output = run(lockyard(&server)
        .args(["lock", "--quiet", "bytes", "--", "printf", "%s"])
        .arg(std::ffi::OsStr::from_bytes(b"caf\xe9")));
    assert_eq!(
        status(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.stdout, b"caf\xe9");
}
