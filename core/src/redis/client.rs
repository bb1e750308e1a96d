//! How a Redis client is set up and named in messages.

use redis::Client;

/// The URL without its passwords (the user's, any `…password=` in the
/// query), for messages.
pub(crate) fn redact(url: &str) -> String {
    let (url, query) = url.split_once('?').unwrap_or((url, ""));
    let mut redacted = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    };
    for (i, pair) in query.split('&').enumerate().filter(|_| !query.is_empty()) {
        redacted.push(if i == 0 { '?' } else { '&' });
        match pair.split_once('=') {
            Some((key, _)) if key.contains("password") => redacted.push_str(&format!("{key}=***")),
            _ => redacted.push_str(pair),
        }
    }
    redacted
}

/// `client`, sending no CLIENT SETINFO when it connects: its two replies
/// would be read each with the whole connect timeout, which a caller's
/// deadline cannot cut.
pub(crate) fn without_lib_name(client: Client) -> Client {
    let info = client.get_connection_info();
    let quiet = info
        .clone()
        .set_redis_settings(info.redis_settings().clone().set_skip_set_lib_name());
    Client::open(quiet).unwrap_or(client)
}

pub(crate) fn install_tls_provider() {
    // rustls needs a process-wide crypto provider; a second install is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://***@h:1/0");
        assert_eq!(
            redact(
                "redis+sentinel://u:pw@h/m?sentinel_password=s@x&sentinel_username=u&password=p"
            ),
            "redis+sentinel://***@h/m?sentinel_password=***&sentinel_username=u&password=***"
        );
    }
}
