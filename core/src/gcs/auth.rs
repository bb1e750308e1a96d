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
use std::sync::Mutex;
use std::time::Duration;

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
pub(crate) struct Auth {
    credentials: Credentials,
    /// How long one token request may take.
    timeout: Duration,
    provider: Mutex<Option<(u32, AccessTokenCredentials)>>,
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
        let token = tokio::time::timeout(self.timeout, provider.access_token())
            .await
            .map_err(|_| {
                StoreError::Transient(format!(
                    "getting an access token ({}) took longer than {:?}",
                    self.source(),
                    self.timeout
                ))
            })
            .and_then(|token| token.map_err(|e| self.token_error(e)));
        match token {
            Ok(token) => Ok(format!("Bearer {}", token.token)),
            Err(e) => {
                // The crate's token cache hands out a transient failure
                // again until its next scheduled refresh, seconds away; the
                // lock's own backoff decides when to ask again, so the next
                // request starts from fresh credentials.
                if matches!(e, StoreError::Transient(_)) {
                    self.provider
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .take();
                }
                Err(e)
            }
        }
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
        let pid = std::process::id();
        let mut slot = self.provider.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((owner, provider)) = slot.as_ref() {
            if *owner == pid {
                return Ok(provider.clone());
            }
        }
        let provider = self.build().map_err(|message| {
            StoreError::Permanent(format!("credentials ({}): {message}", self.source()))
        })?;
        *slot = Some((pid, provider.clone()));
        Ok(provider)
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
