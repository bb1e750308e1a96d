//! Asking the store until a deadline: transient failures (429, 5xx,
//! timeouts, resets, a token that could not be fetched) are retried with
//! backoff until the caller's time is up, never a fixed number of times,
//! and the caller learns whether an earlier try may have landed.

use std::future::Future;
use std::time::{Duration, Instant};

use super::engine::Engine;
use super::refresh::with_timeout;
use super::store::{Reply, StoreError};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::limits;
use crate::runtime;

/// Transient failures are retried after waits doubling from this...
pub(crate) const RETRY_FIRST_WAIT: Duration = Duration::from_millis(100);
/// ...up to this: GCS allows about one write per second per object.
const RETRY_MAX_WAIT: Duration = Duration::from_secs(1);
/// A call with no time to wait (`try_acquire`, a release after the lease
/// ran out) still rides out a blip this long.
pub(crate) const SHORTEST_RETRY: Duration = Duration::from_secs(2);
/// Longest sleep between two interrupt checks.
const INTERRUPT_SLICE: Duration = Duration::from_millis(50);

/// How a store operation ended after its retries.
pub(crate) struct Answer<T> {
    /// The server's answer; `Transient` when retrying ran out of time.
    pub(crate) result: Result<Reply<T>, StoreError>,
    /// An earlier attempt failed transiently: a write may have landed.
    pub(crate) retried: bool,
}

impl Engine {
    /// Runs a store operation from the caller's thread (the runtime
    /// thread drives its I/O), with the request timeout. Transient failures
    /// are retried with backoff until `until` (None: for ever), never a
    /// fixed number of times. Err only when `interrupted` fires.
    pub(crate) fn call<T, F>(
        &self,
        operation: &str,
        request: impl Fn() -> F,
        until: Option<Instant>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Answer<T>>
    where
        F: Future<Output = Result<Reply<T>, StoreError>>,
    {
        let mut wait = RETRY_FIRST_WAIT;
        let mut retried = false;
        loop {
            let sent = Stamp::now();
            let outcome = runtime::block_on(with_timeout(self.request_timeout, request()));
            let message = match outcome {
                Ok(reply) => {
                    self.clock.observe(sent, Stamp::now(), reply.server_time);
                    return Ok(Answer {
                        result: Ok(reply),
                        retried,
                    });
                }
                Err(StoreError::Transient(message)) => message,
                Err(refusal) => {
                    return Ok(Answer {
                        result: Err(refusal),
                        retried,
                    })
                }
            };
            let now = Instant::now();
            if until.is_some_and(|until| now >= until) {
                return Ok(Answer {
                    result: Err(StoreError::Transient(message)),
                    retried: true,
                });
            }
            let pause = until.map_or(wait, |until| wait.min(until - now));
            self.log(log::Level::Warn, || {
                format!(
                    "{operation} {} failed, retrying in {pause:?}: {message}",
                    self.what
                )
            });
            sleep_interruptibly(pause, interrupted, &self.what)?;
            wait = (wait * 2).min(RETRY_MAX_WAIT);
            retried = true;
        }
    }

    /// The server's answer of `answer`, or the error that retrying ran out.
    pub(crate) fn answered<T>(
        &self,
        operation: &str,
        answer: Answer<T>,
    ) -> Result<Result<Reply<T>, StoreError>> {
        match answer.result {
            Err(StoreError::Transient(message)) => Err(self.backend(
                operation,
                format!("{message} (still failing when its time to retry ran out)"),
            )),
            other => Ok(other),
        }
    }
}

/// Sleeps `wait` in slices, returning early with Interrupted.
pub(crate) fn sleep_interruptibly(
    wait: Duration,
    interrupted: &dyn Fn() -> bool,
    what: &str,
) -> Result<()> {
    let until = limits::from_now(wait);
    loop {
        if interrupted() {
            return Err(Error::Interrupted(what.to_owned()));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(INTERRUPT_SLICE));
    }
}
