//! Asking the store: each request bounded by the request timeout, each
//! dated reply teaching the server's clock; from a caller's thread,
//! transient failures (429, 5xx, timeouts, resets, a token that could not
//! be fetched) are retried with backoff until the caller's time is up,
//! never a fixed number of times, and the caller learns whether an earlier
//! try may have landed.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::clock::ServerClock;
use super::store::{Reply, Store, StoreError};
use crate::clock::Stamp;
use crate::error::{Error, Result};
use crate::limits;
use crate::runtime;
use crate::wait::Interrupt;

/// Transient failures are retried after waits doubling from this...
pub(crate) const RETRY_FIRST_WAIT: Duration = Duration::from_millis(100);
/// ...up to this: GCS allows about one write per second per object.
const RETRY_MAX_WAIT: Duration = Duration::from_secs(1);
/// A call with no time to wait (`try_acquire`, a release after the lease
/// ran out) still rides out a blip this long.
pub(crate) const SHORTEST_RETRY: Duration = Duration::from_secs(2);
/// Longest sleep between two interrupt checks.
const INTERRUPT_SLICE: Duration = Duration::from_millis(50);

/// The store as one lock asks it: the engine's store, clock, request
/// timeout and log, borrowed for the requests at hand.
#[derive(Clone, Copy)]
pub(crate) struct Requests<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) clock: &'a ServerClock,
    pub(crate) timeout: Duration,
    /// "lock gs://bucket/path", for messages.
    pub(crate) what: &'a str,
    pub(crate) log: &'a (dyn Fn(log::Level, &str) + Send + Sync),
}

/// How a store operation ended after its retries.
pub(crate) struct Answer<T> {
    /// The server's answer; `Transient` when retrying ran out of time.
    pub(crate) result: Result<Reply<T>, StoreError>,
    /// An earlier attempt failed transiently: a write may have landed.
    pub(crate) retried: bool,
    /// Some try was cut off by the request timeout: sent, never answered,
    /// it may still reach the server and land later.
    pub(crate) cut_off: bool,
}

impl Requests<'_> {
    /// One request with the request timeout; a dated reply teaches the clock.
    pub(crate) async fn ask<T>(
        self,
        request: impl Future<Output = Result<Reply<T>, StoreError>>,
    ) -> Result<Reply<T>, StoreError> {
        self.ask_once(request).await.0
    }

    /// [`Requests::ask`], and whether the request timeout cut it off.
    async fn ask_once<T>(
        self,
        request: impl Future<Output = Result<Reply<T>, StoreError>>,
    ) -> (Result<Reply<T>, StoreError>, bool) {
        let sent = Stamp::now();
        let Ok(outcome) = tokio::time::timeout(self.timeout, request).await else {
            let message = format!("no reply within {:?}", self.timeout);
            return (Err(StoreError::Transient(message)), true);
        };
        if let Ok(reply) = &outcome {
            self.clock.observe(sent, Stamp::now(), reply.server_time);
        }
        (outcome, false)
    }

    /// Runs a store operation from the caller's thread (the runtime
    /// thread drives its I/O): [`Requests::call_async`], which
    /// `interrupted` stops (asked at least every 50 ms) with
    /// [`Error::Interrupted`] in a pause between tries.
    pub(crate) fn call<T, F>(
        self,
        operation: &str,
        request: impl Fn() -> F + Send,
        until: Option<Instant>,
        interrupted: Interrupt<'_>,
    ) -> Result<Answer<T>>
    where
        T: Send,
        F: Future<Output = Result<Reply<T>, StoreError>> + Send,
    {
        let stop = AtomicBool::new(false);
        let calling = self.call_async(operation, request, until, &stop);
        runtime::block_on_until_stopped(calling, interrupted, &stop)
    }

    /// Runs a store operation with the request timeout. Transient failures
    /// are retried with backoff until `until` (None: for ever), never a
    /// fixed number of times. Err only when `stop` is set, which ends the
    /// pauses between tries: the first try is always sent (a release must
    /// reach the server), and a try on its way, which may land, is awaited.
    pub(crate) async fn call_async<T, F>(
        self,
        operation: &str,
        request: impl Fn() -> F,
        until: Option<Instant>,
        stop: &AtomicBool,
    ) -> Result<Answer<T>>
    where
        F: Future<Output = Result<Reply<T>, StoreError>>,
    {
        let mut wait = RETRY_FIRST_WAIT;
        let (mut retried, mut cut_off) = (false, false);
        loop {
            let (outcome, this_cut_off) = self.ask_once(request()).await;
            cut_off |= this_cut_off;
            let message = match outcome {
                Ok(reply) => {
                    return Ok(Answer {
                        result: Ok(reply),
                        retried,
                        cut_off,
                    })
                }
                Err(StoreError::Transient(message)) => message,
                Err(refusal) => {
                    return Ok(Answer {
                        result: Err(refusal),
                        retried,
                        cut_off,
                    })
                }
            };
            let now = Instant::now();
            if until.is_some_and(|until| now >= until) {
                return Ok(Answer {
                    result: Err(StoreError::Transient(message)),
                    retried: true,
                    cut_off,
                });
            }
            let pause = until.map_or(wait, |until| wait.min(until - now));
            (self.log)(
                log::Level::Warn,
                &format!(
                    "{operation} {} failed, retrying in {pause:?}: {message}",
                    self.what
                ),
            );
            pause_unless_stopped(pause, stop, self.what).await?;
            wait = (wait * 2).min(RETRY_MAX_WAIT);
            retried = true;
        }
    }

    /// The server's answer of `answer`, or the error that retrying ran out.
    pub(crate) fn answered<T>(
        self,
        operation: &str,
        answer: Answer<T>,
    ) -> Result<Result<Reply<T>, StoreError>> {
        match answer.result {
            Err(StoreError::Transient(message)) => Err(self.failed(
                operation,
                StoreError::Transient(format!(
                    "{message} (still failing when its time to retry ran out)"
                )),
            )),
            other => Ok(other),
        }
    }

    /// The error for a store operation that ended in `e`, which was not
    /// retried (or no longer): transient only if the store said so.
    pub(crate) fn failed(self, operation: &str, e: StoreError) -> Error {
        let transient = matches!(e, StoreError::Transient(_));
        Error::backend_failed(&self.store.describe(), operation, e, transient)
    }
}

/// Sleeps `wait` in slices, returning early with Interrupted once `stop`
/// is set.
pub(crate) async fn pause_unless_stopped(
    wait: Duration,
    stop: &AtomicBool,
    what: &str,
) -> Result<()> {
    let until = limits::from_now(wait);
    loop {
        if stop.load(Ordering::Acquire) {
            return Err(Error::Interrupted(what.to_owned()));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        tokio::time::sleep(left.min(INTERRUPT_SLICE)).await;
    }
}
