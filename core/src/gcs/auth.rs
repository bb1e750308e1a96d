//! Where requests go and how they are authorized, decided the way Google's
//! own client libraries decide it: `STORAGE_EMULATOR_HOST` (with or without
//! a scheme) means an emulator and no credentials at all; otherwise the
//! JSON API at storage.googleapis.com with an OAuth token from explicit
//! credentials (a file or its JSON, of any type Google's libraries take), or
//! from Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`,
//! gcloud's credentials, the GCE/GKE metadata server). Tokens come from
//! Google's `google-cloud-auth`, which caches and renews them and speaks
//! every credential type: service-account keys (self-signed JWTs),
//! `authorized_user`, `impersonated_service_account`, and `external_account`
//! — Workload Identity Federation, how CI systems authenticate without keys.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use google_cloud_auth::credentials::{
    external_account, impersonated, service_account, user_account, AccessTokenCredentials, Builder,
};
use google_cloud_auth::errors::CredentialsError;
use serde_json::Value;

use super::store::{with_causes, StoreError};

const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
const GOOGLE: &str = "https://storage.googleapis.com";

/// Which credentials authorize requests to the real service.
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    /// Application Default Credentials.
    Default,
    /// A credentials file (any type, see the module's doc).
    File(PathBuf),
    /// The contents of a credentials file.
    Json(String),
}

/// The base URL of the JSON API and whether it wants a token.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Endpoint {
    pub(crate) base: String,
    pub(crate) authorized: bool,
}

impl Endpoint {
    /// An explicit emulator wins, then `STORAGE_EMULATOR_HOST`, then an
    /// explicit endpoint (authorized), then Google's.
    pub(crate) fn resolve(emulator_host: Option<&str>, endpoint: Option<&str>) -> Endpoint {
        let from_env = std::env::var("STORAGE_EMULATOR_HOST")
            .ok()
            .filter(|host| !host.trim().is_empty());
        if let Some(host) = emulator_host.map(str::to_owned).or(from_env) {
            return Endpoint {
                base: with_scheme(host.trim()),
                authorized: false,
            };
        }
        Endpoint {
            base: with_scheme(endpoint.unwrap_or(GOOGLE)),
            authorized: true,
        }
    }
}

/// `localhost:4443` → `http://localhost:4443`, as Google's libraries read
/// the emulator variable; no trailing slash.
fn with_scheme(host: &str) -> String {
    let host = host.trim_end_matches('/');
    if host.contains("://") {
        host.to_owned()
    } else {
        format!("http://{host}")
    }
}

/// Hands out `Authorization` headers. The credentials are built on the
/// first request (never while validating options), again in a forked child
/// (their connections belong to the parent's runtime).
///
/// Built credentials own a background task of the crate's that fetches
/// their token and then sleeps until it is due for renewal (about 56
/// minutes for an hour's token). Nothing outside the crate can stop that
/// task: it looks at whether anyone still holds the credentials only when
/// it wakes. So credentials are dropped only when their task is about to
/// wake anyway, or their token request is taken for lost; see
/// [`Auth::header`] and [`Auth::unanswered`].
pub(crate) struct Auth {
    credentials: Credentials,
    /// How long one token request may take.
    timeout: Duration,
    provider: Mutex<Option<Provider>>,
}

/// Credentials built in process `pid`, and since when their token has been
/// awaited without any answer.
struct Provider {
    pid: u32,
    credentials: AccessTokenCredentials,
    unanswered_since: Option<Instant>,
}

impl Auth {
    pub(crate) fn new(credentials: Credentials, timeout: Duration) -> Self {
        Auth {
            credentials,
            timeout,
            provider: Mutex::new(None),
        }
    }

    pub(crate) async fn header(&self) -> Result<String, StoreError> {
        let provider = self.provider()?;
        let Ok(token) = tokio::time::timeout(self.timeout, provider.access_token()).await else {
            // The token request goes on in the crate's task, which caches
            // the answer for the next request to find. Credentials built
            // anew would send another, and leave this task to sleep out
            // its token's life once it is answered.
            self.unanswered();
            return Err(StoreError::Transient(format!(
                "getting an access token ({}) took longer than {:?}",
                self.source(),
                self.timeout
            )));
        };
        self.answered();
        match token.map_err(|e| self.token_error(e)) {
            Ok(token) => Ok(format!("Bearer {}", token.token)),
            Err(e) => {
                // The crate's token cache hands out a transient failure
                // again until its next try, 10 s away; the lock's own
                // backoff decides when to ask again, so the next request
                // starts from fresh credentials. The task of these ones
                // ends when it wakes for that try and finds them dropped.
                if matches!(e, StoreError::Transient(_)) {
                    self.slot().take();
                }
                Err(e)
            }
        }
    }

    /// A token request of the current credentials went unanswered in
    /// time. A slow endpoint's answer is awaited by the next requests
    /// (which find it cached), but one still missing at twice the request
    /// timeout is taken for lost: the crate sets no timeout of its own, so
    /// a request sent into a silent network would hold every later one
    /// until the OS gives up on its connection (minutes, or never), while
    /// credentials built anew would get a token at once. The lost request's
    /// task may stay behind until then: at most one per two timeouts.
    fn unanswered(&self) {
        let mut slot = self.slot();
        let since = match slot.as_mut() {
            Some(provider) => *provider.unanswered_since.get_or_insert_with(Instant::now),
            None => return,
        };
        // `since` is the first timeout: the request was a timeout old then.
        if since.elapsed() >= self.timeout {
            slot.take();
        }
    }

    fn answered(&self) {
        if let Some(provider) = self.slot().as_mut() {
            provider.unanswered_since = None;
        }
    }

    fn slot(&self) -> MutexGuard<'_, Option<Provider>> {
        self.provider.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A token endpoint, STS or metadata server that is briefly down (no
    /// connection, a 5xx, a 429) must not end an acquire or leave a lock
    /// object behind on release: the crate calls those transient, and so
    /// do we, as for a 503 from Cloud Storage itself. A refusal (a 4xx:
    /// revoked key, wrong audience, an expired subject token) is not.
    fn token_error(&self, error: CredentialsError) -> StoreError {
        let message = format!(
            "getting an access token ({}) failed: {}",
            self.source(),
            with_causes(&error)
        );
        match error.is_transient() {
            true => StoreError::Transient(message),
            false => StoreError::Permanent(message),
        }
    }

    /// Where the credentials come from, for messages.
    fn source(&self) -> String {
        match &self.credentials {
            Credentials::Default => "Application Default Credentials".to_owned(),
            Credentials::File(path) => format!("credentials file {}", path.display()),
            Credentials::Json(_) => "credentials JSON".to_owned(),
        }
    }

    fn provider(&self) -> Result<AccessTokenCredentials, StoreError> {
        let pid = crate::pid::current();
        let mut slot = self.slot();
        if let Some(provider) = slot.as_ref().filter(|provider| provider.pid == pid) {
            return Ok(provider.credentials.clone());
        }
        let credentials = self.build().map_err(|message| {
            StoreError::Permanent(format!("credentials ({}): {message}", self.source()))
        })?;
        *slot = Some(Provider {
            pid,
            credentials: credentials.clone(),
            unanswered_since: None,
        });
        Ok(credentials)
    }

    fn build(&self) -> Result<AccessTokenCredentials, String> {
        let json = match &self.credentials {
            Credentials::Default => {
                return Builder::default()
                    .with_scopes([SCOPE])
                    .build_access_token_credentials()
                    .map_err(|e| with_causes(&e));
            }
            Credentials::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
            Credentials::Json(json) => json.clone(),
        };
        from_json(&json)
    }
}

/// Credentials from the JSON of a credentials file, by its `type`, as
/// Application Default Credentials would read the same file.
fn from_json(json: &str) -> Result<AccessTokenCredentials, String> {
    let value: Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .ok_or("no \"type\" field")?
        .to_owned();
    let built = match kind.as_str() {
        "service_account" => service_account::Builder::new(value)
            .with_access_specifier(service_account::AccessSpecifier::from_scopes([SCOPE]))
            .build_access_token_credentials(),
        "authorized_user" => user_account::Builder::new(value)
            .with_scopes([SCOPE])
            .build_access_token_credentials(),
        "impersonated_service_account" => impersonated::Builder::new(value)
            .with_scopes([SCOPE])
            .build_access_token_credentials(),
        "external_account" => external_account::Builder::new(value)
            .with_scopes([SCOPE])
            .build_access_token_credentials(),
        other => {
            return Err(format!(
                "unsupported credentials type {other:?} (service_account, authorized_user, \
                 impersonated_service_account and external_account are)"
            ))
        }
    };
    built.map_err(|e| format!("{kind}: {}", with_causes(&e)))
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// A token endpoint for `authorized_user` credentials that answers
    /// every request `delay` late, with a token good for an hour.
    struct SlowTokenEndpoint {
        address: String,
        requests: Arc<AtomicUsize>,
    }

    impl SlowTokenEndpoint {
        fn start(delay: Duration) -> SlowTokenEndpoint {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let address = listener.local_addr().unwrap().to_string();
            let requests = Arc::new(AtomicUsize::new(0));
            let counted = requests.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    counted.fetch_add(1, Ordering::SeqCst);
                    std::thread::spawn(move || {
                        let mut reader = BufReader::new(&stream);
                        let mut length = 0;
                        let mut line = String::new();
                        while reader.read_line(&mut line).is_ok_and(|read| read > 2) {
                            let lower = line.to_ascii_lowercase();
                            if let Some(value) = lower.strip_prefix("content-length:") {
                                length = value.trim().parse().unwrap_or(0);
                            }
                            line.clear();
                        }
                        let _ = reader.read_exact(&mut vec![0; length]);
                        std::thread::sleep(delay);
                        let body = r#"{"access_token":"slow-token","token_type":"Bearer","expires_in":3600}"#;
                        let _ = write!(
                            &stream,
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    });
                }
            });
            SlowTokenEndpoint { address, requests }
        }

        fn credentials(&self) -> Credentials {
            Credentials::Json(
                serde_json::json!({
                    "type": "authorized_user",
                    "client_id": "client",
                    "client_secret": "secret",
                    "refresh_token": "refresh",
                    "token_uri": format!("http://{}/token", self.address),
                })
                .to_string(),
            )
        }
    }

    /// Each token request the library starts runs in a task of its own,
    /// which sleeps until the token is due for renewal (about 56 minutes
    /// for an hour's token). A request that outlasts the caller's timeout
    /// is still answered; its task must be the one that serves the next
    /// request, not one of many left sleeping with nobody to serve.
    #[test]
    fn a_token_slower_than_the_timeout_is_awaited_by_one_refresher() {
        // As the HTTP store does before any request.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Answered after 400 ms: later than the 250 ms timeout, before twice it.
        let endpoint = SlowTokenEndpoint::start(Duration::from_millis(400));
        let auth = Auth::new(endpoint.credentials(), Duration::from_millis(250));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = runtime.block_on(auth.header()).unwrap_err();
        assert!(matches!(err, StoreError::Transient(_)), "{err:?}");
        // Long enough for every request sent so far to be answered.
        runtime.block_on(async { tokio::time::sleep(Duration::from_millis(800)).await });
        assert_eq!(
            runtime.metrics().num_alive_tasks(),
            1,
            "tasks alive: the refresher of the credentials in use"
        );
        assert_eq!(
            runtime.block_on(auth.header()).unwrap(),
            "Bearer slow-token"
        );
        assert_eq!(
            endpoint.requests.load(Ordering::SeqCst),
            1,
            "token requests"
        );
    }

    #[test]
    fn emulator_hosts_get_a_scheme_and_no_auth() {
        let endpoint = Endpoint::resolve(Some("127.0.0.1:4443/"), None);
        assert_eq!(endpoint.base, "http://127.0.0.1:4443");
        assert!(!endpoint.authorized);
        let endpoint = Endpoint::resolve(Some("https://gcs.test"), Some("https://ignored"));
        assert_eq!(endpoint.base, "https://gcs.test");
    }
}
