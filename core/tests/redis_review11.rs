//! Review 11 of a54015b (a dropped `SessionBuilder::build_async` deletes
//! its key on the link its SET was sent on). Tests whose doc starts with
//! "FINDING:" reproduce problems found at a54015b and fail there. This
//! test binary re-runs itself as the child process (see `exiting_child`).

mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use lockyard::redis::Session;
use support::{Helper, RedisServer};

const CHILD_ENV: &str = "LOCKYARD_TEST_REVIEW11_CHILD";
const MS: fn(u64) -> Duration = Duration::from_millis;

/// Not a test on its own: with CHILD_ENV set (a Redis URL), on a
/// current-thread runtime of its own, warms up a session's connection,
/// says "ready", waits for a line, then cuts a session create off after
/// 300 ms (the parent paused Redis's writes: the SET is on the wire, its
/// reply not back) and exits the process from inside the runtime, as
/// `std::process::exit` in a `#[tokio::main(flavor = "current_thread")]`
/// does.
#[test]
fn exiting_child() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let warm = Session::builder(&url).build_async().await.unwrap();
        warm.destroy_async().await.unwrap();
        println!("ready");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        let building = Session::builder(&url).ttl(MS(60_000)).build_async();
        let cut = tokio::time::timeout(MS(300), building).await;
        assert!(
            cut.is_err(),
            "the create was answered while Redis was paused"
        );
        println!("dropped");
        std::process::exit(0);
    });
}

fn session_keys(server: &RedisServer) -> Vec<String> {
    let mut keys = server.keys();
    keys.retain(|key| key.starts_with("lockyard:session:"));
    keys
}

/// FINDING: the delete of a dropped create now goes on the create's link,
/// whose connection is driven by the caller's runtime. A process that
/// exits from inside that runtime (`std::process::exit` on a current-thread
/// runtime's thread) waits at exit for the delete (`spawn_awaited` is
/// background work), which its own blocked thread would have to write: it
/// hangs until `EXIT_WAIT` (10 s; the link's timeout is `COMMAND_TIMEOUT`,
/// 10 s too, so the route's fallback never runs), and the SET, already on
/// the wire, lands and leaves the session key for its whole ttl. Before
/// a54015b the delete went out at once on lockyard's own runtime.
#[test]
fn finding_a_process_exiting_inside_its_runtime_after_a_dropped_session_create_hangs_and_leaves_the_key(
) {
    let server = RedisServer::start();
    let mut child = Helper::start("exiting_child", CHILD_ENV, server.url());
    child.expect("ready");
    let mut raw = server.raw().unwrap();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("WRITE")
        .query::<()>(&mut raw)
        .unwrap();
    let stdin = child.child.stdin.as_mut().unwrap();
    writeln!(stdin).unwrap();
    stdin.flush().unwrap();
    child.expect("dropped");
    let dropped_at = Instant::now();
    let mut exited = None;
    while dropped_at.elapsed() < Duration::from_secs(20) {
        if let Some(status) = child.child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        std::thread::sleep(MS(20));
    }
    let took = dropped_at.elapsed();
    assert!(exited.is_some(), "the child never exited");
    // The pause is over; the SET has run by now if it was sent.
    std::thread::sleep(MS(1500));
    let keys = session_keys(&server);
    assert!(
        took < Duration::from_secs(4) && keys.is_empty(),
        "the child took {took:?} to exit after dropping the create, and left {keys:?}"
    );
}
