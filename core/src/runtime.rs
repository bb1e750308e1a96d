//! The one internal tokio runtime: a current-thread runtime driven by a
//! single background thread, created lazily and created again in a child
//! after `fork()` (the parent's thread does not exist there). Tasks on it
//! only touch atomics, so they never call into Python or Ruby.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::{Builder, Handle};
use tokio::task::JoinHandle;

struct Running {
    pid: u32,
    handle: Handle,
}

static RUNTIME: Mutex<Option<Running>> = Mutex::new(None);

fn handle() -> Handle {
    held_across_fork();
    let pid = crate::pid::current();
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

/// Makes `fork` wait until no other thread holds the mutexes a child's
/// first call takes (the refresh schedule, then this runtime's: the order
/// every caller takes them in), by holding them itself across it: the
/// child has no other thread, and a lock held by one at the fork would
/// stay locked in the child for good. Registered once, before either is
/// first taken. Nobody holds them while waiting for anything but each
/// other, so this waits at most for one spawn or one dispatch.
fn held_across_fork() {
    #[cfg(unix)]
    {
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        // SAFETY: the handlers only lock and unlock static mutexes, on the
        // forking thread. Failing (ENOMEM) leaves the window open, nothing
        // worse.
        REGISTERED.call_once(|| unsafe {
            libc::pthread_atfork(
                Some(lock_before_fork),
                Some(unlock_after_fork),
                Some(unlock_after_fork),
            );
        });
    }
}

thread_local! {
    /// The guards the forking thread holds across `fork`.
    static LOCKED_FOR_FORK: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(unix)]
extern "C" fn lock_before_fork() {
    #[cfg(feature = "redis")]
    let schedule = crate::redis::lock_schedule_for_fork();
    let runtime = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    LOCKED_FOR_FORK.with(|held| {
        let mut held = held.borrow_mut();
        #[cfg(feature = "redis")]
        held.push(Box::new(schedule));
        held.push(Box::new(runtime));
    });
}

/// In the parent and in the child alike: the child's own first call finds
/// the parent's runtime and schedule by their pid, and starts its own.
#[cfg(unix)]
extern "C" fn unlock_after_fork() {
    LOCKED_FOR_FORK.with(|held| {
        let mut held = held.borrow_mut();
        while let Some(guard) = held.pop() {
            drop(guard);
        }
    });
}

/// Ok on a tokio runtime; [`crate::Error::Config`] anywhere else (a
/// `futures` executor, a plain thread): an `_async` call's connections and
/// timers are its caller runtime's, and tokio would panic deep inside.
#[cfg(feature = "redis")]
pub(crate) fn check_on_tokio(operation: &str, what: &str) -> crate::Result<()> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Ok(()),
        Err(_) => Err(crate::Error::Config(format!(
            "{operation} on {what}: lockyard's _async calls must be awaited on a tokio \
             runtime (with its time and I/O drivers enabled)"
        ))),
    }
}

/// Runs `future` in the background; abort the handle to stop it.
pub(crate) fn spawn<F>(future: F) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    handle().spawn(future)
}

/// A future a binding runs on lockyard's runtime for a caller that awaits
/// it on an event loop of its own (Python's asyncio): dropping the handle
/// lets it run on; [`Detached::abort`] drops the future at its next await,
/// which then cleans up as any dropped `_async` future does.
#[derive(Debug)]
pub struct Detached {
    task: tokio::task::AbortHandle,
    state: Arc<Mutex<Dropping>>,
}

/// Where a detached future is in being dropped: once aborted, an exiting
/// process waits (see [`Background`]) until the future has been dropped,
/// and so has handed its clean-up (a wait's give-up) to background work
/// that exiting waits for as well.
#[derive(Debug)]
enum Dropping {
    Running,
    Aborted(#[allow(dead_code)] Background),
    Dropped,
}

impl Detached {
    /// Drops the future (a caller that was cancelled); nothing once it
    /// finished.
    pub fn abort(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, Dropping::Running) {
            *state = Dropping::Aborted(Background::started());
        }
        drop(state);
        self.task.abort();
    }
}

/// A detached future, which tells its [`Detached`] once it is dropped.
struct Tracked<F> {
    future: Option<std::pin::Pin<Box<F>>>,
    state: Arc<Mutex<Dropping>>,
}

impl<F: Future<Output = ()>> Future for Tracked<F> {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        match self.future.as_mut() {
            Some(future) => future.as_mut().poll(cx),
            None => std::task::Poll::Ready(()),
        }
    }
}

impl<F> Drop for Tracked<F> {
    fn drop(&mut self) {
        drop(self.future.take());
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Dropping::Dropped;
    }
}

/// Runs `future` on lockyard's runtime (see [`Detached`]).
pub fn detach<F>(future: F) -> Detached
where
    F: Future<Output = ()> + Send + 'static,
{
    let state = Arc::new(Mutex::new(Dropping::Running));
    let task = spawn(Tracked {
        future: Some(Box::pin(future)),
        state: state.clone(),
    });
    Detached {
        task: task.abort_handle(),
        state,
    }
}

/// Runs `future` in the background, like [`spawn`], and makes an exiting
/// process wait for it (see [`Background`]): for a delete that must reach
/// the server even when the process ends right after asking for it.
pub(crate) fn spawn_awaited<F>(future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let running = Background::started();
    drop(handle().spawn(async move {
        let _running = running;
        future.await;
    }));
}

/// Runs `work`, which may block (a synchronous release), on the runtime's
/// pool of blocking threads: for callers that must not wait for it. The
/// process waits for it at exit (see [`Background`]).
pub(crate) fn spawn_blocking(work: impl FnOnce() + Send + 'static) {
    let running = Background::started();
    drop(handle().spawn_blocking(move || {
        let _running = running;
        ON_BLOCKING_THREAD.with(|on| on.set(true));
        work()
    }));
}

/// Runs `call`, which may block, on the runtime's pool of blocking threads
/// and awaits its outcome: for an async caller of a blocking operation.
/// Dropped meanwhile, `call` runs to its end all the same. None if the
/// runtime shut down before it ended.
#[cfg(any(feature = "redis", feature = "gcs", feature = "etcd"))]
pub(crate) async fn unblocked<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (done, called) = tokio::sync::oneshot::channel();
    spawn_blocking(move || drop(done.send(call())));
    called.await.ok()
}

/// Runs `future` on lockyard's runtime and awaits its outcome, for an async
/// caller of work whose connections live there (etcd's HTTP pool: a
/// connection made on a caller's runtime would die with that runtime).
/// Awaitable on any executor. Dropped meanwhile, the future is dropped at
/// its next await, on the runtime, where its drop guards clean up; an
/// exiting process waits until it has been. `what` names the object for
/// the error when the runtime shut down before the future ended.
#[cfg(feature = "etcd")]
pub(crate) async fn on_runtime<T: Send + 'static>(
    what: &str,
    future: impl Future<Output = crate::Result<T>> + Send + 'static,
) -> crate::Result<T> {
    struct AbortOnDrop(Detached);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let (done, outcome) = tokio::sync::oneshot::channel();
    let _running = AbortOnDrop(detach(async move {
        let _ = done.send(future.await);
    }));
    outcome.await.unwrap_or_else(|_| Err(shut_down(what)))
}

/// [`on_runtime`] for work that must reach its end even when its caller
/// goes away (a release): dropped meanwhile, it runs on, and an exiting
/// process waits for it.
#[cfg(feature = "etcd")]
pub(crate) async fn to_the_end<T: Send + 'static>(
    what: &str,
    future: impl Future<Output = crate::Result<T>> + Send + 'static,
) -> crate::Result<T> {
    let (done, outcome) = tokio::sync::oneshot::channel();
    spawn_awaited(async move {
        let _ = done.send(future.await);
    });
    outcome.await.unwrap_or_else(|_| Err(shut_down(what)))
}

/// What an async call answers when lockyard's runtime shut down (the
/// process is exiting) before the call ended.
#[cfg(any(feature = "gcs", feature = "etcd"))]
pub(crate) fn shut_down(what: &str) -> crate::Error {
    crate::Error::config(format!(
        "{what}: lockyard's runtime shut down before the call ended"
    ))
}

thread_local! {
    /// Set on the runtime's own blocking threads, which may block on it
    /// (see [`block_on`]).
    static ON_BLOCKING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How long an exiting process waits for its background work: as long as
/// one Redis command may take, the most a release done in place would have
/// held the exit up.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// One piece of background work not done yet. A release handed to the
/// background just before the process exits (a lock freed by Ruby's
/// finalizers at exit) would otherwise die with it and leave the lock to
/// its `ttl`: so the process waits for them at exit, up to [`EXIT_WAIT`].
#[derive(Debug)]
pub(crate) struct Background;

/// Background work not done yet in the process with this pid (a forked
/// child's count starts again: its parent's work runs in the parent).
static UNFINISHED: Mutex<(u32, usize)> = Mutex::new((0, 0));
static FINISHED: Condvar = Condvar::new();

impl Background {
    /// Counts one piece of work the process waits for at exit, until
    /// the returned value is dropped.
    pub(crate) fn started() -> Background {
        #[cfg(unix)]
        {
            static AT_EXIT: std::sync::Once = std::sync::Once::new();
            // SAFETY: `wait_at_exit` is a plain function that never unwinds.
            AT_EXIT.call_once(|| unsafe {
                libc::atexit(wait_at_exit);
            });
        }
        let pid = crate::pid::current();
        let mut unfinished = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
        if unfinished.0 != pid {
            *unfinished = (pid, 0);
        }
        unfinished.1 += 1;
        Background
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let mut unfinished = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
        unfinished.1 = unfinished.1.saturating_sub(1);
        FINISHED.notify_all();
    }
}

extern "C" fn wait_at_exit() {
    finish_background_work();
}

/// Waits for the background work this process handed off (a release from
/// a finalizer, the delete of a wait given up), 10 s at the most counted
/// from the first call: a later call (C's `atexit` after a binding's hook)
/// waits only for what is left of them. Runs at exit on its own; a binding
/// also calls it from its language's exit hooks, since a process that ends
/// by its own signal (Python and Ruby re-raise an uncaught SIGINT) skips
/// C's `atexit`.
pub fn finish_background_work() {
    let until = exit_deadline();
    let pid = crate::pid::current();
    let mut unfinished = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
    while unfinished.0 == pid && unfinished.1 > 0 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        unfinished = FINISHED
            .wait_timeout(unfinished, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// When this process stops waiting for its background work at exit: set by
/// the first call (a forked child sets its own).
fn exit_deadline() -> Instant {
    static DEADLINE: Mutex<Option<(u32, Instant)>> = Mutex::new(None);
    let pid = crate::pid::current();
    let mut deadline = DEADLINE.lock().unwrap_or_else(|e| e.into_inner());
    match *deadline {
        Some((owner, at)) if owner == pid => at,
        _ => {
            let at = Instant::now() + EXIT_WAIT;
            *deadline = Some((pid, at));
            at
        }
    }
}

/// Live tasks on lockyard's internal runtime (requests in flight,
/// refreshers, connection drivers, waits run for async callers). Tests use
/// it to prove that they return to their baseline after timeouts,
/// cancellations and node failures.
#[doc(hidden)]
pub fn live_tasks() -> usize {
    handle().metrics().num_alive_tasks()
}

/// How a wait run by [`block_on_interruptibly`] ended.
#[cfg(any(feature = "gcs", feature = "etcd", feature = "quorum"))]
pub(crate) enum Ended<T> {
    Done(T),
    TimedOut,
    Interrupted,
}

/// Runs `future` on the calling thread until it completes, `until` passes
/// or `interrupted` answers true, asking it between slices of at most
/// 50 ms. A future given up is dropped there (inside lockyard's runtime):
/// it must leave its cleanup to its caller.
#[cfg(any(feature = "gcs", feature = "etcd", feature = "quorum"))]
pub(crate) fn block_on_interruptibly<F>(
    future: F,
    until: Option<Instant>,
    interrupted: crate::wait::Interrupt<'_>,
) -> Ended<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    const SLICE: Duration = Duration::from_millis(50);
    let mut future = Box::pin(future);
    loop {
        if interrupted() {
            drop_in_runtime(future);
            return Ended::Interrupted;
        }
        let slice = match until {
            None => SLICE,
            Some(at) => match at.saturating_duration_since(Instant::now()) {
                left if left.is_zero() => {
                    drop_in_runtime(future);
                    return Ended::TimedOut;
                }
                left => left.min(SLICE),
            },
        };
        // The timer is made inside: only the runtime's context has one.
        let sliced = async { tokio::time::timeout(slice, future.as_mut()).await };
        if let Ok(output) = block_on(sliced) {
            return Ended::Done(output);
        }
    }
}

/// Drops a future given up midway inside lockyard's runtime: what it
/// holds may spawn as it goes (hyper hands a connection in use back to its
/// pool by a task), which panics outside a runtime.
#[cfg(any(feature = "gcs", feature = "etcd", feature = "quorum"))]
fn drop_in_runtime<F>(future: F) {
    let runtime = handle();
    let _inside = runtime.enter();
    drop(future);
}

/// Runs `future` to completion on the calling thread, setting `stop` once
/// `interrupted` answers true (asked between slices of at most 50 ms): for
/// a future that must not be dropped midway (a request on its way may
/// still land), but ends soon after it sees `stop`.
#[cfg(feature = "gcs")]
pub(crate) fn block_on_until_stopped<F>(
    future: F,
    interrupted: crate::wait::Interrupt<'_>,
    stop: &std::sync::atomic::AtomicBool,
) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    const SLICE: Duration = Duration::from_millis(50);
    let mut future = Box::pin(future);
    loop {
        if interrupted() {
            stop.store(true, std::sync::atomic::Ordering::Release);
        }
        // The timer is made inside: only the runtime's context has one.
        let sliced = async { tokio::time::timeout(SLICE, future.as_mut()).await };
        if let Ok(output) = block_on(sliced) {
            return output;
        }
    }
}

/// Runs `future` to completion on the calling thread, which must not be the
/// runtime's; the runtime thread drives its I/O and timers meanwhile.
///
/// A caller inside a tokio runtime of its own (a service calling the
/// blocking API from async code) may not block its thread on a runtime:
/// tokio panics. Its future then runs on a thread of its own, for this
/// call only, while the caller's thread waits, as the blocking API says.
#[cfg(any(feature = "gcs", feature = "etcd", feature = "quorum"))]
pub(crate) fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    // The runtime's blocking threads are inside its context, and may
    // block on it as any other thread.
    if tokio::runtime::Handle::try_current().is_err() || ON_BLOCKING_THREAD.with(|on| on.get()) {
        return handle().block_on(future);
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| handle().block_on(future))
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}
