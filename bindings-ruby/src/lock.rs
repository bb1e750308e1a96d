//! `Lockyard::Redis::Lock`, the native half: its `build` (the methods it
//! shares with the etcd lock are `per_thread.rs`). Keyword arguments (nil
//! for the core's default), `lock` and `synchronize` are in
//! `lib/lockyard/redis.rb`.

use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::per_thread::per_thread_lock;
use crate::session::Session;

per_thread_lock!(Lock, lockyard::redis::Lock, "Lockyard::Redis::Lock");

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    let class = redis.define_class("Lock", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(Lock::build, 10))?;
    Lock::define_shared(class)
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
}
