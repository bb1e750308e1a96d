//! The quorum lock's operator tools against real redis-servers.

mod support;

use std::time::Duration;

use lockyard::quorum::{force_release, inspect, RwLock};
use support::{eventually, free_port, RedisServer};

#[test]
fn inspect_shows_each_nodes_grants_and_a_node_that_is_down() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let mut urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let lock = RwLock::builder(urls.clone(), "deploy").build().unwrap();
    let guard = lock.read(None).unwrap();
    urls.push(format!("redis://127.0.0.1:{}/0", free_port()));
    let nodes = inspect(&urls, "deploy").unwrap();
    // A read returns once a read quorum (2 of 3) granted it; the third
    // node's answer may still be on its way.
    let granted: Vec<_> = nodes[..3].iter().filter(|n| n.readers.len() == 1).collect();
    assert!(granted.len() >= 2, "{nodes:?}");
    for node in granted {
        assert!(node.writer.is_none(), "{node:?}");
        assert!(node.readers[0].expires_in > Duration::from_secs(25));
    }
    assert!(nodes[3].error.is_some() && !nodes[3].held());
    drop(guard);
    // A release returns once a quorum answered; the last node may follow.
    eventually(Duration::from_secs(2), "every node is free", || {
        inspect(&urls[..3], "deploy")
            .unwrap()
            .iter()
            .all(|n| !n.held())
    });
}

#[test]
fn force_release_clears_every_node_and_fences_keep_increasing() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let lock = RwLock::builder(urls.clone(), "deploy")
        .ttl(Duration::from_millis(600))
        .build()
        .unwrap();
    let guard = lock.write(None).unwrap();
    let old_token = guard.fencing_token().unwrap();
    // A write returns once a majority granted it; the third grant may still
    // be on its way (or, on a loaded machine, have timed out: the write
    // does not ask that node again), so force_release removes at least
    // the majority seen here and at most every node.
    let granted = inspect(&urls, "deploy")
        .unwrap()
        .iter()
        .filter(|n| n.writer.is_some())
        .count();
    assert!(granted >= 2, "a write holds a majority: {granted} of 3");
    let removed = force_release(&urls, "deploy").unwrap() as usize;
    assert!(
        (granted..=3).contains(&removed),
        "removed {removed}, granted {granted}"
    );
    assert!(
        inspect(&urls, "deploy")
            .unwrap()
            .iter()
            .all(|n| n.writer.is_none()),
        "a node still has the grant after force_release"
    );
    eventually(Duration::from_secs(1), "the holder loses quorum", || {
        !guard.healthy()
    });

    let next = RwLock::builder(urls.clone(), "deploy").build().unwrap();
    let next_guard = next.write(Some(Duration::ZERO)).unwrap();
    assert!(next_guard.fencing_token().unwrap() > old_token);
}
