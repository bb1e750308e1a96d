//! This process's id, asked of the kernel once and again only after a
//! fork. Every lockyard structure that must not outlive a `fork()` compares
//! the id it was made in with this one, a dozen times per acquire and
//! release, and glibc no longer caches `getpid`: each would be a system
//! call.
//!
//! The id is kept in a page the kernel zeroes in a child at every fork
//! (`MADV_WIPEONFORK`, Linux 4.14), however the child was made: a raw
//! `clone` or `_Fork` runs no atfork handler, and a child that believed it
//! was its parent would release the parent's locks. Setting the page up
//! takes no lock a fork could leave held in the child. Where the kernel
//! cannot wipe a page, the id is asked for every time.

#[cfg(target_os = "linux")]
mod kept {
    use std::ptr::null_mut;
    use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

    /// The page, once set up; null until then, and where it cannot be.
    static PAGE: AtomicPtr<AtomicU32> = AtomicPtr::new(null_mut());
    /// Set once the kernel refused to wipe a page: never try again.
    static REFUSED: AtomicU32 = AtomicU32::new(0);

    /// The page's id (0: not known in this process), if there is a page.
    pub(super) fn slot() -> Option<&'static AtomicU32> {
        let page = PAGE.load(Ordering::Acquire);
        if !page.is_null() {
            // SAFETY: a page is mapped once and never unmapped.
            return Some(unsafe { &*page });
        }
        if REFUSED.load(Ordering::Relaxed) != 0 {
            return None;
        }
        set_up()
    }

    #[cold]
    fn set_up() -> Option<&'static AtomicU32> {
        let size = 4096;
        // SAFETY: a fresh anonymous private mapping, checked below.
        let page = unsafe {
            libc::mmap(
                null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: `page` is the mapping just made.
        if unsafe { libc::madvise(page, size, libc::MADV_WIPEONFORK) } != 0 {
            unsafe { libc::munmap(page, size) };
            REFUSED.store(1, Ordering::Relaxed);
            return None;
        }
        let page = page.cast::<AtomicU32>();
        // Two threads may set one up at once: the first kept wins.
        match PAGE.compare_exchange(null_mut(), page, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: mapped above, zeroed, never unmapped.
            Ok(_) => Some(unsafe { &*page }),
            Err(kept) => {
                unsafe { libc::munmap(page.cast(), size) };
                // SAFETY: as above, for the page another thread kept.
                Some(unsafe { &*kept })
            }
        }
    }
}

/// The id of the calling process.
pub(crate) fn current() -> u32 {
    #[cfg(target_os = "linux")]
    if let Some(slot) = kept::slot() {
        use std::sync::atomic::Ordering;
        return match slot.load(Ordering::Relaxed) {
            0 => {
                let pid = std::process::id();
                slot.store(pid, Ordering::Relaxed);
                pid
            }
            pid => pid,
        };
    }
    std::process::id()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A child made by `fork()` and one made by the raw system call, which
    /// runs no atfork handler, each know their own id.
    #[test]
    fn a_forked_child_has_its_own_id_however_it_was_forked() {
        let parent = current();
        assert_eq!(parent, std::process::id());
        for raw in [false, true] {
            // SAFETY: the child only reads ids and exits.
            let child = unsafe {
                match raw {
                    false => libc::fork(),
                    true => {
                        libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) as libc::pid_t
                    }
                }
            };
            if child == 0 {
                let ok = current() == std::process::id() && current() != parent;
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            let mut status = 0;
            unsafe { libc::waitpid(child, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "raw: {raw}"
            );
            assert_eq!(current(), parent);
        }
    }
}
