//! A store whose creates may land late, for the clean-up tests of the
//! GCS waits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockyard::gcs::{LockObject, Metadata, Store, StoreError, StoreFuture, Version};

use super::FaithfulStore;

/// The faithful store, except that a create may be made to reach the
/// server and land only `late` after it was sent, whatever becomes of
/// the caller in between: as over HTTP, where dropping a request that is
/// on its way does not take it back from the server.
pub struct LandsLate {
    inner: Arc<FaithfulStore>,
    /// Creates to let through first, and how late the next one lands.
    create_lands_after: Mutex<Option<(u32, Duration)>>,
}

impl LandsLate {
    pub fn new(inner: &Arc<FaithfulStore>) -> Arc<LandsLate> {
        Arc::new(LandsLate {
            inner: inner.clone(),
            create_lands_after: Mutex::new(None),
        })
    }

    /// The next create lands `late` after it is sent.
    pub fn next_create_lands_after(&self, late: Duration) {
        self.create_lands_after_skipping(0, late);
    }

    /// The create after the next `skip` ones lands `late` after it is sent.
    pub fn create_lands_after_skipping(&self, skip: u32, late: Duration) {
        *self.create_lands_after.lock().unwrap() = Some((skip, late));
    }
}

impl Store for LandsLate {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn create(&self, metadata: Metadata) -> StoreFuture<'_, LockObject> {
        let late = {
            let mut slot = self.create_lands_after.lock().unwrap();
            match *slot {
                Some((0, late)) => {
                    *slot = None;
                    late
                }
                Some((skip, late)) => {
                    *slot = Some((skip - 1, late));
                    return self.inner.create(metadata);
                }
                None => return self.inner.create(metadata),
            }
        };
        // The server has the request: it applies it on its own time.
        let (answer, answered) = tokio::sync::oneshot::channel();
        let inner = self.inner.clone();
        std::thread::spawn(move || {
            std::thread::sleep(late);
            let server = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let _ = answer.send(server.block_on(inner.create(metadata)));
        });
        Box::pin(async move {
            answered
                .await
                .unwrap_or_else(|_| Err(StoreError::Transient("no reply".into())))
        })
    }

    fn get(&self) -> StoreFuture<'_, Option<LockObject>> {
        self.inner.get()
    }

    fn update(&self, expected: Version, metadata: Metadata) -> StoreFuture<'_, LockObject> {
        self.inner.update(expected, metadata)
    }

    fn delete(&self, expected: Version) -> StoreFuture<'_, ()> {
        self.inner.delete(expected)
    }
}
