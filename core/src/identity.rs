//! Holder identities: `<prefix>-<pid>/<thread>`. The prefix is random per
//! lock object unless the user sets one, the pid keeps a forked child from
//! acting as its parent, and the thread part makes one lock object shared
//! by threads exclude them like separate hosts.

use std::cell::Cell;
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    #[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
    static THREAD: Cell<u64> = const { Cell::new(0) };
    static HOLDER: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The process this copy of lockyard started in: a forked child inherits
/// its parent's, a program started afresh (a restart, `exec`) has its own.
/// 0 until noted. An atomic, not a `OnceLock`: a child forked while
/// another thread ran the lock's initialiser would find it running for
/// good, and wait forever at its first call.
static STARTED_IN: AtomicU32 = AtomicU32::new(0);

/// The process noted as the start, noting this one if none was.
fn started_in() -> u32 {
    let pid = crate::pid::current();
    match STARTED_IN.compare_exchange(0, pid, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => pid,
        Err(noted) => noted,
    }
}

/// Notes the process lockyard runs in, if not noted yet. Bindings call it
/// when they are loaded, and every lock built calls it, so a child forked
/// after either is told apart from a process started afresh.
pub fn note_process_start() {
    started_in();
}

/// Whether this process was forked from one in which lockyard had run.
#[cfg(feature = "gcs")]
pub(crate) fn forked_since_start() -> bool {
    started_in() != crate::pid::current()
}

/// Runs `f` with `key` naming the calling holder instead of the OS thread.
///
/// Locks are held per thread of execution. For runtimes where that is not
/// an OS thread one to one — Ruby hands a dead Thread's native thread to a
/// new one, and fibers share a native thread — the binding passes its own
/// key (e.g. the Ruby fiber's object id) so a new Thread cannot inherit a
/// dead one's lock. Keys never collide with OS-thread numbers.
pub fn as_holder<R>(key: u64, f: impl FnOnce() -> R) -> R {
    as_holder_number(binding_holder(key), f)
}

/// Runs `f` as the holder `number`, a [`holder_number`] taken earlier: for
/// an object that keeps the hold of whoever took it, on any thread.
pub(crate) fn as_holder_number<R>(number: u64, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            HOLDER.with(|holder| holder.set(self.0));
        }
    }
    let _restore = Restore(HOLDER.with(|holder| holder.replace(Some(number))));
    f()
}

/// The holder number of a binding's key: apart from every OS-thread number.
pub(crate) fn binding_holder(key: u64) -> u64 {
    key | 1 << 63
}

/// The calling holder: the key set by [`as_holder`], else the OS thread.
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) fn holder_number() -> u64 {
    HOLDER.with(Cell::get).unwrap_or_else(thread_number)
}

/// The holder number of the calling async task: its tokio task id, apart
/// from every thread number and binding key. Outside a task (the root
/// future of `Runtime::block_on`, which never leaves its thread) the
/// calling thread holds.
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) fn task_holder_number() -> u64 {
    let task = tokio::task::try_id().and_then(|id| id.to_string().parse::<u64>().ok());
    match task {
        Some(id) => id | 1 << 62,
        None => holder_number(),
    }
}

/// A process-unique number for the calling thread (stable for its life).
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) fn thread_number() -> u64 {
    THREAD.with(|cell| {
        if cell.get() == 0 {
            cell.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        cell.get()
    })
}

/// `bytes` random bytes as lowercase hex.
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random source failed");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random UUID (version 4): a semaphore slot's token.
#[cfg(feature = "redis")]
pub(crate) fn uuid4() -> String {
    let hex = random_hex(16);
    let variant = ["8", "9", "a", "b"][usize::from_str_radix(&hex[16..17], 16).unwrap() % 4];
    format!(
        "{}-{}-4{}-{}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        variant,
        &hex[17..20],
        &hex[20..32]
    )
}

/// What one acquire presents to Redis: `identity` plus a nonce. Redis
/// answers a repeated acquire (a retry after a lost reply, a waiter picking
/// up its handoff) with the grant it already made to that token, so the
/// token must name one request, not a holder: two lock objects with one
/// identity (the same prefix in one thread, two containers both pid 1)
/// would otherwise both be told they hold the lock.
#[cfg(feature = "redis")]
pub(crate) fn request_token(identity: &str) -> String {
    format!("{identity}#{}", random_hex(6))
}

/// Identity of the calling thread for a lock object with `prefix`.
#[cfg(any(feature = "redis", feature = "etcd"))]
pub(crate) fn holder_identity(prefix: &str) -> String {
    format!("{prefix}-{}/{}", crate::pid::current(), holder_number())
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;

    #[test]
    fn uuid4_has_the_canonical_shape() {
        let id = uuid4();
        let parts: Vec<_> = id.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12]);
        assert_eq!(&id[14..15], "4");
        assert!("89ab".contains(&id[19..20]));
    }

    #[test]
    fn a_holder_key_replaces_the_thread_for_its_scope() {
        let thread = holder_identity("p");
        let keyed = as_holder(7, || holder_identity("p"));
        assert_ne!(keyed, thread);
        assert_eq!(as_holder(7, || holder_identity("p")), keyed);
        assert_eq!(holder_identity("p"), thread, "restored after the scope");
    }

    #[test]
    fn tasks_hold_apart_from_threads_and_from_each_other() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let thread = holder_number();
        let root = runtime.block_on(async { task_holder_number() });
        assert_eq!(root, thread, "a block_on root future holds as its thread");
        let (first, again, second) = runtime.block_on(async {
            let first = tokio::spawn(async { (task_holder_number(), task_holder_number()) });
            let second = tokio::spawn(async { task_holder_number() });
            let (first, again) = first.await.unwrap();
            (first, again, second.await.unwrap())
        });
        assert_eq!(first, again, "stable within a task");
        assert_ne!(first, second);
        assert!(first != thread && first & 1 << 62 != 0 && first & 1 << 63 == 0);
    }

    #[test]
    fn threads_get_distinct_identities() {
        let here = holder_identity("p");
        let there = std::thread::spawn(|| holder_identity("p")).join().unwrap();
        assert_ne!(here, there);
        assert_eq!(here, holder_identity("p"));
    }
}
