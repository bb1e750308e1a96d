//! `Lockyard::Redis::Session` and `Lockyard::Etcd::Session`, the native
//! half. Keyword arguments and `Session.open` are in `lib/lockyard/redis.rb`
//! and `lib/lockyard/etcd.rb`.

use magnus::{function, method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::{self, NoGvl};

/// A Ruby session class over a core session; the core's sessions share
/// the names of every option and method.
macro_rules! session_class {
    ($class:ident, $core:ty, $ruby_name:literal) => {
        #[magnus::wrap(class = $ruby_name, size)]
        pub(crate) struct $class {
            pub(crate) core: NoGvl<$core>,
        }

        impl $class {
            fn define_in(ruby: &Ruby, module: RModule) -> Result<(), Error> {
                let class = module.define_class("Session", ruby.class_object())?;
                class.undef_default_alloc_func();
                class.define_singleton_method("build", method!($class::build, 5))?;
                class.define_method("destroy", method!($class::destroy, 0))?;
                class.define_method("healthy?", method!($class::healthy, 0))?;
                class.define_method("check_health!", method!($class::check_health, 0))?;
                class.define_method("id", method!($class::id, 0))?;
                class.define_method("ttl", method!($class::ttl, 0))?;
                class.define_method("lock_delay", method!($class::lock_delay, 0))?;
                class.define_method("behavior", method!($class::behavior, 0))?;
                Ok(())
            }

            /// The `session:` keyword of a lock, an election or `each_exclusive`.
            pub(crate) fn given(value: Value) -> lockyard::Result<&'static $class> {
                <&$class>::try_convert(value).map_err(|_| {
                    lockyard::Error::Config(concat!("session must be a ", $ruby_name).into())
                })
            }

            /// Called by `Session.new` with its keywords; wraps as `class`.
            fn build(
                ruby: &Ruby,
                class: RClass,
                url: Value,
                ttl: Value,
                behavior: Value,
                lock_delay: Value,
                connect_timeout: Value,
            ) -> Result<Obj<$class>, Error> {
                let builder = || {
                    let mut builder = <$core>::builder(convert::string("url", url)?);
                    if let Some(ttl) = convert::optional_seconds(ruby, "ttl", ttl)? {
                        builder = builder.ttl(ttl);
                    }
                    if let Some(behavior) = convert::optional_string("behavior", behavior)? {
                        builder = builder.behavior(behavior.parse()?);
                    }
                    if let Some(delay) = convert::optional_seconds(ruby, "lock_delay", lock_delay)?
                    {
                        builder = builder.lock_delay(delay);
                    }
                    if let Some(timeout) =
                        convert::optional_seconds(ruby, "connect_timeout", connect_timeout)?
                    {
                        builder = builder.connect_timeout(timeout);
                    }
                    Ok(builder)
                };
                let builder = builder().or_raise(ruby)?;
                let session = nogvl::blocking(ruby, |_| builder.clone().build())?;
                Ok(ruby.obj_wrap_as(
                    $class {
                        core: NoGvl::new(session),
                    },
                    class,
                ))
            }

            fn destroy(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
                rb_self.core.blocking(ruby, |session, _| session.destroy())
            }

            fn healthy(ruby: &Ruby, rb_self: &Self) -> bool {
                rb_self.core.nonblocking(ruby, |session| session.healthy())
            }

            fn check_health(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
                rb_self
                    .core
                    .nonblocking(ruby, |session| session.check_health())
                    .or_raise(ruby)
            }

            fn id(ruby: &Ruby, rb_self: &Self) -> String {
                rb_self
                    .core
                    .nonblocking(ruby, |session| session.id().to_owned())
            }

            fn ttl(ruby: &Ruby, rb_self: &Self) -> f64 {
                rb_self
                    .core
                    .nonblocking(ruby, |session| session.ttl().as_secs_f64())
            }

            fn lock_delay(ruby: &Ruby, rb_self: &Self) -> f64 {
                rb_self
                    .core
                    .nonblocking(ruby, |session| session.lock_delay().as_secs_f64())
            }

            fn behavior(ruby: &Ruby, rb_self: &Self) -> &'static str {
                rb_self
                    .core
                    .nonblocking(ruby, |session| session.behavior().as_str())
            }
        }

        impl Drop for $class {
            /// Run by Ruby's garbage collector: destroys the session in the
            /// background, so a collection never waits on the server.
            fn drop(&mut self) {
                self.core.freeing().destroy_in_background();
            }
        }
    };
}

session_class!(
    Session,
    lockyard::redis::Session,
    "Lockyard::Redis::Session"
);
session_class!(
    EtcdSession,
    lockyard::etcd::Session,
    "Lockyard::Etcd::Session"
);

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    Session::define_in(ruby, redis)?;
    redis.define_singleton_method("holder_value", function!(holder_value, 2))?;
    Ok(())
}

pub(crate) fn define_etcd(ruby: &Ruby, etcd: RModule) -> Result<(), Error> {
    EtcdSession::define_in(ruby, etcd)
}

/// The value of the current holder of the lock `name`, or nil.
fn holder_value(ruby: &Ruby, url: Value, name: Value) -> Result<Option<String>, Error> {
    let (url, name) = (
        convert::string("url", url).or_raise(ruby)?,
        convert::string("name", name).or_raise(ruby)?,
    );
    nogvl::blocking(ruby, |_| lockyard::redis::holder(&url, &name))
}
