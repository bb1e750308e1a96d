//! Application Default Credentials with nothing configured fall back to the
//! metadata server (GCE, GKE, Cloud Run), found at `GCE_METADATA_HOST`. A
//! test binary of its own: it sets process-wide environment variables.

mod gcs_support;

use std::time::Duration;

use gcs_support::http::GcsOverHttp;
use lockyard::gcs::Lock;
use lockyard::wait::InTime;

#[test]
fn with_nothing_configured_the_metadata_server_authorizes() {
    let Some(gcs) = GcsOverHttp::start() else {
        return;
    };
    // The only test in this binary: nothing else reads the environment.
    std::env::remove_var("GOOGLE_APPLICATION_CREDENTIALS");
    std::env::set_var("HOME", std::env::temp_dir().join("lockyard-no-gcloud"));
    std::env::set_var("GCE_METADATA_HOST", &gcs.proxy);
    let lock = Lock::builder("locks", "metadata")
        .endpoint(format!("http://{}", gcs.proxy))
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    assert!(lock
        .acquire_interruptibly(Some(Duration::from_secs(10)), &|| false)
        .in_time()
        .unwrap());
    assert!(lock.release().unwrap());
    assert_eq!(
        gcs.stats()["bearers"],
        serde_json::json!(["Bearer metadata"])
    );
}
