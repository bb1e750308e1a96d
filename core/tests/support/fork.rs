//! Forked children that answer their parent through a pipe (shared by
//! the Redis and the etcd tests).

use std::time::{Duration, Instant};

pub fn pipe() -> [i32; 2] {
    let mut fds = [0; 2];
    // SAFETY: a plain system call on a buffer of two fds.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    fds
}

/// In a forked child: writes `answer` to the parent and exits at once.
pub fn answer_parent(fds: [i32; 2], answer: &str) -> ! {
    // SAFETY: plain system calls on the pipe this process owns.
    unsafe {
        libc::write(fds[1], answer.as_ptr().cast(), answer.len());
        libc::_exit(0)
    }
}

/// What the child answered, or None if it had not ended within `limit`
/// (it is then killed, after its threads' stacks are printed when gdb
/// is there).
pub fn child_answer(pid: i32, fds: [i32; 2], limit: Duration) -> Option<String> {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain system calls on the pipe and the child this test made.
    unsafe { libc::close(fds[1]) };
    let mut reader = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fds[0]) });
    let started = Instant::now();
    let mut status = 0;
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        if started.elapsed() > limit {
            print_stacks(pid);
            unsafe { libc::kill(pid, libc::SIGKILL) };
            unsafe { libc::waitpid(pid, &mut status, 0) };
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut seen = String::new();
    let _ = reader.read_to_string(&mut seen);
    Some(seen)
}

fn print_stacks(pid: i32) {
    if let Ok(out) = std::process::Command::new("gdb")
        .args([
            "-batch",
            "-p",
            &pid.to_string(),
            "-ex",
            "thread apply all bt 12",
        ])
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        let frames: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
        eprintln!("stacks of the hung child {pid}:\n{}", frames.join("\n"));
    }
}
