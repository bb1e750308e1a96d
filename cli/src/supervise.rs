//! Running COMMAND while the lock is held: in its own process group, so
//! that the whole group (grandchildren included) can be stopped when the
//! lock is lost, and so that the signals a terminal sends to `lockyard`
//! reach COMMAND only through `lockyard`, which then still releases the
//! lock after COMMAND exits.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::exit::{self, Failure};
use crate::output::say;
use crate::signals::Signals;

/// How often the lock's health (a flag and the clock) is looked at.
const POLL: Duration = Duration::from_millis(50);

/// What COMMAND came to.
pub enum Outcome {
    /// It ran to its end with this exit status (128+N: killed by signal N).
    Exited(i32),
    /// The lock was lost while it ran, and its process group was stopped.
    Lost,
}

/// What COMMAND runs under.
pub struct Watch<'a> {
    /// What was locked, for messages.
    pub what: String,
    /// Whether the lock is surely still held.
    pub healthy: &'a dyn Fn() -> bool,
    /// Between SIGTERM and SIGKILL when the lock is lost.
    pub grace: Duration,
    pub signals: &'a Signals,
}

/// Runs `command` with `env` added to its environment and waits for it,
/// stopping its process group if the lock turns unhealthy.
pub fn run(
    command: &[OsString],
    env: &[(&str, String)],
    watch: &Watch<'_>,
) -> Result<Outcome, Failure> {
    let (program, args) = command.split_first().expect("clap requires COMMAND");
    let mut cmd = Command::new(program);
    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    let parent = std::process::id() as libc::pid_t;
    let interactive = in_terminal_foreground();
    // SAFETY: setpgid, signal, prctl, getppid, kill and tcsetpgrp are
    // async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // An ignored signal stays ignored across exec: Python ignores
            // SIGXFSZ (std already restores SIGPIPE), and COMMAND must
            // start as from a shell whichever entry point ran lockyard.
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            // COMMAND must not outlive a lockyard that is killed (OOM,
            // `kill -9`): nobody would stop it once the lease runs out. The
            // signal follows the spawning thread's exit: this is the main one.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            if interactive {
                // Its own group must own the terminal, or reading it stops
                // COMMAND (SIGTTIN) while lockyard waits holding the lock.
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| Failure {
        status: exit::CANNOT_RUN,
        message: format!("cannot run {program:?}: {e}"),
    })?;
    let group = child.id() as libc::pid_t;
    // Also from this side: a signal sent before the child's own setpgid
    // ran would otherwise miss the group.
    // SAFETY: plain system call on our own child.
    unsafe { libc::setpgid(group, group) };
    let (exited, exit) = mpsc::channel();
    thread::spawn(move || {
        let _ = exited.send(child.wait());
    });
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        match exit.recv_timeout(POLL) {
            Ok(status) => break status,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("the waiter always sends"),
        }
        if let Some(signal) = watch.signals.take() {
            signal_group(group, signal);
        }
        if kill_at.is_none() && !(watch.healthy)() {
            say!(
                "lockyard: {} was lost; stopping the command (SIGTERM, SIGKILL after {}s)",
                watch.what,
                watch.grace.as_secs_f64()
            );
            signal_group(group, libc::SIGTERM);
            kill_at = Some(Instant::now() + watch.grace);
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            signal_group(group, libc::SIGKILL);
        }
    }
    .map_err(|e| Failure {
        status: exit::UNAVAILABLE,
        message: format!("waiting for {program:?} failed: {e}"),
    })?;
    if interactive {
        take_back_terminal();
    }
    match kill_at {
        None => Ok(Outcome::Exited(exit_status(status))),
        Some(at) => {
            stop_group(group, at);
            Ok(Outcome::Lost)
        }
    }
}

/// Whether lockyard runs in the foreground of its terminal: then COMMAND's
/// group gets the terminal while it runs (a background lockyard must not
/// take it from the shell's foreground job).
fn in_terminal_foreground() -> bool {
    // SAFETY: plain queries on our own standard input.
    unsafe {
        libc::isatty(libc::STDIN_FILENO) == 1
            && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp()
    }
}

/// Makes lockyard's group the terminal's foreground again after COMMAND.
fn take_back_terminal() {
    // SAFETY: SIGTTOU ignored only around the call, which would otherwise
    // stop us: we are a background group until it returns.
    unsafe {
        let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp());
        libc::signal(libc::SIGTTOU, previous);
    }
}

/// After a lost lock: what is left of COMMAND's group (a grandchild that
/// outlived it) gets until `kill_at`, then SIGKILL.
fn stop_group(group: libc::pid_t, kill_at: Instant) {
    while group_alive(group) && Instant::now() < kill_at {
        thread::sleep(POLL);
    }
    signal_group(group, libc::SIGKILL);
}

fn group_alive(group: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-group, 0) == 0 }
}

fn signal_group(group: libc::pid_t, signal: i32) {
    // SAFETY: plain system call; the group stays ours while it exists (a
    // process group's id is not reused while any member lives).
    unsafe { libc::kill(-group, signal) };
}

/// The status a shell would report.
fn exit_status(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => exit::UNAVAILABLE,
    }
}
