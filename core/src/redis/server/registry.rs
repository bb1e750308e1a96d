//! One [`Server`] per URL (and connect timeout) in a process, so every
//! lock, group and session on a server shares its connections.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use redis::Client;

use super::super::client::redact;
use super::super::sentinel::Sentinels;
use super::Server;
use crate::error::{Error, Result};

type Registry = Mutex<HashMap<(String, Duration), Arc<Server>>>;
static SERVERS: LazyLock<Registry> = LazyLock::new(Default::default);

/// Checks a URL the way users write them (`redis://`, `rediss://`,
/// `unix://`, `redis+unix://`, `redis+sentinel://`, `rediss+sentinel://`,
/// user:password, db) and returns its server.
pub(crate) fn server(url: &str, connect_timeout: Duration) -> Result<Arc<Server>> {
    let key = (url.to_owned(), connect_timeout);
    if let Some(server) = servers().get(&key) {
        return Ok(server.clone());
    }
    let server = match Sentinels::parse(url)? {
        Some(sentinels) => Arc::new(Server::following(sentinels, connect_timeout)),
        None => {
            let client = Client::open(url).map_err(|e| {
                Error::config(format!("unparsable Redis URL {:?}: {e}", redact(url)))
            })?;
            Arc::new(Server::new(client, connect_timeout))
        }
    };
    servers().insert(key, server.clone());
    Ok(server)
}

/// The registry, locked; a panic elsewhere never poisons it for good.
pub(super) fn servers() -> std::sync::MutexGuard<'static, HashMap<(String, Duration), Arc<Server>>>
{
    SERVERS.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unparsable_urls_are_config_errors() {
        for url in ["", "http://x", "redis://host:notaport", "nonsense"] {
            let err = server(url, Duration::from_secs(1)).err().expect(url);
            assert!(matches!(err, Error::Config(_)), "{url}: {err}");
        }
    }

    #[test]
    fn urls_users_write_are_accepted() {
        for url in [
            "redis://127.0.0.1:6379/0",
            "redis://user:secret@localhost:6380/3",
            "rediss://example.com:6380",
            "unix:///run/redis.sock",
            "redis+unix:///run/redis.sock?db=2",
        ] {
            assert!(server(url, Duration::from_secs(1)).is_ok(), "{url}");
        }
    }
}
