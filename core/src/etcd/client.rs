//! etcd's v3 API through its JSON gateway (`POST /v3/kv/txn`, ...): one
//! request, failed over across the members until the caller's deadline.
//!
//! An answer sorts three ways. A transport failure, a timeout, or a member
//! that cannot serve right now ("no leader", "leader changed", a 503) is
//! tried again on the next member; an expired auth token is renewed once;
//! anything else etcd says is the caller's to read ([`Fault::Refused`]).
//! Every request the recipes send is safe to repeat after a lost reply:
//! writes are guarded Txns on keys no one else writes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::target::Target;
use crate::error::Error;

/// gRPC's codes, as the gateway reports them (CANCELLED: a call cut
/// short, e.g. by a member shutting down).
/// Idle connections kept per member, and for how long.
const IDLE_CONNECTIONS: usize = 4;
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

const CANCELLED: i64 = 1;
const NOT_FOUND: i64 = 5;
const OUT_OF_RANGE: i64 = 11;
const UNAVAILABLE: i64 = 14;
const UNAUTHENTICATED: i64 = 16;

/// The pause before asking again, doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(25);
const MAX_PAUSE: Duration = Duration::from_millis(500);

pub(crate) struct Client {
    target: Target,
    /// Per process: a forked child must not reuse the parent's connections.
    http: Mutex<Option<(u32, reqwest::Client)>>,
    /// The member that answered last: asked first next time.
    preferred: AtomicUsize,
    token: Mutex<Option<String>>,
    /// How long one request may take before the next member is tried.
    request_timeout: Duration,
}

/// Why a request got no answer to use.
#[derive(Debug)]
pub(crate) enum Fault {
    /// etcd answered with an error that asking again will not change.
    Refused { code: i64, message: String },
    /// No member answered before the deadline: the last failure seen.
    Unanswered(String),
    /// The member could not be reached: the request was never sent.
    Unsent(String),
}

impl Fault {
    /// The lease named is gone (expired or revoked).
    pub(crate) fn is_lease_gone(&self) -> bool {
        matches!(self, Fault::Refused { code: NOT_FOUND, message } if message.contains("lease not found"))
    }

    /// A watch or range asked for a revision etcd has compacted away.
    pub(crate) fn is_compacted(&self) -> bool {
        matches!(
            self,
            Fault::Refused {
                code: OUT_OF_RANGE,
                ..
            }
        )
    }

    pub(crate) fn into_error(self, client: &Client, operation: &str) -> Error {
        match self {
            Fault::Refused { message, .. } => Error::backend(client.shown(), operation, message),
            Fault::Unanswered(message) | Fault::Unsent(message) => Error::backend_transient(
                client.shown(),
                operation,
                format!(
                    "no member answered ({}): {message}",
                    client.target.members.join(", ")
                ),
            ),
        }
    }
}

impl Client {
    pub(crate) fn new(target: Target, request_timeout: Duration) -> Client {
        // rustls needs a process-wide crypto provider; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client {
            target,
            http: Mutex::new(None),
            preferred: AtomicUsize::new(0),
            token: Mutex::new(None),
            request_timeout,
        }
    }

    /// Where requests go, and as whom: two clients of one target and
    /// request timeout may share leases.
    pub(crate) fn same_as(&self, other: &Client) -> bool {
        self.target == other.target && self.request_timeout == other.request_timeout
    }

    /// Whether requests go to the members, and as the user, of `target`.
    pub(crate) fn targets(&self, target: &Target) -> bool {
        self.target.members == target.members && self.target.credentials == target.credentials
    }

    /// The URL without its password, for messages.
    pub(crate) fn shown(&self) -> &str {
        &self.target.shown
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    fn http(&self) -> Result<reqwest::Client, Fault> {
        let pid = crate::pid::current();
        let mut slot = self.http.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, client)) = slot.as_ref().filter(|(owner, _)| *owner == pid) {
            return Ok(client.clone());
        }
        let failed = |e: reqwest::Error| Fault::Refused {
            code: 0,
            message: format!("building the HTTP client failed: {e}"),
        };
        let builder = reqwest::Client::builder()
            .connect_timeout(self.request_timeout)
            .tcp_nodelay(true)
            // A watch waits on a quiet connection: notice a dead peer.
            .tcp_keepalive(Duration::from_secs(5))
            // Each waiting watch has a connection of its own: once the
            // waits end (a crowd of them given up, say), keep a few for the
            // requests to come and close the rest, rather than keep every
            // one with its task for the pool's default 90 s.
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .pool_idle_timeout(IDLE_TIMEOUT);
        // Checked when the URL was parsed: this does not fail.
        let builder = self.target.tls.configure(builder).map_err(failed)?;
        let client = builder.build().map_err(failed)?;
        *slot = Some((pid, client.clone()));
        Ok(client)
    }

    /// Sends `body` to `path` (`"kv/txn"`), trying the members in turn
    /// until one answers or `until` passes.
    pub(crate) async fn call(
        &self,
        path: &str,
        body: &Value,
        until: Instant,
    ) -> Result<Value, Fault> {
        self.call_tracked(path, body, until)
            .await
            .map(|(answer, _)| answer)
    }

    /// [`Client::call`], also saying whether the request was sent again
    /// after an attempt whose fate is unknown (no answer, or a member that
    /// failed mid-way): the answer may then be to a repeat of a write that
    /// had already happened.
    pub(crate) async fn call_tracked(
        &self,
        path: &str,
        body: &Value,
        until: Instant,
    ) -> Result<(Value, bool), Fault> {
        let (answer, unsure) = self.call_counted(path, body, until).await;
        answer.map(|answer| (answer, unsure > 0))
    }

    /// Revokes lease `id`. Ok(false) if etcd no longer had it, unless the
    /// revoke was sent again after an attempt whose fate is unknown: then
    /// that attempt revoked it (Ok(true)).
    pub(crate) async fn revoke(&self, id: i64, until: Instant) -> Result<bool, Fault> {
        match self
            .call_counted("lease/revoke", &json!({"ID": id}), until)
            .await
        {
            (Ok(_), _) => Ok(true),
            (Err(fault), unsure) if fault.is_lease_gone() => Ok(unsure > 0),
            (Err(fault), _) => Err(fault),
        }
    }

    /// [`Client::call_tracked`], counting the attempts whose fate is
    /// unknown before the one that answered, also when the answer is a
    /// refusal.
    pub(crate) async fn call_counted(
        &self,
        path: &str,
        body: &Value,
        until: Instant,
    ) -> (Result<Value, Fault>, u32) {
        let mut pause = FIRST_PAUSE;
        let mut renewed_token = false;
        let mut unsure = 0;
        loop {
            let member = self.preferred.load(Ordering::Relaxed) % self.target.members.len();
            let failure = match self.ask(member, path, body, until).await {
                Ok(answer) => return (Ok(answer), unsure),
                Err(Fault::Refused { code, .. }) if code == UNAUTHENTICATED && !renewed_token => {
                    // The token expired (or never was): log in again, once per call.
                    renewed_token = true;
                    *self.token.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    continue;
                }
                Err(Fault::Refused { code, message }) if !is_passing(code, &message) => {
                    return (Err(Fault::Refused { code, message }), unsure)
                }
                // Never sent: a repeat cannot meet an earlier attempt's write.
                Err(Fault::Unsent(message)) => message,
                Err(Fault::Refused { message, .. }) | Err(Fault::Unanswered(message)) => {
                    unsure += 1;
                    message
                }
            };
            // The next member, from the one that failed.
            let _ = self.preferred.compare_exchange(
                member,
                member + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (Err(Fault::Unanswered(failure)), unsure);
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    async fn ask(
        &self,
        member: usize,
        path: &str,
        body: &Value,
        until: Instant,
    ) -> Result<Value, Fault> {
        let base = &self.target.members[member];
        let timeout = until
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), self.request_timeout);
        let response = self.send(member, path, body, Some(timeout), until).await?;
        let status = response.status();
        let text = response.text().await.map_err(|e| unanswered(base, &e))?;
        let answer: Value = serde_json::from_str(&text).map_err(|_| {
            Fault::Unanswered(format!(
                "{base} answered {status} with {:?}",
                shorten(&text)
            ))
        })?;
        match refusal(&answer) {
            Some(fault) => Err(fault),
            None if !status.is_success() => Err(Fault::Unanswered(format!(
                "{base} answered {status} with {:?}",
                shorten(&text)
            ))),
            None => Ok(answer),
        }
    }

    async fn send(
        &self,
        member: usize,
        path: &str,
        body: &Value,
        timeout: Option<Duration>,
        until: Instant,
    ) -> Result<reqwest::Response, Fault> {
        let base = &self.target.members[member];
        let mut request = self
            .http()?
            .post(format!("{base}/v3/{path}"))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        if let Some(token) = self.token(member, until).await? {
            request = request.header("authorization", token);
        }
        request.send().await.map_err(|e| unanswered(base, &e))
    }

    /// Opens a stream of answers (a watch) on the preferred member; its
    /// messages come one per line, for as long as the member keeps it.
    pub(crate) async fn stream(
        &self,
        path: &str,
        body: &Value,
        until: Instant,
    ) -> Result<Lines, Fault> {
        let member = self.preferred.load(Ordering::Relaxed) % self.target.members.len();
        // Only the opening is bounded (a request timeout would cut the
        // stream): a frozen member accepts the connection and says nothing.
        let left = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let opened = tokio::time::timeout(left, self.send(member, path, body, None, until))
            .await
            .unwrap_or_else(|_| {
                Err(Fault::Unanswered(format!(
                    "{} did not answer a watch in time",
                    self.target.members[member]
                )))
            });
        match opened {
            Ok(response) if response.status().is_success() => Ok(Lines {
                response,
                buffer: Vec::new(),
            }),
            Ok(response) => Err(Fault::Unanswered(format!(
                "{} answered {} to a watch",
                self.target.members[member],
                response.status()
            ))),
            Err(fault) => {
                let _ = self.preferred.compare_exchange(
                    member,
                    member + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                Err(fault)
            }
        }
    }

    /// The auth token for the target's user, logging in when there is none.
    async fn token(&self, member: usize, until: Instant) -> Result<Option<String>, Fault> {
        let Some(credentials) = &self.target.credentials else {
            return Ok(None);
        };
        if let Some(token) = self.token.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(Some(token));
        }
        let base = &self.target.members[member];
        let timeout = until
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), self.request_timeout);
        let body = json!({"name": credentials.user, "password": credentials.password});
        let response = self
            .http()?
            .post(format!("{base}/v3/auth/authenticate"))
            .timeout(timeout)
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| unanswered(base, &e))?;
        let text = response.text().await.map_err(|e| unanswered(base, &e))?;
        let answer: Value = serde_json::from_str(&text)
            .map_err(|_| Fault::Unanswered(format!("{base} answered {:?}", shorten(&text))))?;
        if let Some(fault) = refusal(&answer) {
            return Err(match fault {
                Fault::Refused { code, message } if !is_passing(code, &message) => Fault::Refused {
                    code: UNAUTHENTICATED,
                    message: format!("logging in as {:?}: {message}", credentials.user),
                },
                other => other,
            });
        }
        let token = answer["token"].as_str().map(str::to_owned);
        *self.token.lock().unwrap_or_else(|e| e.into_inner()) = token.clone();
        Ok(token)
    }
}

/// The messages of a stream, one JSON value per line.
pub(crate) struct Lines {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Lines {
    /// The next message; None when the member ended the stream.
    pub(crate) async fn next(&mut self) -> Result<Option<Value>, Fault> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let Ok(message) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                return match refusal(&message) {
                    Some(fault) => Err(fault),
                    None => Ok(Some(message)),
                };
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk),
                Ok(None) => return Ok(None),
                Err(e) => return Err(unanswered("the watch", &e)),
            }
        }
    }
}

/// An answer that is etcd's error (`{"error": ..., "code": ...}`).
/// A stream's errors nest: `{"error": {"grpc_code": ..., "message": ...}}`.
fn refusal(answer: &Value) -> Option<Fault> {
    let error = answer.get("error")?;
    let (code, message) = match error {
        Value::Object(nested) => (&nested["grpc_code"], &nested["message"]),
        flat => (&answer["code"], flat),
    };
    Some(Fault::Refused {
        code: code.as_i64().unwrap_or(0),
        message: message.as_str().unwrap_or_default().to_owned(),
    })
}

/// Errors that say a member cannot serve now, while another might (or it
/// may again once restarted: a member shutting down cancels what its
/// gateway was still asking).
fn is_passing(code: i64, message: &str) -> bool {
    code == UNAVAILABLE
        || code == CANCELLED
        || [
            "connection is closing",
            "no leader",
            "leader changed",
            "timed out",
            "not capable",
            "too many requests",
            "server stopped",
        ]
        .iter()
        .any(|what| message.contains(what))
}

fn unanswered(base: &str, error: &reqwest::Error) -> Fault {
    let kind = if error.is_timeout() {
        "timed out"
    } else {
        "failed"
    };
    let mut message = format!("request to {base} {kind}");
    let mut cause: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = cause {
        message.push_str(&format!(": {e}"));
        cause = e.source();
    }
    if error.is_connect() {
        return Fault::Unsent(message);
    }
    Fault::Unanswered(message)
}

fn shorten(text: &str) -> &str {
    let end = text.char_indices().nth(200).map_or(text.len(), |(i, _)| i);
    &text[..end]
}
