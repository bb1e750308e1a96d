//! One multiplexed connection per runtime for async callers' requests
//! that answer at once (scripts, reads): a thousand tasks acquiring at
//! once send their scripts over it, where a connection each would cost
//! each of them its buffers. Blocking reads (a BLPOP, XREAD BLOCK) stay on
//! connections of their own (see [`Channel::CallerAlone`]).

use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;
use tokio::sync::OnceCell;

use super::super::sentinel::Node;
use super::Server;
use crate::error::Result;

/// Runtimes whose shared connections a server keeps: those of a runtime
/// that ended age out as others come.
const MAX_RUNTIMES: usize = 16;

/// A runtime's shared connection, made by the first call that needs it
/// while the others wait for it.
pub(super) type Shared = Arc<OnceCell<(Arc<Node>, MultiplexedConnection)>>;

/// This process's id, and each runtime's shared connection.
#[derive(Default)]
pub(super) struct SharedByRuntime(Mutex<(u32, Vec<(tokio::runtime::Id, Shared)>)>);

impl Server {
    /// The calling task's runtime's shared connection, made on first need
    /// (once, however many calls need it at once). `fresh`: forget the one
    /// there is (it turned out closed) and make another. Also returns
    /// whether it existed before this call.
    pub(super) async fn shared_connection(
        &self,
        fresh: bool,
    ) -> Result<(Arc<Node>, MultiplexedConnection, Shared, bool)> {
        let runtime = tokio::runtime::Handle::current().id();
        let shared = {
            let mut table = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
            let pid = crate::pid::current();
            if table.0 != pid {
                // Inherited from the parent: dropping them would wake their
                // drivers on the parent's runtime, which has no thread here.
                std::mem::forget(std::mem::replace(&mut *table, (pid, Vec::new())));
            }
            let found = table.1.iter().position(|(id, _)| *id == runtime);
            match found {
                Some(at) if !fresh => table.1[at].1.clone(),
                _ => {
                    if let Some(at) = found {
                        table.1.remove(at);
                    } else if table.1.len() == MAX_RUNTIMES {
                        table.1.remove(0);
                    }
                    let shared = Shared::default();
                    table.1.push((runtime, shared.clone()));
                    shared
                }
            }
        };
        let existed = shared.initialized();
        let (node, conn) = shared
            .get_or_try_init(|| async {
                let node = self.node_in_background().await?;
                // No response timeout of its own: each call's deadline bounds it.
                let conn = self.connect_async(&node, None).await?;
                Ok::<_, crate::Error>((node, conn))
            })
            .await?
            .clone();
        if existed && !(self.is_current(&node) && self.still_master_in_background(&node).await) {
            // Behind Sentinel, the master changed: the next call connects anew.
            self.forget_shared(&shared);
            return Box::pin(self.shared_connection(true)).await;
        }
        Ok((node, conn, shared, existed))
    }

    /// Whether `shared` is still the calling runtime's shared connection.
    pub(super) fn is_shared(&self, shared: &Shared) -> bool {
        let table = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        table
            .1
            .iter()
            .any(|(_, current)| Arc::ptr_eq(current, shared))
    }

    /// A shared connection failed: the next call makes another. Calls
    /// still on it finish there.
    pub(super) fn forget_shared(&self, shared: &Shared) {
        let mut table = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        table.1.retain(|(_, other)| !Arc::ptr_eq(other, shared));
    }
}
