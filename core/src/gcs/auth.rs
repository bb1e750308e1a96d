//! Where requests go and how they are authorized, decided the way Google's
//! own client libraries decide it: `STORAGE_EMULATOR_HOST` (with or without
//! a scheme) means an emulator and no credentials at all; otherwise the
//! JSON API at storage.googleapis.com with an OAuth token from an explicit
//! service-account key, or from Application Default Credentials
//! (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's user credentials, the
//! GCE/GKE metadata server). Tokens come from `gcp_auth`, which caches and
//! renews them; nothing here signs a JWT itself.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gcp_auth::{CustomServiceAccount, TokenProvider};

use super::store::{with_causes, StoreError};

const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";
const GOOGLE: &str = "https://storage.googleapis.com";
/// How long a token endpoint that answers with an error status is taken for
/// briefly failing (a 5xx, a 429) before it is taken for refusing our
/// credentials: gcp_auth does not say which status it got.
const TOKEN_REFUSALS_TOLERATED: Duration = Duration::from_secs(60);

/// Which credentials authorize requests to the real service.
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    /// Application Default Credentials.
    Default,
    /// A service-account key file.
    KeyFile(PathBuf),
    /// The contents of a service-account key file.
    KeyJson(String),
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

/// Hands out `Authorization` headers. The token provider is created on the
/// first request (never while validating options), again in a forked child
/// (its connections belong to the parent's runtime).
pub(crate) struct Auth {
    credentials: Credentials,
    provider: Mutex<Option<(u32, Arc<dyn TokenProvider>)>>,
    /// Since when the token endpoint has answered every request with an
    /// error status (None: its last answer was a token).
    refused_since: Mutex<Option<Instant>>,
}

impl Auth {
    pub(crate) fn new(credentials: Credentials) -> Self {
        Auth {
            credentials,
            provider: Mutex::new(None),
            refused_since: Mutex::new(None),
        }
    }

    pub(crate) async fn header(&self) -> Result<String, StoreError> {
        let provider = self.provider().await?;
        let token = provider
            .token(&[SCOPE])
            .await
            .map_err(|e| self.token_error(e))?;
        *self.refused_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(format!("Bearer {}", token.as_str()))
    }

    /// A token endpoint or metadata server that is briefly down must not
    /// end an acquire or leave a lock object behind on release: those
    /// failures are transient, like a 503 from Cloud Storage itself.
    fn token_error(&self, error: gcp_auth::Error) -> StoreError {
        let message = format!("getting an access token failed: {}", with_causes(&error));
        match error {
            // Could not connect, or the answer broke off: ask again.
            gcp_auth::Error::Other("HTTP request failed", _) | gcp_auth::Error::Http(..) => {
                StoreError::Transient(message)
            }
            // An error status: a 5xx or 429 passes, refused credentials do not.
            gcp_auth::Error::Str("token request failed") => {
                let mut since = self.refused_since.lock().unwrap_or_else(|e| e.into_inner());
                let refusing_for = since.get_or_insert_with(Instant::now).elapsed();
                if refusing_for < TOKEN_REFUSALS_TOLERATED {
                    StoreError::Transient(format!(
                        "{message} (the token endpoint answered with an error status)"
                    ))
                } else {
                    StoreError::Permanent(format!(
                        "{message}: the token endpoint has refused every request for {refusing_for:.0?}; are the credentials still valid?"
                    ))
                }
            }
            _ => StoreError::Permanent(message),
        }
    }

    async fn provider(&self) -> Result<Arc<dyn TokenProvider>, StoreError> {
        let pid = std::process::id();
        if let Some((owner, provider)) = self
            .provider
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            if *owner == pid {
                return Ok(provider.clone());
            }
        }
        let bad = |e: gcp_auth::Error| StoreError::Permanent(format!("credentials: {e}"));
        let provider: Arc<dyn TokenProvider> = match &self.credentials {
            Credentials::Default => gcp_auth::provider().await.map_err(bad)?,
            Credentials::KeyFile(path) => {
                Arc::new(CustomServiceAccount::from_file(path).map_err(bad)?)
            }
            Credentials::KeyJson(json) => {
                Arc::new(CustomServiceAccount::from_json(json).map_err(bad)?)
            }
        };
        *self.provider.lock().unwrap_or_else(|e| e.into_inner()) = Some((pid, provider.clone()));
        Ok(provider)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulator_hosts_get_a_scheme_and_no_auth() {
        let endpoint = Endpoint::resolve(Some("127.0.0.1:4443/"), None);
        assert_eq!(endpoint.base, "http://127.0.0.1:4443");
        assert!(!endpoint.authorized);
        let endpoint = Endpoint::resolve(Some("https://gcs.test"), Some("https://ignored"));
        assert_eq!(endpoint.base, "https://gcs.test");
    }
}
