//! Review of 7f44bb2 (a listener's markers go over the runtime's shared
//! connection as it is then, a push outlives its BLPOP round and one
//! unanswered for a second ends the listener; the global marker is
//! `lockyard:{listener-<hex>}`; a listener's `Ending` guard is built
//! before its task first runs): attempts to break
//! core/src/redis/server/wakes.rs.

mod support;

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::task::Poll;
use std::time::Duration;

use lockyard::redis::Lock;
use support::RedisServer;

const MS: fn(u64) -> Duration = Duration::from_millis;

fn lock_at(url: &str, name: &str) -> Arc<Lock> {
    Arc::new(Lock::builder(url, name).build().unwrap())
}

/// A waiter whose attempt is answered (queued) just as its runtime shuts
/// down: the task's single poll goes on from the reply to `Server::ear`,
/// which spawns the new listener's task while it holds the server's
/// listeners mutex. The runtime's task list is closed by then, so
/// `tokio::spawn` shuts the task down at once, dropping its future on
/// the spot -- and that future now owns the listener's `Ending` guard,
/// whose drop (`forget_listener`) takes the same mutex, on the same
/// thread. The worker deadlocks, the runtime's drop never returns, and
/// every later waiter on that URL, in any runtime of the process, blocks
/// its thread in `ear()` forever. Reproduced every run (3 of 3); gdb
/// shows the worker in `forget_listener` under `Ending::drop` under
/// `cancel_task` under `Server::ear`, and the other runtime's thread in
/// `ear` at the listeners' lock. Fixed in dc4829f: the listener is
/// spawned after the lock is released.
#[test]
fn a_waiter_joining_as_its_runtime_shuts_down_deadlocks_nobody() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = lock_at(&url, "shut");
    let held = holder.try_acquire().unwrap().expect("free");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (shut_now, shut_asked) = mpsc::channel::<()>();
    let polled_after = Arc::new(AtomicBool::new(false));
    runtime.spawn({
        let (url, polled_after) = (url.clone(), polled_after.clone());
        async move {
            // The runtime's shared connection made, the script loaded.
            let warm = lock_at(&url, "warm");
            let guard = warm.acquire_async(None).await.unwrap();
            guard.release_async().await.unwrap();
            let lock = lock_at(&url, "shut");
            let mut waiting = pin!(lock.acquire_async(Some(Duration::from_secs(10))));
            let mut polls = 0;
            poll_fn(|cx| {
                polls += 1;
                if polls == 1 {
                    // Sends the attempt; this task is woken by its reply.
                    return waiting.as_mut().poll(cx).map(drop);
                }
                shut_now.send(()).unwrap();
                // The other worker closes the runtime's task list.
                std::thread::sleep(MS(400));
                // Queued: listens, joins a new listener (spawned).
                let _ = waiting.as_mut().poll(cx);
                polled_after.store(true, Ordering::SeqCst);
                Poll::<()>::Pending
            })
            .await;
        }
    });
    shut_asked.recv().unwrap();
    let (dropped, dropped_rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(runtime);
        let _ = dropped.send(());
    });
    let shut_down = dropped_rx.recv_timeout(Duration::from_secs(5)).is_ok();
    eprintln!(
        "runtime dropped: {shut_down}; the waiter polled again after the close: {}",
        polled_after.load(Ordering::SeqCst)
    );
    // Another runtime's waiter on the same server meanwhile.
    let (handed, handed_rx) = mpsc::channel();
    let waiter = lock_at(&url, "shut");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let got = waiter.acquire_async(Some(Duration::from_secs(5))).await;
            let _ = handed.send(got.is_ok());
        });
    });
    std::thread::sleep(MS(300));
    drop(held);
    let other = handed_rx.recv_timeout(Duration::from_secs(8));
    eprintln!("another runtime's waiter on the same URL: {other:?}");
    assert!(shut_down, "the runtime's drop hangs (a worker deadlocked)");
    assert_eq!(
        other,
        Ok(true),
        "another runtime's waiter never got the lock"
    );
}

/// Connections blocked in a BLPOP now.
fn blocked_in_blpop(server: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.raw().unwrap())
        .unwrap();
    list.lines()
        .filter(|line| line.contains("cmd=blpop") && line.contains("flags=b"))
        .count()
}

/// The process learns the server is no Cluster (waiters of all locks
/// share listeners), as after any blocking call.
async fn learn_no_cluster(url: &str) {
    let probe = lock_at(url, "probe");
    tokio::task::spawn_blocking(move || drop(probe.try_acquire().unwrap()))
        .await
        .unwrap();
}

/// A TCP proxy that, once armed, holds the next MULTI a client sends
/// (and whatever that connection sends after it) for `hold`: a hiccup of
/// the network on the connection a marker goes over.
struct HoldProxy {
    port: u16,
    armed: Arc<AtomicBool>,
}

impl HoldProxy {
    fn start(upstream_port: u16, hold: Duration) -> HoldProxy {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let pump = move |mut from: TcpStream, mut to: TcpStream, armed: Option<Arc<AtomicBool>>| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(read) = from.read(&mut buf) {
                    if read == 0 {
                        break;
                    }
                    let chunk = &buf[..read];
                    if let Some(armed) = &armed {
                        let multi = chunk.windows(5).any(|w| w == b"MULTI");
                        if multi && armed.swap(false, Ordering::SeqCst) {
                            std::thread::sleep(hold);
                        }
                    }
                    if to.write_all(chunk).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(std::net::Shutdown::Both);
            });
        };
        let arm = armed.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    Some(arm.clone()),
                );
                pump(server, client, None);
            }
        });
        HoldProxy { port, armed }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// The module's own comment says a marker push "is a write like any
/// other and waits out" a pause; every other call waits COMMAND_TIMEOUT
/// (10 s). Since 7f44bb2 a marker push unanswered for 1 s ends its
/// listener: a hiccup of 1.2 s on the shared connection (one TCP
/// retransmission, a write pause, a slow script) just as one waiter joins
/// makes every waiter of that listener listen alone, a connection each,
/// for the rest of its wait, and retires the shared connection, which
/// was fine. Reproduced 3 of 3: 1 connection in BLPOP before, 41 after
/// (41 waiters); held 600 ms instead, the listener lives on (1). Fixed in
/// dc4829f: a push fails only at COMMAND_TIMEOUT, as any call does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_held_up_a_moment_longer_than_a_second_keeps_its_listener() {
    marker_held_up(MS(1200)).await;
}

/// The same with the marker held up 600 ms: the listener lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coverage_a_marker_held_up_under_a_second_keeps_the_listener() {
    marker_held_up(MS(600)).await;
}

async fn marker_held_up(hold: Duration) {
    let server = RedisServer::start();
    let proxy = HoldProxy::start(server.port, hold);
    let url = proxy.url();
    learn_no_cluster(&url).await;
    let holder = lock_at(&server.url(), "held");
    let held = holder.acquire_async(None).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let lock = lock_at(&url, "held");
        tasks.push(tokio::spawn(async move {
            let guard = lock
                .acquire_async(Some(Duration::from_secs(60)))
                .await
                .unwrap();
            guard.release_async().await.unwrap();
        }));
        tokio::time::sleep(MS(3)).await;
    }
    tokio::time::sleep(MS(300)).await;
    let before = blocked_in_blpop(&server);
    // One more waiter joins: its marker is held up.
    proxy.armed.store(true, Ordering::SeqCst);
    let late = lock_at(&url, "held");
    tasks.push(tokio::spawn(async move {
        let guard = late
            .acquire_async(Some(Duration::from_secs(60)))
            .await
            .unwrap();
        guard.release_async().await.unwrap();
    }));
    let mut samples = Vec::new();
    for _ in 0..12 {
        tokio::time::sleep(MS(150)).await;
        samples.push((blocked_in_blpop(&server), server.clients()));
    }
    eprintln!("(BLPOPs, clients) every 150 ms after the join: {samples:?}");
    let after = samples.iter().map(|s| s.0).max().unwrap();
    eprintln!(
        "marker held {hold:?}: {before} connections in BLPOP before, {after} after; MULTI still armed: {}",
        proxy.armed.load(Ordering::SeqCst)
    );
    drop(held);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
    assert!(before <= 2, "{before}");
    assert!(
        after <= 4,
        "{after} connections in BLPOP for 41 waiters after the marker was held up {hold:?}"
    );
}
