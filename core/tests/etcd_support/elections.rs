//! What the election tests share: sessions to campaign under, and the
//! terms an observer reports.

use std::time::Duration;

use lockyard::etcd::{Session, Term};

/// A session on `url` with whole-second `ttl`, `lock_delay` and
/// `connect_timeout`.
pub fn session_at(url: &str, ttl: u64, lock_delay: u64, connect_timeout: u64) -> Session {
    Session::builder(url)
        .ttl(Duration::from_secs(ttl))
        .lock_delay(Duration::from_secs(lock_delay))
        .connect_timeout(Duration::from_secs(connect_timeout))
        .build()
        .unwrap()
}

/// The term `value` began, with `fencing_token`.
pub fn began(value: &str, fencing_token: u64) -> Term {
    Term {
        value: Some(value.to_owned()),
        fencing_token,
    }
}

/// The term of `fencing_token` ended.
pub fn ended(fencing_token: u64) -> Term {
    Term {
        value: None,
        fencing_token,
    }
}
