//! `Lockyard::Quorum::RwLock`, the native half. Keyword arguments (nil for
//! the core's default), `with_write_lock` and `with_read_lock` are in
//! `lib/lockyard/quorum.rb`.

use lockyard::wait::InTime;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::thread_watch;

#[magnus::wrap(class = "Lockyard::Quorum::RwLock", size)]
pub(crate) struct RwLock {
    name: String,
    core: NoGvl<lockyard::quorum::RwLock>,
}

pub(crate) fn define(ruby: &Ruby, quorum: RModule) -> Result<(), Error> {
    let class = quorum.define_class("RwLock", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(RwLock::build, 7))?;
    class.define_private_method("acquire", method!(RwLock::acquire, 2))?;
    class.define_private_method("held_by_this_thread?", method!(RwLock::held, 0))?;
    class.define_method("release", method!(RwLock::release, 0))?;
    class.define_method("healthy?", method!(RwLock::healthy, 0))?;
    class.define_method("check_health!", method!(RwLock::check_health, 0))?;
    class.define_method("fencing_token", method!(RwLock::fencing_token, 0))?;
    class.define_method("nodes", method!(RwLock::nodes, 0))?;
    class.define_method("name", method!(RwLock::name, 0))?;
    class.define_method("default_timeout", method!(RwLock::default_timeout, 0))?;
    Ok(())
}

impl RwLock {
    /// Called by `RwLock.new`, which has already checked the keywords.
    #[allow(
        clippy::too_many_arguments,
        reason = "one positional argument per keyword of RwLock.new"
    )]
    fn build(
        ruby: &Ruby,
        class: RClass,
        urls: Value,
        name: Value,
        ttl: Value,
        timeout: Value,
        refresh_interval: Value,
        max_refresh_fails: Value,
        connect_timeout: Value,
    ) -> Result<Obj<RwLock>, Error> {
        let build = || {
            let name = convert::string("name", name)?;
            let urls = convert::strings("urls", urls)?;
            let builder = convert::lease_options(
                ruby,
                lockyard::quorum::RwLock::builder(urls, &name)
                    .timeout(convert::optional_seconds(ruby, "timeout", timeout)?),
                ttl,
                refresh_interval,
                max_refresh_fails,
                connect_timeout,
            )?;
            Ok(RwLock {
                core: NoGvl::new(builder.build()?),
                name,
            })
        };
        let lock = build().or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(lock, class))
    }

    /// Waits up to `timeout` seconds (nil: forever) for the write lock
    /// (`write` true) or a read lock; false when the timeout ran out.
    fn acquire(ruby: &Ruby, rb_self: &Self, write: bool, timeout: Value) -> Result<bool, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        let acquired = rb_self
            .core
            .until(ruby, deadline, |lock, deadline, interrupted| {
                let taken = if write {
                    lock.acquire_write_interruptibly(deadline, interrupted)
                } else {
                    lock.acquire_read_interruptibly(deadline, interrupted)
                };
                taken.in_time()
            });
        thread_watch::granted(ruby, acquired)
    }

    fn release(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.release())
    }

    fn held(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self.core.nonblocking(ruby, |lock| lock.held())
    }

    fn healthy(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self.core.nonblocking(ruby, |lock| lock.healthy())
    }

    fn check_health(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.check_health())
            .or_raise(ruby)
    }

    /// The first call per write grant records the token on a quorum.
    fn fencing_token(ruby: &Ruby, rb_self: &Self) -> Result<Option<u64>, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.fencing_token())
    }

    fn nodes(ruby: &Ruby, rb_self: &Self) -> Vec<String> {
        rb_self.core.nonblocking(ruby, |lock| lock.nodes().to_vec())
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn default_timeout(ruby: &Ruby, rb_self: &Self) -> Option<f64> {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.default_timeout())
            .map(|timeout| timeout.as_secs_f64())
    }
}

impl Drop for RwLock {
    /// Run by Ruby's garbage collector: releases in the background, so a
    /// collection never waits on the servers.
    fn drop(&mut self) {
        self.core.freeing().release_all_in_background();
    }
}
