//! Holder identities: `<prefix>-<pid>/<thread>`. The prefix is random per
//! lock object unless the user sets one, the pid keeps a forked child from
//! acting as its parent, and the thread part makes one lock object shared
//! by threads exclude them like separate hosts.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

/// A process-unique number for the calling thread (stable for its life).
pub(crate) fn thread_number() -> u64 {
    THREAD.with(|cell| {
        if cell.get() == 0 {
            cell.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        cell.get()
    })
}

/// `bytes` random bytes as lowercase hex.
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random source failed");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random UUID (version 4): a semaphore slot's token.
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

/// Identity of the calling thread for a lock object with `prefix`.
pub(crate) fn holder_identity(prefix: &str) -> String {
    format!("{prefix}-{}/{}", std::process::id(), thread_number())
}

#[cfg(test)]
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
    fn threads_get_distinct_identities() {
        let here = holder_identity("p");
        let there = std::thread::spawn(|| holder_identity("p")).join().unwrap();
        assert_ne!(here, there);
        assert_eq!(here, holder_identity("p"));
    }
}
