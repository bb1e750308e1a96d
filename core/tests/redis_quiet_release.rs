//! A handed-over grant is refreshed at once (it lasts only the handoff
//! window until then). When its holder released it before that refresh
//! was answered, the refresh found the slot gone, and the answer, which
//! belongs to nobody, was logged as "lock … lost: the lease ran out or the
//! slot was taken over before it could be refreshed": over a thousand
//! such warnings in one run of the asyncio benchmark's handoffs between
//! threads, each for a lock its holder had released normally.
//!
//! Its own test binary: the logger it installs is the process's.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockyard::redis::Lock;
use support::RedisServer;

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Warnings;

impl log::Log for Warnings {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            WARNINGS.lock().unwrap().push(record.args().to_string());
        }
    }

    fn flush(&self) {}
}

#[test]
fn locks_released_while_their_first_refresh_is_under_way_are_not_reported_lost() {
    log::set_logger(&Warnings).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    let server = RedisServer::start();
    let lock = Arc::new(Lock::builder(server.url(), "quiet").build().unwrap());
    let first = lock.acquire(None).unwrap();
    let turns: Vec<_> = (0..8)
        .map(|_| {
            let lock = lock.clone();
            std::thread::spawn(move || {
                for _ in 0..60 {
                    lock.acquire(None).unwrap().release().unwrap();
                }
            })
        })
        .collect();
    // Everyone queued: from now on every grant is handed over.
    std::thread::sleep(Duration::from_millis(300));
    assert!(first.release().unwrap());
    for turn in turns {
        turn.join().unwrap();
    }
    // The last refreshes' answers arrive.
    std::thread::sleep(Duration::from_millis(500));
    let warnings = WARNINGS.lock().unwrap();
    assert!(
        warnings.is_empty(),
        "{} warnings about released locks, the first: {:?}",
        warnings.len(),
        warnings.first()
    );
}
