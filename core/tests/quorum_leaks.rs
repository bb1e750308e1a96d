//! The fan-out never leaks: after timeouts, cancellations, a stopped node
//! and a dead one, the runtime's live tasks and the servers' connections
//! return to their baseline, and no grant is left behind. One test per
//! binary, so nothing else runs on the runtime meanwhile.

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use lockyard::quorum::{live_tasks, RwLock};
use lockyard::wait::InTime;
use support::{eventually, RedisServer};

#[test]
fn tasks_and_connections_return_to_baseline_after_timeouts_cancellations_and_failures() {
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let build = || {
        Arc::new(
            RwLock::builder(urls.clone(), "leaks")
                .ttl(Duration::from_secs(10))
                .connect_timeout(Duration::from_secs(1))
                .build()
                .unwrap(),
        )
    };
    let (holder, contender) = (build(), build());
    // Every node up at first contact: only then can new nodes be told from
    // restarted ones and grant at once (see scripts/guard.lua).
    drop(holder.write(None).unwrap());
    // The dead node is dead from here on: its connection attempts fail
    // each time and must leave nothing behind either.
    drop(servers.pop());
    drop(holder.write(None).unwrap());
    // The release returned at quorum; let the rest of its requests finish.
    thread::sleep(Duration::from_millis(300));
    let tasks = live_tasks();
    let clients: Vec<usize> = servers.iter().map(RedisServer::clients).collect();

    let held = holder.write(None).unwrap();
    // Timeouts: denied attempts until the wait runs out.
    for _ in 0..10 {
        let got = contender
            .acquire_write_interruptibly(Some(Duration::from_millis(30)), &|| false)
            .in_time();
        assert!(!got.unwrap());
        let got = contender
            .acquire_read_interruptibly(Some(Duration::from_millis(30)), &|| false)
            .in_time();
        assert!(!got.unwrap());
    }
    // Cancellations: waits cut short by the interrupt check.
    for _ in 0..5 {
        let asked = Instant::now();
        let got = contender
            .acquire_write_interruptibly(None, &|| asked.elapsed() > Duration::from_millis(40))
            .in_time();
        assert!(got.is_err());
    }
    drop(held);
    // A stopped node: its requests time out, its grants come late.
    servers[3].signal("STOP");
    for _ in 0..5 {
        drop(contender.write(Some(Duration::from_secs(2))).unwrap());
        drop(contender.read(Some(Duration::from_secs(2))).unwrap());
    }
    servers[3].signal("CONT");

    eventually(Duration::from_secs(10), "tasks return to baseline", || {
        live_tasks() == tasks
    });
    eventually(
        Duration::from_secs(5),
        "connections return to baseline",
        || servers.iter().map(RedisServer::clients).collect::<Vec<_>>() == clients,
    );
    eventually(Duration::from_secs(5), "no grant is left", || {
        servers.iter().all(|s| {
            s.keys().iter().all(|k| {
                // Fencing, the restart guard, marks and the node list
                // that expire by themselves.
                [":fence", ":alive", ":waiting", ":nodes"]
                    .iter()
                    .any(|kept| k.ends_with(kept))
            })
        })
    });
    thread::sleep(Duration::from_millis(100));
    assert_eq!(live_tasks(), tasks);
}
