//! The one internal tokio runtime: a current-thread runtime driven by a
//! single background thread, created lazily and created again in a child
//! after `fork()` (the parent's thread does not exist there). Tasks on it
//! only touch atomics, so they never call into Python or Ruby.

use std::future::Future;
use std::sync::Mutex;

use tokio::runtime::{Builder, Handle};
use tokio::task::JoinHandle;

struct Running {
    pid: u32,
    handle: Handle,
}

static RUNTIME: Mutex<Option<Running>> = Mutex::new(None);

fn handle() -> Handle {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(running) = slot.as_ref().filter(|r| r.pid == pid) {
        return running.handle.clone();
    }
    // After a fork the inherited runtime has no driver thread; dropping it
    // would wait for that thread forever, so it is deliberately leaked.
    if let Some(stale) = slot.take() {
        std::mem::forget(stale);
    }
    let runtime = Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the lockyard runtime");
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("lockyard-runtime".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .expect("spawning the lockyard runtime thread");
    *slot = Some(Running {
        pid,
        handle: handle.clone(),
    });
    handle
}

/// Runs `future` in the background; abort the handle to stop it.
pub(crate) fn spawn<F>(future: F) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    handle().spawn(future)
}

/// Runs `work`, which may block (a synchronous release), on the runtime's
/// pool of blocking threads: for callers that must not wait for it.
pub(crate) fn spawn_blocking(work: impl FnOnce() + Send + 'static) {
    drop(handle().spawn_blocking(work));
}

/// Tasks spawned and not yet finished, on this process's runtime.
#[cfg(feature = "quorum")]
pub(crate) fn alive_tasks() -> usize {
    handle().metrics().num_alive_tasks()
}

/// Runs `future` to completion on the calling thread, which must not be the
/// runtime's; the runtime thread drives its I/O and timers meanwhile.
#[cfg(feature = "gcs")]
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    handle().block_on(future)
}
