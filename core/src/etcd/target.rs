//! Where an `etcd://` URL points: its members, whether they speak TLS, and
//! the user to authenticate as.
//!
//! `etcd://[user:password@]host[:port][,host[:port]...]`, `etcds://` for
//! TLS; the port defaults to 2379. `etcds://` takes etcdctl's TLS files as
//! a query: `?cacert=PATH` (trust only that CA, not the system's roots) and
//! `&cert=PATH&key=PATH` (a client certificate, for etcd's
//! `--client-cert-auth`). A path, an unknown option, a file that cannot be
//! read or parsed, or an empty member is an [`Error::Config`], found before
//! anything is sent.

use crate::error::{Error, Result};

/// etcd's client port.
const DEFAULT_PORT: u16 = 2379;

#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Target {
    /// Base URLs of the members, in the order given (`http://host:port`).
    pub(crate) members: Vec<String>,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) tls: Tls,
    /// The URL without its password, for messages.
    pub(crate) shown: String,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

/// What `etcds://` trusts and shows, read from the URL's files once, when
/// the URL is parsed: a file replaced later is read by the next lock built.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Tls {
    /// PEM certificates to trust instead of the system's roots (`cacert`).
    pub(crate) roots: Option<Vec<u8>>,
    /// The client's PEM certificate chain followed by its key (`cert`, `key`).
    pub(crate) identity: Option<Vec<u8>>,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target> {
        let bad = |why: &str| Error::config(format!("bad etcd URL {:?}: {why}", redact(url)));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected etcd://host:port or etcds://host:port"))?;
        let http = match scheme {
            "etcd" => "http",
            "etcds" => "https",
            _ => return Err(bad("the scheme must be etcd:// or etcds://")),
        };
        let (userinfo, rest) = split_userinfo(rest);
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let tls = match query {
            Some(_) if http == "http" => {
                return Err(bad("cacert, cert and key are for etcds:// (TLS) URLs"))
            }
            Some(query) => Tls::from_query(query).map_err(|why| bad(&why))?,
            None => Tls::default(),
        };
        let hosts = rest.strip_suffix('/').unwrap_or(rest);
        if hosts.contains(['/', '#']) {
            return Err(bad("an etcd URL has members only, no path"));
        }
        let credentials = userinfo
            .map(|userinfo| {
                let (user, password) = userinfo
                    .split_once(':')
                    .ok_or_else(|| bad("expected user:password before '@'"))?;
                if user.is_empty() {
                    return Err(bad("the user name is empty"));
                }
                Ok(Credentials {
                    user: percent_decode(user).ok_or_else(|| bad("bad %-escape in the user"))?,
                    password: percent_decode(password)
                        .ok_or_else(|| bad("bad %-escape in the password"))?,
                })
            })
            .transpose()?;
        let members = hosts
            .split(',')
            .map(|member| {
                member_url(http, member).ok_or_else(|| bad("no member, or a bad host:port"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Target {
            members,
            credentials,
            tls,
            shown: redact(url),
        })
    }
}

impl Tls {
    /// Reads and checks the files `query` names; Err says why not.
    fn from_query(query: &str) -> std::result::Result<Tls, String> {
        let (mut cacert, mut cert, mut key) = (None, None, None);
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match name {
                "cacert" => &mut cacert,
                "cert" => &mut cert,
                "key" => &mut key,
                _ => {
                    return Err(format!(
                        "unknown option {name:?}: expected cacert, cert or key"
                    ))
                }
            };
            let path = percent_decode(value).ok_or_else(|| format!("bad %-escape in {name}"))?;
            if path.is_empty() {
                return Err(format!("{name} needs a file: {name}=PATH"));
            }
            if slot.replace(path).is_some() {
                return Err(format!("{name} is given twice"));
            }
        }
        let read = |name: &str, path: &str| {
            std::fs::read(path).map_err(|e| format!("cannot read {name} {path:?}: {e}"))
        };
        let roots = match cacert {
            Some(path) => {
                let pem = read("cacert", &path)?;
                match reqwest::Certificate::from_pem_bundle(&pem) {
                    Ok(certs) if !certs.is_empty() => Some(pem),
                    _ => return Err(format!("cacert {path:?} holds no PEM certificate")),
                }
            }
            None => None,
        };
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                let mut pem = read("cert", &cert)?;
                pem.push(b'\n');
                pem.extend(read("key", &key)?);
                if reqwest::Identity::from_pem(&pem).is_err() {
                    return Err(format!(
                        "cert {cert:?} and key {key:?} are not a PEM certificate and its private key"
                    ));
                }
                Some(pem)
            }
            (None, None) => None,
            _ => return Err("cert and key go together".into()),
        };
        let tls = Tls { roots, identity };
        // rustls needs a process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The DER under the PEM labels, and a key that fits its
        // certificate, are checked only when a client is built.
        tls.configure(reqwest::Client::builder())
            .and_then(reqwest::ClientBuilder::build)
            .map_err(|e| format!("the TLS files are not usable: {e}"))?;
        Ok(tls)
    }

    /// `builder` trusting and showing these files.
    pub(crate) fn configure(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> reqwest::Result<reqwest::ClientBuilder> {
        if let Some(roots) = &self.roots {
            builder = builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(roots)?);
        }
        if let Some(identity) = &self.identity {
            builder = builder.identity(reqwest::Identity::from_pem(identity)?);
        }
        Ok(builder)
    }
}

fn member_url(http: &str, member: &str) -> Option<String> {
    let member = member.trim();
    let (host, port) = match member.rsplit_once(':') {
        // An IPv6 address without a port is bracketed: "[::1]".
        Some((host, port)) if !port.ends_with(']') => (host, port.parse::<u16>().ok()?),
        _ => (member, DEFAULT_PORT),
    };
    if host.is_empty() || port == 0 {
        return None;
    }
    let url = format!("{http}://{host}:{port}");
    // What the HTTP client will parse: a bad host fails here, not later.
    reqwest::Url::parse(&url)
        .ok()
        .filter(|u| u.host().is_some())?;
    Some(url)
}

/// `user:password` and what follows its '@', if the URL (after its
/// scheme) starts with them. The userinfo ends at the first '@' (one in a
/// password is written %40) unless a '/' comes before it: then that '@' is
/// in a file path of the query, and there is none. A password may hold a
/// '?', which is not yet the query.
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    match rest.split_once('@') {
        Some((userinfo, after)) if !userinfo.contains('/') => (Some(userinfo), after),
        _ => (None, rest),
    }
}

/// `url` with its password replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match split_userinfo(rest) {
        (Some(userinfo), after) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}:***@{after}")
        }
        (None, _) => url.to_owned(),
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_credentials_and_tls_come_from_the_url() {
        let target = Target::parse("etcds://ci:p%40ss@h1:2379,h2,10.0.0.3:32379/").unwrap();
        assert_eq!(
            target.members,
            [
                "https://h1:2379",
                "https://h2:2379",
                "https://10.0.0.3:32379"
            ]
        );
        let credentials = target.credentials.unwrap();
        assert_eq!(
            (credentials.user.as_str(), credentials.password.as_str()),
            ("ci", "p@ss")
        );
        assert_eq!(target.shown, "etcds://ci:***@h1:2379,h2,10.0.0.3:32379/");
        assert_eq!(
            Target::parse("etcd://[::1]").unwrap().members,
            ["http://[::1]:2379"]
        );
    }

    #[test]
    fn a_bad_url_is_a_config_error_that_hides_the_password() {
        for url in [
            "etcd://",
            "etcd://h1,,h2",
            "etcd://h1:notaport",
            "etcd://h1:0",
            "redis://h1:2379",
            "h1:2379",
            "etcd://h1/prefix",
            "etcd://h1?x=1",
            "etcd://h1?cacert=/etc/ssl/certs/ca-certificates.crt",
            "etcds://h1?x=1",
            "etcds://h1?cacert=",
            "etcds://h1?cacert=/nonexistent/ca.pem",
            "etcds://h1?cacert=/etc/passwd",
            "etcds://h1?cert=/etc/passwd",
            "etcds://h1?key=/etc/passwd",
            "etcds://h1?cert=/etc/passwd&key=/etc/passwd",
            "etcd://:secret@h1",
            "etcd://user@h1",
        ] {
            let err = Target::parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url} parsed"));
            assert!(matches!(err, Error::Config(_)), "{url}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
