//! `redis+sentinel://` and `rediss+sentinel://` URLs: which sentinels to
//! ask for which master, with whose credentials.

use std::sync::Mutex;

use redis::Client;

use super::Sentinels;
use crate::error::{Error, Result};

/// Where a sentinel listens when its URL names no port.
const DEFAULT_PORT: u16 = 26379;

impl Sentinels {
    /// Parses `url` if it names sentinels; None for any other scheme.
    pub(crate) fn parse(url: &str) -> Result<Option<Sentinels>> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(None);
        };
        let scheme = match scheme {
            "redis+sentinel" => "redis",
            "rediss+sentinel" => "rediss",
            _ => return Ok(None),
        };
        let bad = |why: &str| {
            Error::config(format!(
                "bad Sentinel URL {:?}: {why} (expected {scheme}+sentinel://[user:password@]host:port[,host:port…]/master-name[/db][?sentinel_password=…])",
                super::super::client::redact(url)
            ))
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (master_auth, hosts) = match authority.rsplit_once('@') {
            Some((auth, hosts)) => (format!("{auth}@"), hosts),
            None => (String::new(), authority),
        };
        let addresses = hosts
            .split(',')
            .map(sentinel_address)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("each sentinel is host or host:port"))?;
        let mut path = path.split('/');
        let master_name = path.next().unwrap_or("").to_owned();
        if master_name.is_empty() {
            return Err(bad("no master name"));
        }
        let db = match path.next() {
            None | Some("") => 0,
            Some(db) => db.parse().map_err(|_| bad("the db is not a number"))?,
        };
        if path.next().is_some() {
            return Err(bad("too many path segments"));
        }
        let (mut user, mut password) = ("", "");
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("sentinel_username", value)) => user = value,
                Some(("sentinel_password", value)) => password = value,
                _ => {
                    let key = pair.split_once('=').map_or(pair, |(key, _)| key);
                    return Err(bad(&format!("unknown parameter {key:?}")));
                }
            }
        }
        let sentinel_auth = match (user, password) {
            ("", "") => String::new(),
            (user, password) => format!("{user}:{password}@"),
        };
        let sentinels = Sentinels {
            addresses: Mutex::new(addresses),
            master_name,
            scheme,
            master_auth,
            sentinel_auth,
            db,
        };
        // Whatever redis-rs would refuse later (a bad percent-encoding).
        for (auth, what) in [
            (&sentinels.master_auth, "the master's user or password"),
            (&sentinels.sentinel_auth, "the sentinels' user or password"),
        ] {
            Client::open(format!("{scheme}://{auth}127.0.0.1"))
                .map_err(|e| bad(&format!("{what}: {e}")))?;
        }
        Ok(Some(sentinels))
    }
}

fn sentinel_address(host: &str) -> Option<String> {
    let (host, port) = match host.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && !port.ends_with(']') => {
            (host, port.parse::<u16>().ok()?)
        }
        _ => (host, DEFAULT_PORT),
    };
    (!host.is_empty() && !host.contains(['@', '/'])).then(|| format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_sentinels_master_and_db() {
        let url = "redis+sentinel://u:p%40ss@a:26380,b,[::1]:5000/mymaster/3?sentinel_password=s";
        let sentinels = Sentinels::parse(url).unwrap().unwrap();
        assert_eq!(*sentinels.addresses(), ["a:26380", "b:26379", "[::1]:5000"]);
        assert_eq!(sentinels.master_name, "mymaster");
        assert_eq!(sentinels.db, 3);
        assert_eq!(sentinels.master_auth, "u:p%40ss@");
        assert_eq!(sentinels.sentinel_auth, ":s@");
        assert!(!sentinels.tls());
        let tls = Sentinels::parse("rediss+sentinel://h/m").unwrap().unwrap();
        assert!(tls.tls());
        assert!(Sentinels::parse("redis://h:1/0").unwrap().is_none());
    }

    #[test]
    fn bad_sentinel_urls_are_config_errors() {
        for url in [
            "redis+sentinel://h:26379",
            "redis+sentinel://h:26379/",
            "redis+sentinel://h:notaport/m",
            "redis+sentinel://,h/m",
            "redis+sentinel://h/m/notadb",
            "redis+sentinel://h/m/0/extra",
            "redis+sentinel://h/m/-1",
            "redis+sentinel://h/m?password=x",
        ] {
            let err = Sentinels::parse(url).err().expect(url);
            assert!(matches!(err, Error::Config(_)), "{url}: {err}");
        }
    }
}
