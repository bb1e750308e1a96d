//! Which backend the `--url` options name.

use crate::exit::Failure;

pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";

#[derive(Debug, PartialEq, Eq)]
pub enum Backend {
    /// One Redis server or Cluster.
    Redis(String),
    /// Several independent Redis servers: the quorum RwLock.
    Quorum(Vec<String>),
    /// A bucket, and the prefix the lock objects are put under.
    Gcs { bucket: String, prefix: String },
    /// An etcd cluster (`etcd://` or `etcds://`, members comma-separated).
    Etcd(String),
}

impl Backend {
    /// The backend of `urls`, or of `$LOCKYARD_URL` (`env_url`), or the
    /// local Redis server.
    pub fn from_urls(urls: &[String], env_url: Option<String>) -> Result<Backend, Failure> {
        let urls: Vec<String> = match urls {
            [] => vec![env_url
                .filter(|url| !url.is_empty())
                .unwrap_or_else(|| DEFAULT_URL.to_owned())],
            urls => urls.to_vec(),
        };
        if let [url] = &urls[..] {
            if url.starts_with("etcd://") || url.starts_with("etcds://") {
                return Ok(Backend::Etcd(url.clone()));
            }
            if let Some(rest) = url.strip_prefix("gs://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(Failure::usage(format!("{url:?} names no bucket")));
                }
                return Ok(Backend::Gcs {
                    bucket: bucket.to_owned(),
                    prefix: prefix.trim_matches('/').to_owned(),
                });
            }
        }
        for url in &urls {
            if !is_redis(url) {
                let what = if url.starts_with("gs://") || url.starts_with("etcd") {
                    "a gs:// or etcd:// URL cannot be combined with others (an etcd URL lists its members: etcd://h1:2379,h2:2379)".to_owned()
                } else {
                    "expected redis://, rediss://, unix://, redis+sentinel://, etcd://, etcds:// or gs://BUCKET/PREFIX"
                        .to_owned()
                };
                return Err(Failure::usage(format!(
                    "unknown URL {:?}: {what}",
                    redact(url)
                )));
            }
        }
        Ok(match urls.len() {
            1 => Backend::Redis(urls.into_iter().next().expect("one URL")),
            _ => Backend::Quorum(urls),
        })
    }

    /// The GCS object of the lock `name`.
    pub fn object(prefix: &str, name: &str) -> String {
        match prefix {
            "" => name.to_owned(),
            prefix => format!("{prefix}/{name}"),
        }
    }
}

fn is_redis(url: &str) -> bool {
    [
        "redis://",
        "rediss://",
        "unix://",
        "redis+unix://",
        "redis+sentinel://",
        "rediss+sentinel://",
    ]
    .iter()
    .any(|scheme| url.starts_with(scheme))
}

/// The URL without a password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://…{}", &url[..scheme], &url[at..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_url_defaults_to_the_environment_then_the_local_server() {
        let from_env = Backend::from_urls(&[], Some("redis://h:1/2".into())).unwrap();
        assert_eq!(from_env, Backend::Redis("redis://h:1/2".into()));
        let local = Backend::from_urls(&[], None).unwrap();
        assert_eq!(local, Backend::Redis(DEFAULT_URL.into()));
    }

    #[test]
    fn a_sentinel_url_is_one_redis_backend() {
        let url = "redis+sentinel://a:26379,b:26379/locks";
        let sentinel = Backend::from_urls(&urls(&[url]), None).unwrap();
        assert_eq!(sentinel, Backend::Redis(url.into()));
    }

    #[test]
    fn several_urls_are_a_quorum() {
        let quorum = Backend::from_urls(&urls(&["redis://a", "redis://b", "redis://c"]), None);
        assert!(matches!(quorum, Ok(Backend::Quorum(nodes)) if nodes.len() == 3));
    }

    #[test]
    fn a_gs_url_names_bucket_and_prefix() {
        let gcs = Backend::from_urls(&urls(&["gs://ci-locks/deploys/"]), None).unwrap();
        assert_eq!(
            gcs,
            Backend::Gcs {
                bucket: "ci-locks".into(),
                prefix: "deploys".into()
            }
        );
        assert_eq!(Backend::object("deploys", "prod"), "deploys/prod");
        assert_eq!(Backend::object("", "prod"), "prod");
    }

    #[test]
    fn unknown_schemes_are_usage_errors_without_the_password() {
        let failure = Backend::from_urls(&urls(&["http://user:secret@h/"]), None).unwrap_err();
        assert_eq!(failure.status, crate::exit::USAGE);
        assert!(!failure.message.contains("secret"), "{}", failure.message);
        let mixed = Backend::from_urls(&urls(&["gs://b/p", "redis://a"]), None).unwrap_err();
        assert_eq!(mixed.status, crate::exit::USAGE);
        assert!(Backend::from_urls(&urls(&["gs:///p"]), None).is_err());
    }
}
