//! The native part of the `lockyard` Python package: thin wrappers over the
//! core crate. Each Python class has its file; `unlocked.rs` is the only way
//! to call into the core (always without the GIL), `error.rs` the only place
//! core errors become exceptions, `logging.rs` the bridge to `logging`,
//! `block.rs` the end of every `with` block.

use pyo3::prelude::*;

mod async_lock;
mod async_rw_lock;
mod async_session;
mod async_wait_group;
mod asyncio;
mod block;
mod command;
mod convert;
mod defaults;
mod election;
mod error;
mod etcd_lock;
mod exclusive;
mod gcs_lock;
mod lock;
mod logging;
mod per_thread;
mod quorum;
mod session;
mod unlocked;
mod wait_group;

// Safe without the GIL: every class is frozen and its state is either
// immutable or behind the core's own locks (pyo3 checks that each one is
// Sync), and the module-wide state (the log queue, the error classes) sits
// behind a mutex or a once-cell. A free-threaded Python keeps its GIL off.
#[pymodule(gil_used = false)]
fn _lockyard(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // A process forked after the import gets identities of its own.
    lockyard::note_process_start();
    logging::install(module.py());
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Under backend-qualified names: `lockyard.redis.Lock` re-exports this
    // one, and other backends' classes are called `Lock` as well.
    module.add("RedisLock", module.py().get_type::<lock::RedisLock>())?;
    // The native halves of `lockyard.asyncio`.
    module.add(
        "Completions",
        module.py().get_type::<asyncio::Completions>(),
    )?;
    module.add("Pending", module.py().get_type::<asyncio::Pending>())?;
    module.add("AsyncLock", module.py().get_type::<async_lock::AsyncLock>())?;
    module.add_function(wrap_pyfunction!(async_lock::async_redis_lock, module)?)?;
    module.add_function(wrap_pyfunction!(async_lock::async_gcs_lock, module)?)?;
    module.add_function(wrap_pyfunction!(async_lock::async_etcd_lock, module)?)?;
    module.add(
        "AsyncRwLock",
        module.py().get_type::<async_rw_lock::AsyncRwLock>(),
    )?;
    module.add_function(wrap_pyfunction!(
        async_rw_lock::async_quorum_rw_lock,
        module
    )?)?;
    module.add(
        "AsyncWaitGroup",
        module.py().get_type::<async_wait_group::AsyncWaitGroup>(),
    )?;
    module.add_function(wrap_pyfunction!(
        async_wait_group::async_redis_wait_group,
        module
    )?)?;
    module.add_function(wrap_pyfunction!(
        async_wait_group::async_etcd_wait_group,
        module
    )?)?;
    module.add(
        "AsyncElection",
        module.py().get_type::<async_session::AsyncElection>(),
    )?;
    module.add(
        "AsyncObserver",
        module.py().get_type::<async_session::AsyncObserver>(),
    )?;
    for function in [
        wrap_pyfunction!(async_session::async_redis_election, module)?,
        wrap_pyfunction!(async_session::async_etcd_election, module)?,
        wrap_pyfunction!(async_session::redis_session_create, module)?,
        wrap_pyfunction!(async_session::etcd_session_create, module)?,
        wrap_pyfunction!(async_session::session_destroy, module)?,
    ] {
        module.add_function(function)?;
    }
    module.add_function(wrap_pyfunction!(block::end_block, module)?)?;
    module.add(
        "RedisWaitGroup",
        module.py().get_type::<wait_group::RedisWaitGroup>(),
    )?;
    module.add("RedisSlot", module.py().get_type::<wait_group::Slot>())?;
    module.add(
        "QuorumRwLock",
        module.py().get_type::<quorum::QuorumRwLock>(),
    )?;
    module.add("GcsLock", module.py().get_type::<gcs_lock::GcsLock>())?;
    module.add("EtcdLock", module.py().get_type::<etcd_lock::EtcdLock>())?;
    module.add(
        "EtcdWaitGroup",
        module.py().get_type::<wait_group::EtcdWaitGroup>(),
    )?;
    module.add_function(wrap_pyfunction!(etcd_lock::etcd_holder, module)?)?;
    module.add(
        "EtcdSession",
        module.py().get_type::<session::EtcdSession>(),
    )?;
    module.add(
        "RedisSession",
        module.py().get_type::<session::RedisSession>(),
    )?;
    module.add(
        "RedisElection",
        module.py().get_type::<election::RedisElection>(),
    )?;
    module.add(
        "EtcdElection",
        module.py().get_type::<election::EtcdElection>(),
    )?;
    // Shared by both backends' elections and walks, as RedisSlot is by
    // their wait groups.
    module.add(
        "RedisObserver",
        module.py().get_type::<election::Observer>(),
    )?;
    module.add("RedisTerm", module.py().get_type::<election::Term>())?;
    module.add("RedisClaim", module.py().get_type::<exclusive::Claim>())?;
    module.add_function(wrap_pyfunction!(exclusive::redis_claim, module)?)?;
    module.add_function(wrap_pyfunction!(exclusive::etcd_claim, module)?)?;
    module.add_function(wrap_pyfunction!(session::redis_holder, module)?)?;
    module.add_function(wrap_pyfunction!(command::run_command, module)?)?;
    module.add_function(wrap_pyfunction!(defaults::defaults, module)?)?;
    let before_exit = wrap_pyfunction!(unlocked::before_exit, module)?;
    module
        .py()
        .import("atexit")?
        .call_method1("register", (before_exit,))?;
    Ok(())
}
