//! This process's id, asked of the kernel once and again only after a
//! fork. Every lockyard structure that must not outlive a `fork()` compares
//! the id it was made in with this one, a dozen times per acquire and
//! release, and glibc no longer caches `getpid`: each would be a system
//! call.

use std::sync::atomic::{AtomicU32, Ordering};

/// 0 until first asked, and again in a forked child.
static CURRENT: AtomicU32 = AtomicU32::new(0);

/// The id of the calling process.
pub(crate) fn current() -> u32 {
    match CURRENT.load(Ordering::Relaxed) {
        0 => ask_the_kernel(),
        pid => pid,
    }
}

#[cold]
fn ask_the_kernel() -> u32 {
    #[cfg(unix)]
    {
        static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        // Before the first id is kept: a child forked after it must find
        // it forgotten. SAFETY: the handler only stores to an atomic.
        // Failing (ENOMEM) would leave a child with its parent's id, so
        // nothing is kept then.
        let registered = *REGISTERED.get_or_init(|| unsafe {
            libc::pthread_atfork(None, None, Some(forget_in_child)) == 0
        });
        let pid = std::process::id();
        if registered {
            CURRENT.store(pid, Ordering::Relaxed);
        }
        pid
    }
    #[cfg(not(unix))]
    {
        let pid = std::process::id();
        CURRENT.store(pid, Ordering::Relaxed);
        pid
    }
}

#[cfg(unix)]
extern "C" fn forget_in_child() {
    CURRENT.store(0, Ordering::Relaxed);
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_has_its_own_id() {
        let parent = current();
        assert_eq!(parent, std::process::id());
        // SAFETY: the child only reads ids and exits.
        match unsafe { libc::fork() } {
            0 => {
                let ok = current() == std::process::id() && current() != parent;
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            child => {
                let mut status = 0;
                unsafe { libc::waitpid(child, &mut status, 0) };
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
                assert_eq!(current(), parent);
            }
        }
    }
}
