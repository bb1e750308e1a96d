//! The Cloud Storage JSON API over HTTPS, as a [`Store`] for one object.
//! Every write carries its preconditions in the query string
//! (`ifGenerationMatch`, `ifMetagenerationMatch`); the `Date` header of
//! every response is the server's clock. Status codes are sorted into
//! "said no" (412, 404), "try again" (408, 429, 5xx, timeouts, resets) and
//! "will not work" (the rest: bad credentials, missing bucket, ...).

use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use reqwest::{Client, Method, RequestBuilder, Response, StatusCode};
use serde_json::{json, Value};

use super::auth::{Auth, Endpoint};
use super::store::{
    with_causes, LockObject, Metadata, Reply, Store, StoreError, StoreFuture, Version,
};
use crate::identity::random_hex;

pub(crate) struct HttpStore {
    bucket: String,
    path: String,
    endpoint: Endpoint,
    auth: Auth,
    /// `predefinedAcl` of the created object (the gem's `object_acl`).
    predefined_acl: Option<String>,
    /// Billed project of a requester-pays bucket.
    user_project: Option<String>,
    request_timeout: Duration,
    /// Per process: a forked child must not reuse the parent's connections.
    client: Mutex<Option<(u32, Client)>>,
}

pub(crate) struct HttpOptions {
    pub(crate) endpoint: Endpoint,
    pub(crate) auth: Auth,
    pub(crate) predefined_acl: Option<String>,
    pub(crate) user_project: Option<String>,
    pub(crate) request_timeout: Duration,
}

impl HttpStore {
    pub(crate) fn new(bucket: &str, path: &str, options: HttpOptions) -> Self {
        // rustls needs a process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        HttpStore {
            bucket: bucket.to_owned(),
            path: path.to_owned(),
            endpoint: options.endpoint,
            auth: options.auth,
            predefined_acl: options.predefined_acl,
            user_project: options.user_project,
            request_timeout: options.request_timeout,
            client: Mutex::new(None),
        }
    }

    fn client(&self) -> Result<Client, StoreError> {
        let pid = crate::pid::current();
        let mut slot = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((owner, client)) = slot.as_ref() {
            if *owner == pid {
                return Ok(client.clone());
            }
        }
        let client = Client::builder()
            .timeout(self.request_timeout)
            .connect_timeout(self.request_timeout)
            .build()
            .map_err(|e| StoreError::Permanent(format!("building the HTTP client failed: {e}")))?;
        *slot = Some((pid, client.clone()));
        Ok(client)
    }

    fn object_url(&self) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.endpoint.base,
            encode(&self.bucket),
            encode(&self.path)
        )
    }

    async fn send(&self, request: RequestBuilder) -> Result<Response, StoreError> {
        let mut request = request;
        if let Some(project) = &self.user_project {
            request = request.query(&[("userProject", project)]);
        }
        if self.endpoint.authorized {
            request = request.header("Authorization", self.auth.header().await?);
        }
        request.send().await.map_err(|e| {
            let kind = if e.is_timeout() {
                "timed out"
            } else {
                "failed"
            };
            StoreError::Transient(format!(
                "request to {} {kind}: {}",
                self.endpoint.base,
                with_causes(&e)
            ))
        })
    }

    fn request(&self, method: Method, url: String) -> Result<RequestBuilder, StoreError> {
        Ok(self.client()?.request(method, url))
    }

    fn with_version(request: RequestBuilder, expected: Version) -> RequestBuilder {
        request.query(&[
            ("ifGenerationMatch", expected.generation),
            ("ifMetagenerationMatch", expected.metageneration),
        ])
    }

    async fn create_object(&self, metadata: Metadata) -> Result<Reply<LockObject>, StoreError> {
        let url = format!(
            "{}/upload/storage/v1/b/{}/o",
            self.endpoint.base,
            encode(&self.bucket)
        );
        let mut request = self.request(Method::POST, url)?.query(&[
            ("uploadType", "multipart"),
            ("name", self.path.as_str()),
            ("ifGenerationMatch", "0"),
        ]);
        if let Some(acl) = &self.predefined_acl {
            request = request.query(&[("predefinedAcl", acl)]);
        }
        let resource = json!({
            "name": self.path,
            "cacheControl": "no-store",
            "metadata": metadata_json(&metadata),
        });
        let boundary = format!("lockyard-{}", random_hex(12));
        let body = format!(
            "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{resource}\r\n\
             --{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n\r\n--{boundary}--\r\n"
        );
        let request = request
            .header(
                "Content-Type",
                format!("multipart/related; boundary={boundary}"),
            )
            .body(body);
        let response = self.send(request).await?;
        // A 404 on create is the bucket, never the object.
        let (body, server_time) = self
            .read(response, "creating the lock object", false)
            .await?;
        Ok(Reply {
            value: parse_object(&body, None)?,
            server_time,
        })
    }

    async fn get_object(&self) -> Result<Reply<Option<LockObject>>, StoreError> {
        let request = self.request(Method::GET, self.object_url())?;
        let response = self.send(request).await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(Reply {
                value: None,
                server_time: date(&response),
            });
        }
        let (body, server_time) = self.read(response, "reading the lock object", true).await?;
        Ok(Reply {
            value: Some(parse_object(&body, None)?),
            server_time,
        })
    }

    async fn update_object(
        &self,
        expected: Version,
        metadata: Metadata,
    ) -> Result<Reply<LockObject>, StoreError> {
        let request = Self::with_version(self.request(Method::PATCH, self.object_url())?, expected)
            .header("Content-Type", "application/json")
            .body(json!({ "metadata": metadata_json(&metadata) }).to_string());
        let response = self.send(request).await?;
        let (body, server_time) = self
            .read(response, "refreshing the lock object", true)
            .await?;
        Ok(Reply {
            value: parse_object(&body, Some(expected))?,
            server_time,
        })
    }

    async fn delete_object(&self, expected: Version) -> Result<Reply<()>, StoreError> {
        let request =
            Self::with_version(self.request(Method::DELETE, self.object_url())?, expected);
        let response = self.send(request).await?;
        let (_, server_time) = self
            .read(response, "deleting the lock object", true)
            .await?;
        Ok(Reply {
            value: (),
            server_time,
        })
    }

    /// The body of a successful response, or the error its status means.
    async fn read(
        &self,
        response: Response,
        operation: &str,
        object_may_be_missing: bool,
    ) -> Result<(String, Option<f64>), StoreError> {
        let status = response.status();
        let server_time = date(&response);
        let body = response.text().await.map_err(|e| {
            StoreError::Transient(format!("{operation}: reading the response failed: {e}"))
        })?;
        if status.is_success() {
            return Ok((body, server_time));
        }
        let detail = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| body.chars().take(200).collect());
        let message = format!(
            "{operation} in bucket {:?}: HTTP {status}: {detail}",
            self.bucket
        );
        Err(match status.as_u16() {
            412 => StoreError::PreconditionFailed,
            404 if object_may_be_missing => StoreError::NotFound,
            408 | 429 | 500..=599 => StoreError::Transient(message),
            _ => StoreError::Permanent(message),
        })
    }
}

impl Store for HttpStore {
    fn describe(&self) -> String {
        format!("gs://{}/{}", self.bucket, self.path)
    }

    fn create(&self, metadata: Metadata) -> StoreFuture<'_, LockObject> {
        Box::pin(self.create_object(metadata))
    }

    fn get(&self) -> StoreFuture<'_, Option<LockObject>> {
        Box::pin(self.get_object())
    }

    fn update(&self, expected: Version, metadata: Metadata) -> StoreFuture<'_, LockObject> {
        Box::pin(self.update_object(expected, metadata))
    }

    fn delete(&self, expected: Version) -> StoreFuture<'_, ()> {
        Box::pin(self.delete_object(expected))
    }
}

fn metadata_json(metadata: &Metadata) -> Value {
    json!({
        "expires_at": metadata.expires_at.to_string(),
        "identity": metadata.identity,
        "nonce": metadata.nonce,
    })
}

/// An object resource. Some emulators leave `metageneration` out of PATCH
/// responses; then the one we named stands.
fn parse_object(body: &str, expected: Option<Version>) -> Result<LockObject, StoreError> {
    let value: Value = serde_json::from_str(body)
        .map_err(|e| StoreError::Transient(format!("unparsable object resource: {e}")))?;
    let number = |field: &str| -> Option<i64> {
        match &value[field] {
            Value::String(s) => s.parse().ok(),
            other => other.as_i64(),
        }
    };
    let generation = number("generation")
        .or(expected.map(|v| v.generation))
        .ok_or_else(|| StoreError::Transient("object resource without a generation".into()))?;
    let metageneration = number("metageneration")
        .or(expected.map(|v| v.metageneration))
        .unwrap_or(1);
    let metadata = &value["metadata"];
    Ok(LockObject {
        version: Version {
            generation,
            metageneration,
        },
        identity: metadata["identity"].as_str().map(str::to_owned),
        expires_at: match &metadata["expires_at"] {
            Value::String(s) => s.trim().parse().ok(),
            other => other.as_f64(),
        },
        nonce: metadata["nonce"].as_str().map(str::to_owned),
    })
}

/// The `Date` header as Unix seconds.
fn date(response: &Response) -> Option<f64> {
    let header = response.headers().get("Date")?.to_str().ok()?;
    let at = httpdate::parse_http_date(header).ok()?;
    Some(at.duration_since(UNIX_EPOCH).ok()?.as_secs_f64())
}

/// Percent-encodes a path segment: everything but RFC 3986 unreserved
/// characters, `/` included (object names contain it).
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_one_path_segment() {
        assert_eq!(encode("locks/my work"), "locks%2Fmy%20work");
    }

    #[test]
    fn object_resources_parse_as_gcs_and_emulators_write_them() {
        let body = r#"{"generation":"17","metageneration":"3","metadata":{"identity":"a/1","expires_at":"12.5","nonce":"f00.3"}}"#;
        let object = parse_object(body, None).unwrap();
        assert_eq!(
            object.version,
            Version {
                generation: 17,
                metageneration: 3
            }
        );
        assert_eq!(object.identity.as_deref(), Some("a/1"));
        assert_eq!(object.expires_at, Some(12.5));
        assert_eq!(object.nonce.as_deref(), Some("f00.3"));
        let patched = parse_object(r#"{"generation":"17"}"#, Some(object.version)).unwrap();
        assert_eq!(patched.version.metageneration, 3);
    }
}
