//! The GCS lock for async callers: the same steps as a blocking wait
//! (`acquire.rs`), awaited on the caller's runtime with the pauses between
//! them, so a waiting task holds no thread. A wait dropped at any await
//! leaves nothing held: a create of its own that may have landed is
//! removed in the background.

use std::sync::Arc;

use super::acquire::{Attempt, Step};
use super::engine::{Engine, Hold};
use crate::error::{Error, Result};
use crate::runtime;
use crate::wait::{Deadline, NEVER};

/// An acquisition in progress. Dropped before it ended (its future was),
/// it removes the object its own create may have left.
struct Acquiring {
    engine: Arc<Engine>,
    attempt: Attempt,
    ended: bool,
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        if self.ended || !self.attempt.create_in_doubt() {
            return;
        }
        let (engine, writer) = (self.engine.clone(), self.attempt.writer().clone());
        runtime::spawn_blocking(move || {
            let dropped = Error::Interrupted(engine.what.clone());
            let _ = engine.remove_leftover(&writer, dropped);
        });
    }
}

impl Engine {
    /// [`Engine::acquire`] for an async caller: Ok(None) when `deadline`
    /// passed. Dropped meanwhile, it leaves nothing held.
    pub(crate) async fn acquire_async(
        self: &Arc<Self>,
        identity: &str,
        deadline: Deadline,
    ) -> Result<Option<Hold>> {
        runtime::check_on_tokio("acquire", &self.what)?;
        let Some(attempt) = self.start_attempt(identity, deadline)? else {
            return Ok(None);
        };
        let mut acquiring = Acquiring {
            engine: self.clone(),
            attempt,
            ended: false,
        };
        let outcome = loop {
            match self.step(&mut acquiring.attempt).await {
                Ok(Step::Held(hold)) => break Ok(Some(hold)),
                Ok(Step::GaveUp) => break Ok(None),
                Ok(Step::Pause(wait)) => tokio::time::sleep(wait).await,
                Err(error) if acquiring.attempt.create_in_doubt() => {
                    let writer = acquiring.attempt.writer();
                    let removed = self.remove_leftover_async(writer, &error).await;
                    break Err(self.leftover_error(removed, error));
                }
                Err(error) => break Err(error),
            }
        };
        acquiring.ended = true;
        outcome
    }

    /// [`Engine::release`] for an async caller. Dropped before it ends,
    /// the release finishes in the background.
    pub(crate) async fn release_async(self: &Arc<Self>, hold: Hold) -> Result<bool> {
        let engine = self.clone();
        self.unblocked(move || engine.release(hold, NEVER)).await
    }

    /// [`Engine::inspect`] for an async caller.
    pub(crate) async fn inspect_async(self: &Arc<Self>, identity: String) -> Result<(bool, bool)> {
        let engine = self.clone();
        self.unblocked(move || engine.inspect(&identity)).await
    }

    /// Runs `call` on lockyard's blocking threads and awaits its outcome;
    /// dropped meanwhile, `call` runs to its end all the same.
    async fn unblocked<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (done, called) = tokio::sync::oneshot::channel();
        runtime::spawn_blocking(move || drop(done.send(call())));
        called.await.unwrap_or_else(|_| {
            Err(Error::config(format!(
                "{}: lockyard's runtime shut down before the call ended",
                self.what
            )))
        })
    }
}
