//! Running `lockyard` (built here, or as installed) against a private
//! redis-server.

#![allow(dead_code)]

#[path = "../../../core/tests/support/mod.rs"]
mod support;

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[path = "../../../core/tests/etcd_support/mod.rs"]
pub mod etcd;
pub mod gcs;

pub use support::{eventually, free_port, RedisServer};

/// The `lockyard` under test: this crate's binary, or the installed entry
/// point named by LOCKYARD_COMMAND (the wheel's console script, the gem's
/// executable), which must behave the same.
pub fn program() -> String {
    std::env::var("LOCKYARD_COMMAND")
        .ok()
        .filter(|program| !program.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_lockyard").to_owned())
}

pub fn lockyard(server: &RedisServer) -> Command {
    let mut command = Command::new(program());
    command.env("LOCKYARD_URL", server.url());
    command
}

pub fn run(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().unwrap()
}

pub fn status(output: &Output) -> i32 {
    output
        .status
        .code()
        .expect("lockyard exits, never dies of a signal")
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "lockyard-cli-{}-{}",
        std::process::id(),
        free_port()
    ));
    fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

pub fn held(server: &RedisServer, name: &str) -> bool {
    status(&run(lockyard(server).args(["status", name]))) == 0
}

/// Starts `lockyard lock NAME -- sh -c SCRIPT` and waits until it holds NAME.
pub fn holding(server: &RedisServer, name: &str, options: &[&str], script: &str) -> Child {
    let child = lockyard(server)
        .arg("lock")
        .args(options)
        .args([name, "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(5), "the lock is taken", || {
        held(server, name)
    });
    child
}

pub fn alive(pid: i32) -> bool {
    // A zombie waiting for init to reap it counts as gone.
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

pub fn wait_with_deadline(child: &mut Child, limit: Duration) -> i32 {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status
                .code()
                .expect("lockyard exits, never dies of a signal");
        }
        assert!(
            started.elapsed() < limit,
            "lockyard still runs after {limit:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

pub fn holders(server: &RedisServer, name: &str) -> usize {
    let output = run(lockyard(server).args(["status", "--json", name]));
    let state: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    state["holders"].as_array().unwrap().len()
}

/// Ends a `lockyard lock` the way a user would: SIGTERM, passed on to its
/// command.
pub fn stop(mut child: Child) {
    // SAFETY: plain system call on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
}
