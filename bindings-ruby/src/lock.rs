//! `Lockyard::Redis::Lock`, the native half. Keyword arguments (nil for
//! the core's default), `lock` and `synchronize` are in
//! `lib/lockyard/redis.rb`.

use std::time::Duration;

use lockyard::wait::InTime;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::session::Session;
use crate::thread_watch;

#[magnus::wrap(class = "Lockyard::Redis::Lock", size)]
pub(crate) struct Lock {
    name: String,
    core: NoGvl<lockyard::redis::Lock>,
}

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    let class = redis.define_class("Lock", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(Lock::build, 10))?;
    class.define_private_method("acquire", method!(Lock::acquire, 1))?;
    class.define_method("try_lock", method!(Lock::try_lock, 0))?;
    class.define_method("unlock", method!(Lock::unlock, 0))?;
    class.define_private_method("leave", method!(Lock::leave, 0))?;
    class.define_method("healthy?", method!(Lock::healthy, 0))?;
    class.define_method("check_health!", method!(Lock::check_health, 0))?;
    class.define_method("owned?", method!(Lock::owned, 0))?;
    class.define_method("locked?", method!(Lock::locked, 0))?;
    class.define_method("fencing_token", method!(Lock::fencing_token, 0))?;
    class.define_method("name", method!(Lock::name, 0))?;
    class.define_method("identity", method!(Lock::identity, 0))?;
    class.define_method("default_timeout", method!(Lock::default_timeout, 0))?;
    Ok(())
}

impl Lock {
    /// Called by `Lock.new`, which has already checked the keywords; wraps
    /// the lock as an instance of `class`, so subclasses construct themselves.
    #[allow(
        clippy::too_many_arguments,
        reason = "one positional argument per keyword of Lock.new"
    )]
    fn build(
        ruby: &Ruby,
        class: RClass,
        url: Value,
        name: Value,
        ttl: Value,
        timeout: Value,
        refresh_interval: Value,
        max_refresh_fails: Value,
        identity_prefix: Value,
        connect_timeout: Value,
        session: Value,
        value: Value,
    ) -> Result<Obj<Lock>, Error> {
        let build = || {
            let name = convert::string("name", name)?;
            let mut builder = convert::lease_options(
                ruby,
                lockyard::redis::Lock::builder(convert::string("url", url)?, &name)
                    .timeout(convert::optional_seconds(ruby, "timeout", timeout)?),
                ttl,
                refresh_interval,
                max_refresh_fails,
                connect_timeout,
            )?;
            if let Some(prefix) = convert::optional_string("identity_prefix", identity_prefix)? {
                builder = builder.identity_prefix(prefix);
            }
            if let Some(value) = convert::optional_string("value", value)? {
                builder = builder.value(value);
            }
            if !session.is_nil() {
                let session = Session::given(session)?;
                builder = session
                    .core
                    .nonblocking(ruby, |session| session.bind(builder));
            }
            Ok(Lock {
                core: NoGvl::new(builder.build()?),
                name,
            })
        };
        let lock = build().or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(lock, class))
    }

    /// Waits up to `timeout` seconds (nil: forever); true once held,
    /// Lockyard::TimeoutError when the timeout runs out.
    fn acquire(ruby: &Ruby, rb_self: &Self, timeout: Value) -> Result<bool, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        let acquired = rb_self
            .core
            .until(ruby, deadline, |lock, deadline, interrupted| {
                lock.acquire_interruptibly(deadline, interrupted)
                    .map(|()| true)
            });
        thread_watch::granted(ruby, acquired)
    }

    fn try_lock(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        let acquired = rb_self.core.blocking(ruby, |lock, interrupted| {
            lock.acquire_interruptibly(Duration::ZERO, interrupted)
                .in_time()
        });
        thread_watch::granted(ruby, acquired)
    }

    fn unlock(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.release())
    }

    /// Ends a block that locked: unlocks unless the hold is a parent
    /// process's, inherited by a fork inside the block.
    fn leave(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.leave())
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

    fn owned(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.owned())
    }

    fn locked(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.locked())
    }

    fn fencing_token(ruby: &Ruby, rb_self: &Self) -> Option<u64> {
        rb_self.core.nonblocking(ruby, |lock| lock.fencing_token())
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn identity(ruby: &Ruby, rb_self: &Self) -> String {
        rb_self.core.nonblocking(ruby, |lock| lock.identity())
    }

    fn default_timeout(ruby: &Ruby, rb_self: &Self) -> Option<f64> {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.default_timeout())
            .map(|timeout| timeout.as_secs_f64())
    }
}

impl Drop for Lock {
    /// Run by Ruby's garbage collector, with the GVL held: what the lock
    /// still holds is released in the background, so a collection never
    /// waits on Redis.
    fn drop(&mut self) {
        self.core.freeing().release_all_in_background();
    }
}
