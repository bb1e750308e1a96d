//! The native side of the asyncio wait groups (`lockyard.asyncio.redis`'s
//! and `.etcd`'s `WaitGroup`): a core group, shared with the futures in
//! flight, whose waits run as `_async` futures (see `asyncio.rs`). Slots
//! belong to the process, by token, as in the sync class. One class for
//! every backend: the core groups share these methods' names and meanings
//! ([`CoreGroup`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lockyard::Deadline;
use pyo3::prelude::*;
use pyo3::types::PyAny;

use crate::asyncio::{boolean, number, settle, string, Completions, Pending};
use crate::convert::{count, lease_options, optional_seconds, text};
use crate::error;
use crate::wait_group::etcd_wait_group_builder;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = lockyard::Result<T>> + Send + 'a>>;

/// What `AsyncWaitGroup` asks of a core group.
trait CoreGroup: Send + Sync + 'static {
    fn add_async(&self, deadline: Deadline) -> Boxed<'_, String>;
    fn enter_async(&self, deadline: Deadline) -> Boxed<'_, String>;
    fn done_async<'a>(&'a self, token: &'a str) -> Boxed<'a, bool>;
    fn adopt_async<'a>(&'a self, token: &'a str) -> Boxed<'a, bool>;
    fn leave_async<'a>(&'a self, token: &'a str) -> Boxed<'a, bool>;
    fn wait_async(&self, timeout: Option<Duration>) -> Boxed<'_, bool>;
    fn count_async(&self) -> Boxed<'_, u32>;
    fn leave_in_background(&self, token: &str);
    fn release_blocks_in_background(&self);
    fn healthy(&self, token: &str) -> bool;
    fn check_health(&self, token: &str) -> lockyard::Result<()>;
    fn fencing_token(&self, token: &str) -> Option<u64>;
}

macro_rules! core_group {
    ($group:ty) => {
        impl CoreGroup for $group {
            fn add_async(&self, deadline: Deadline) -> Boxed<'_, String> {
                Box::pin(<$group>::add_async(self, deadline))
            }
            fn enter_async(&self, deadline: Deadline) -> Boxed<'_, String> {
                Box::pin(<$group>::enter_async(self, deadline))
            }
            fn done_async<'a>(&'a self, token: &'a str) -> Boxed<'a, bool> {
                Box::pin(<$group>::done_async(self, token))
            }
            fn adopt_async<'a>(&'a self, token: &'a str) -> Boxed<'a, bool> {
                Box::pin(<$group>::adopt_async(self, token))
            }
            fn leave_async<'a>(&'a self, token: &'a str) -> Boxed<'a, bool> {
                Box::pin(<$group>::leave_async(self, token))
            }
            fn wait_async(&self, timeout: Option<Duration>) -> Boxed<'_, bool> {
                Box::pin(<$group>::wait_async(self, timeout))
            }
            fn count_async(&self) -> Boxed<'_, u32> {
                Box::pin(<$group>::count_async(self))
            }
            fn leave_in_background(&self, token: &str) {
                <$group>::leave_in_background(self, token);
            }
            fn release_blocks_in_background(&self) {
                <$group>::release_blocks_in_background(self);
            }
            fn healthy(&self, token: &str) -> bool {
                <$group>::healthy(self, token)
            }
            fn check_health(&self, token: &str) -> lockyard::Result<()> {
                <$group>::check_health(self, token)
            }
            fn fencing_token(&self, token: &str) -> Option<u64> {
                <$group>::fencing_token(self, token)
            }
        }
    };
}

core_group!(lockyard::redis::WaitGroup);
core_group!(lockyard::etcd::WaitGroup);

/// A core group shared with the futures that use it. The last one dropped
/// frees the slots of open blocks in the background, as a dropped sync
/// group does in place.
struct Shared(Box<dyn CoreGroup>);

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.release_blocks_in_background();
    }
}

#[pyclass(frozen, module = "lockyard._lockyard", name = "AsyncWaitGroup")]
pub(crate) struct AsyncWaitGroup {
    group: Arc<Shared>,
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    limit: u32,
}

impl AsyncWaitGroup {
    fn new(group: impl CoreGroup, name: String, limit: u32) -> Self {
        AsyncWaitGroup {
            group: Arc::new(Shared(Box::new(group))),
            name,
            limit,
        }
    }
}

/// The asyncio twin of ``lockyard.redis.WaitGroup``'s native half, with
/// its options. Building touches no server.
#[pyfunction]
#[pyo3(signature = (url, name, limit, ttl=None, *, refresh_interval=None, max_refresh_fails=None, connect_timeout=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn async_redis_wait_group(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    limit: &Bound<'_, PyAny>,
    ttl: Option<&Bound<'_, PyAny>>,
    refresh_interval: Option<&Bound<'_, PyAny>>,
    max_refresh_fails: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<AsyncWaitGroup> {
    let name = text("name", name)?;
    let limit = count("limit", limit)?;
    let builder = lease_options(
        lockyard::redis::WaitGroup::builder(text("url", url)?, name.clone(), limit),
        ttl,
        refresh_interval,
        max_refresh_fails,
        connect_timeout,
    )?;
    let group = builder.build().map_err(|e| error::to_py(py, e))?;
    Ok(AsyncWaitGroup::new(group, name, limit))
}

/// The asyncio twin of ``lockyard.etcd.WaitGroup``'s native half, with
/// its options. Building sends no request.
#[pyfunction]
#[pyo3(signature = (url, name, limit, ttl=None, *, connect_timeout=None))]
pub(crate) fn async_etcd_wait_group(
    py: Python<'_>,
    url: &Bound<'_, PyAny>,
    name: &Bound<'_, PyAny>,
    limit: &Bound<'_, PyAny>,
    ttl: Option<&Bound<'_, PyAny>>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<AsyncWaitGroup> {
    let name = text("name", name)?;
    let limit = count("limit", limit)?;
    let builder = etcd_wait_group_builder(url, &name, limit, ttl, connect_timeout)?;
    let group = builder.build().map_err(|e| error::to_py(py, e))?;
    Ok(AsyncWaitGroup::new(group, name, limit))
}

#[pymethods]
impl AsyncWaitGroup {
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
