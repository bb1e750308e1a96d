//! The blocking API called from inside the caller's own tokio runtime, as
//! a service that has not moved to the `_async` twins does: every primitive
//! works there (never "Cannot start a runtime from within a runtime"), on a
//! current-thread and on a multi-thread runtime, on Redis, the quorum,
//! GCS and etcd.

mod etcd_support;
mod gcs_support;
mod support;

use std::time::Duration;

use etcd_support::EtcdServer;
use lockyard::quorum::RwLock;
use support::RedisServer;

const SHORT: Option<Duration> = Some(Duration::from_secs(5));

/// The Lock, WaitGroup, Session and Election of `backend` (a module path:
/// Redis and etcd share these names and methods) on `url`.
macro_rules! the_backend {
    ($backend:path, $url:expr) => {{
        use $backend::{Election, Lock, Session, WaitGroup};
        let url: &str = $url;
        let lock = Lock::builder(url, "in-tokio").build().unwrap();
        let guard = lock.acquire(SHORT).unwrap();
        assert!(lock.try_acquire().is_err(), "held by this thread already");
        guard.check_health().unwrap();
        assert!(guard.release().unwrap());

        let group = WaitGroup::builder(url, "in-tokio-group", 2)
            .build()
            .unwrap();
        let token = group.add(SHORT, &|| false).unwrap();
        assert_eq!(group.count().unwrap(), 1);
        assert!(group.done(&token).unwrap());
        assert!(group.wait(SHORT).unwrap());

        let session = Session::builder(url).build().unwrap();
        let election = Election::new(url, "in-tokio-election", &session).unwrap();
        assert!(election.campaign("me", SHORT).unwrap());
        assert_eq!(election.leader().unwrap().as_deref(), Some("me"));
        assert!(election.resign().unwrap());
        session.destroy().unwrap();
    }};
}

fn inside(runtime: tokio::runtime::Runtime, servers: &[RedisServer], etcd: &EtcdServer) {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let etcd_url = etcd.url();
    let store = gcs_support::FaithfulStore::new();
    runtime.block_on(async move {
        the_backend!(lockyard::redis, urls[0].as_str());

        let rw = RwLock::builder(urls.clone(), "in-tokio-rw")
            .build()
            .unwrap();
        let writing = rw.write(SHORT).unwrap();
        assert!(writing.release().unwrap());

        let gcs = gcs_support::builder(&store).build().unwrap();
        let held = gcs.acquire(SHORT).unwrap();
        held.check_health().unwrap();
        assert!(held.release().unwrap());

        the_backend!(lockyard::etcd, etcd_url.as_str());
    });
    assert!(etcd.keys().is_empty(), "{:?}", etcd.keys());
}

fn servers() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

#[test]
fn every_primitive_works_inside_a_current_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    inside(runtime, &servers(), &EtcdServer::start());
}

#[test]
fn every_primitive_works_inside_a_multi_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    inside(runtime, &servers(), &EtcdServer::start());
}
