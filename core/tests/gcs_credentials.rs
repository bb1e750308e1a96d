//! Every kind of credentials a CI pipeline or a developer uses, against
//! local fakes of the endpoints they talk to (gcs_support/http.rs): what
//! matters is the bearer token that reaches the storage server, and that
//! bad credentials fail fast with an error that names them.

mod gcs_support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gcs_support::http::{service_account_key, GcsOverHttp};
use lockyard::wait::InTime;
use lockyard::Error;
use serde_json::json;

/// Takes and gives back a lock with `credentials`, and returns the bearers
/// the storage server saw.
fn bearers_with(gcs: &GcsOverHttp, credentials: &str) -> Vec<String> {
    let lock = gcs.lock("credentials", credentials).build().unwrap();
    assert!(lock
        .acquire_interruptibly(Some(Duration::from_secs(10)), &|| false)
        .in_time()
        .unwrap());
    assert!(lock.release().unwrap());
    let stats = gcs.stats();
    serde_json::from_value(stats["bearers"].clone()).unwrap()
}

/// A file in a fresh directory, for a file-sourced subject token or a
/// credentials file.
fn file_with(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "lockyard-credentials-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn external_account(gcs: &GcsOverHttp, source: serde_json::Value) -> serde_json::Value {
    json!({
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/ci/providers/github",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": format!("http://{}/sts/v1/token", gcs.proxy),
        "credential_source": source,
    })
}

fn impersonation_url(gcs: &GcsOverHttp) -> String {
    format!(
        "http://{}/iam/v1/projects/-/serviceAccounts/locks@ci.iam.gserviceaccount.com:generateAccessToken",
        gcs.proxy
    )
}

/// Workload Identity Federation as GitHub Actions' `google-github-actions/
/// auth` sets it up: the CI's OIDC token in a file, exchanged at STS.
#[test]
fn an_external_account_with_a_file_sourced_token_authorizes_through_sts() {
    let Some(gcs) = GcsOverHttp::start() else {
        return;
    };
    let subject = file_with("oidc-token", "ci-oidc-token");
    let credentials = external_account(&gcs, json!({ "file": subject }));
    assert_eq!(
        bearers_with(&gcs, &credentials.to_string()),
        ["Bearer sts:ci-oidc-token"]
    );
}

/// The subject token from a URL (with the headers it needs, read from a
/// JSON field), then a service account impersonated with the STS token.
#[test]
fn an_external_account_with_a_url_sourced_token_and_impersonation() {
    let Some(gcs) = GcsOverHttp::start() else {
        return;
    };
    let mut credentials = external_account(
        &gcs,
        json!({
            "url": format!("http://{}/subject", gcs.proxy),
            "headers": { "X-Subject": "yes" },
            "format": { "type": "json", "subject_token_field_name": "value" },
        }),
    );
    credentials["service_account_impersonation_url"] = json!(impersonation_url(&gcs));
    assert_eq!(
        bearers_with(&gcs, &credentials.to_string()),
        ["Bearer impersonated:sts:url-subject"]
    );
}

/// `gcloud auth application-default login --impersonate-service-account`.
#[test]
fn an_impersonated_service_account_from_user_credentials() {
    let Some(gcs) = GcsOverHttp::start() else {
        return;
    };
    let user: serde_json::Value = serde_json::from_str(&gcs.user_credentials()).unwrap();
    let credentials = json!({
        "type": "impersonated_service_account",
        "service_account_impersonation_url": impersonation_url(&gcs),
        "source_credentials": user,
    });
    assert_eq!(
        bearers_with(&gcs, &credentials.to_string()),
        ["Bearer impersonated:proxy"]
    );
}

/// `gcloud auth application-default login`'s file, given by path.
#[test]
fn user_credentials_from_a_file() {
    let Some(gcs) = GcsOverHttp::start() else {
        return;
    };
    let path = file_with("user.json", &gcs.user_credentials());
    let lock = gcs
        .lock("credentials-file", "{}")
        .credentials_file(&path)
        .build()
        .unwrap();
    assert!(lock.try_acquire().unwrap().is_some());
    let stats = gcs.stats();
    assert_eq!(stats["bearers"], json!(["Bearer proxy"]));
}

/// A service-account key signs its own token (a JWT), with no round trip.
#[test]
fn a_service_account_key_signs_its_own_token() {
    let Some(gcs) = GcsOverHttp::start() else {
        return;
    };
    let Some(key) = service_account_key() else {
        eprintln!("skipped: openssl could not make a service-account key");
        return;
    };
    let bearers = bearers_with(&gcs, &key);
    let [bearer] = &bearers[..] else {
        panic!("{bearers:?}")
    };
    let jwt = bearer.strip_prefix("Bearer ").unwrap();
    assert_eq!(jwt.split('.').count(), 3, "{jwt}");
    assert_eq!(gcs.stats()["token"], 0, "no token endpoint asked");
}

/// The failures a user makes: each a BackendError at once that names the
/// credentials and what was wrong, and nothing written to the bucket.
#[test]
fn bad_credentials_fail_fast_naming_the_source_and_the_step() {
    let Some(gcs) = GcsOverHttp::start() else {
        return;
    };
    let refused = external_account(&gcs, json!({ "file": file_with("refused", "refused") }));
    let cases = [
        (
            "{\"type\": \"alien\"}".to_owned(),
            None,
            "unsupported credentials type \"alien\"",
        ),
        ("not json".to_owned(), None, "not JSON"),
        ("{}".to_owned(), None, "no \"type\" field"),
        (
            "{}".to_owned(),
            Some(PathBuf::from("/nonexistent/credentials.json")),
            "credentials file /nonexistent/credentials.json",
        ),
        (refused.to_string(), None, "invalid_grant"),
    ];
    for (json, file, expected) in cases {
        let mut builder = gcs.lock("bad-credentials", &json);
        if let Some(file) = file {
            builder = builder.credentials_file(file);
        }
        let lock = builder.build().unwrap();
        let started = Instant::now();
        let err = lock.acquire(Some(Duration::from_secs(20))).err().unwrap();
        assert!(
            matches!(
                err,
                Error::Backend {
                    transient: false,
                    ..
                }
            ),
            "{expected}: {err:?}"
        );
        assert!(err.to_string().contains(expected), "{expected}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{expected}: {:?}",
            started.elapsed()
        );
    }
    assert_eq!(gcs.stats()["create"], 0, "nothing was written");
}
