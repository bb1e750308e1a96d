//! The native side of `lockyard.asyncio.redis.WaitGroup`: the core Redis
//! wait group, shared with the futures in flight, whose waits run as
//! `_async` futures (see `asyncio.rs`). Slots belong to the process, by
//! token, as in the sync class.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::asyncio::{boolean, number, settle, string, Completions, Pending};
use crate::convert::{count, lease_options, optional_seconds, text};
use crate::error;

/// A core group shared with the futures that use it. The last one dropped
/// frees the slots of open blocks in the background, as a dropped sync
/// group does in place.
struct Shared(lockyard::redis::WaitGroup);

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.release_blocks_in_background();
    }
}

#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncRedisWaitGroup")]
pub(crate) struct AsyncRedisWaitGroup {
    group: Arc<Shared>,
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    limit: u32,
}

#[pymethods]
impl AsyncRedisWaitGroup {
    #[new]
    #[pyo3(signature = (url, name, limit, ttl=None, *, refresh_interval=None, max_refresh_fails=None, connect_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        ttl: Option<&Bound<'_, PyAny>>,
        refresh_interval: Option<&Bound<'_, PyAny>>,
        max_refresh_fails: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let name = text("name", name)?;
        let limit = count("limit", limit)?;
        let builder = lease_options(
            lockyard::redis::WaitGroup::builder(text("url", url)?, name.clone(), limit),
            ttl,
            refresh_interval,
            max_refresh_fails,
            connect_timeout,
        )?;
        // Building touches no server: nothing to detach from.
        let group = builder.build().map_err(|e| error::to_py(py, e))?;
        Ok(AsyncRedisWaitGroup {
            group: Arc::new(Shared(group)),
            name,
            limit,
        })
    }

    /// Takes a slot (for a block when `in_block`), waiting up to `timeout`
    /// seconds; its token.
    fn take(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
        in_block: bool,
    ) -> PyResult<Pending> {
        let deadline = lockyard::Deadline::after(optional_seconds("timeout", timeout)?);
        let (group, kept) = (self.group.clone(), self.group.clone());
        Ok(settle(
            completions,
            future,
            async move {
                match in_block {
                    true => group.0.enter_async(deadline).await,
                    false => group.0.add_async(deadline).await,
                }
            },
            string,
            move |token| kept.0.leave_in_background(&token),
        ))
    }

    fn done(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<Pending> {
        let (group, token) = (self.group.clone(), text("token", token)?);
        Ok(settle(
            completions,
            future,
            async move { group.0.done_async(&token).await },
            boolean,
            drop,
        ))
    }

    fn adopt(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<Pending> {
        let (group, token) = (self.group.clone(), text("token", token)?);
        Ok(settle(
            completions,
            future,
            async move { group.0.adopt_async(&token).await },
            boolean,
            drop,
        ))
    }

    /// Ends the block that took `token`'s slot.
    fn leave(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        token: String,
    ) -> Pending {
        let group = self.group.clone();
        settle(
            completions,
            future,
            async move { group.0.leave_async(&token).await },
            boolean,
            drop,
        )
    }

    fn leave_in_background(&self, token: &str) {
        self.group.0.leave_in_background(token);
    }

    fn wait(
        &self,
        completions: &Bound<'_, Completions>,
        future: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pending> {
        let timeout = optional_seconds("timeout", timeout)?;
        let group = self.group.clone();
        Ok(settle(
            completions,
            future,
            async move { group.0.wait_async(timeout).await },
            boolean,
            drop,
        ))
    }

    fn count(&self, completions: &Bound<'_, Completions>, future: &Bound<'_, PyAny>) -> Pending {
        let group = self.group.clone();
        settle(
            completions,
            future,
            async move { group.0.count_async().await },
            number,
            drop,
        )
    }

    fn healthy(&self, token: &str) -> bool {
        self.group.0.healthy(token)
    }

    fn check_health(&self, py: Python<'_>, token: &str) -> PyResult<()> {
        self.group
            .0
            .check_health(token)
            .map_err(|e| error::to_py(py, e))
    }

    fn fencing_token(&self, token: &str) -> Option<u64> {
        self.group.0.fencing_token(token)
    }
}
