//! Every GCS acquire, blocking or async: the wait (`acquire.rs`) runs as a
//! task on lockyard's runtime that the caller awaits (or a blocking caller
//! blocks on), so a waiting task holds no thread, on any executor. The
//! wait is never dropped midway (a create on its way may land after its
//! sender gave up): a caller that goes away (a dropped future, an
//! interrupt) stops it at its next pause or once its request is answered,
//! and it then cleans up after itself — removes what a create of its own
//! may have left, or gives back the hold it took meanwhile. An exiting
//! process waits for those clean-ups, as for other background work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::engine::{Engine, Hold};
use crate::error::{Error, Result};
use crate::runtime;
use crate::wait::{Deadline, NEVER};

/// How a wait learns that its caller went away.
#[derive(Default)]
struct Abandoned {
    stop: AtomicBool,
    /// Set with `stop`: the process waits at exit until the wait has
    /// cleaned up.
    cleaning_up: Mutex<Option<runtime::Background>>,
}

/// Stops a wait when its caller's future is dropped.
struct StopOnDrop(Arc<Abandoned>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        *self.0.cleaning_up.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(runtime::Background::started());
        self.0.stop.store(true, Ordering::Release);
    }
}

/// A wait's outcome on its way to its caller. Dropped before the caller
/// took the hold out (the caller's future was dropped after the wait
/// ended), it releases the hold in the background.
struct Delivery {
    engine: Arc<Engine>,
    hold: Option<Hold>,
}

impl Drop for Delivery {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        let engine = self.engine.clone();
        runtime::spawn_blocking(move || {
            if let Err(e) = engine.release(hold, NEVER) {
                engine.log(log::Level::Warn, || {
                    format!("Giving back a lock taken for a dropped wait failed: {e}")
                });
            }
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
        let abandoned = Arc::new(Abandoned::default());
        let _stop = StopOnDrop(abandoned.clone());
        let (done, waited) = tokio::sync::oneshot::channel();
        let (engine, identity) = (self.clone(), identity.to_owned());
        runtime::spawn(async move {
            let outcome = engine.wait(&identity, deadline, &abandoned.stop).await;
            // Unreceived (its caller went away as it was granted), the
            // delivery gives the hold back as it is dropped.
            let _ = done.send(outcome.map(|hold| Delivery { engine, hold }));
            // Only now may an exiting process stop waiting for this wait.
            drop(abandoned);
        });
        let delivered = waited.await.unwrap_or_else(|_| Err(self.runtime_gone()));
        delivered.map(|mut delivery| delivery.hold.take())
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
        runtime::unblocked(call)
            .await
            .unwrap_or_else(|| Err(self.runtime_gone()))
    }

    fn runtime_gone(&self) -> Error {
        runtime::shut_down(&self.what)
    }
}
