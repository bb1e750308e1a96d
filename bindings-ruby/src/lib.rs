//! The Ruby binding of lockyard: `Lockyard::Redis::Lock`, `WaitGroup`,
//! `Session`, `Election` and `each_exclusive`, their `Lockyard::Etcd`
//! namesakes, `Lockyard::Quorum::RwLock`, `Lockyard::GCS::Lock` and the
//! error mapping. The pure-Ruby idioms (keyword arguments,
//! `synchronize`) live in `lib/lockyard/`; this crate only converts
//! arguments, releases the GVL around blocking calls and maps errors.

use magnus::{prelude::*, Error, Ruby};

mod command;
mod convert;
mod defaults;
mod election;
mod errors;
mod etcd_lock;
mod exclusive;
mod gcs_lock;
mod lock;
mod logs;
mod nogvl;
mod per_thread;
mod quorum;
mod session;
mod thread_watch;
mod wait_group;

#[magnus::init(name = "lockyard_ruby")]
fn init(ruby: &Ruby) -> Result<(), Error> {
    // A process forked after `require` gets identities of its own.
    lockyard::note_process_start();
    let lockyard = ruby.define_module("Lockyard")?;
    lockyard.const_set("VERSION", env!("CARGO_PKG_VERSION"))?;
    let redis = lockyard.define_module("Redis")?;
    lock::define(ruby, redis)?;
    exclusive::define(ruby, redis)?;
    session::define(ruby, redis)?;
    election::define(ruby, redis)?;
    quorum::define(ruby, lockyard.define_module("Quorum")?)?;
    command::define(lockyard)?;
    defaults::define(lockyard)?;
    // Private; lib/lockyard.rb calls it from `at_exit`.
    lockyard.define_singleton_method(
        "finish_background_work",
        magnus::function!(lockyard::finish_background_work, 0),
    )?;
    thread_watch::define(lockyard)?;
    logs::define(lockyard)?;
    let etcd = lockyard.define_module("Etcd")?;
    etcd_lock::define(ruby, etcd)?;
    session::define_etcd(ruby, etcd)?;
    election::define_etcd(ruby, etcd)?;
    exclusive::define_etcd(ruby, etcd)?;
    wait_group::define(ruby, redis, etcd)?;
    let gcs = lockyard.define_module("GCS")?;
    gcs_lock::define(ruby, gcs)
}
