//! `Lockyard::Etcd::Lock`, the native half: its `build` (the shared
//! methods are `per_thread.rs`) and `Lockyard::Etcd.holder`. Keyword
//! arguments, `lock` and `synchronize` are in `lib/lockyard/etcd.rb`.

use magnus::{function, method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::per_thread::per_thread_lock;
use crate::session::EtcdSession;

per_thread_lock!(Lock, lockyard::etcd::Lock, "Lockyard::Etcd::Lock");

pub(crate) fn define(ruby: &Ruby, etcd: RModule) -> Result<(), Error> {
    let class = etcd.define_class("Lock", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(Lock::build, 8))?;
    etcd.define_module_function("holder", function!(holder, 2))?;
    Lock::define_shared(class)
}

impl Lock {
    /// Called by `Lock.new`, which has already checked the keywords.
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
        identity_prefix: Value,
        connect_timeout: Value,
        session: Value,
        value: Value,
    ) -> Result<Obj<Lock>, Error> {
        let build = || {
            let name = convert::string("name", name)?;
            let mut builder = lockyard::etcd::Lock::builder(convert::string("url", url)?, &name)
                .timeout(convert::optional_seconds(ruby, "timeout", timeout)?);
            if let Some(ttl) = convert::optional_seconds(ruby, "ttl", ttl)? {
                builder = builder.ttl(ttl);
            }
            if let Some(wait) = convert::optional_seconds(ruby, "connect_timeout", connect_timeout)?
            {
                builder = builder.connect_timeout(wait);
            }
            if let Some(prefix) = convert::optional_string("identity_prefix", identity_prefix)? {
                builder = builder.identity_prefix(prefix);
            }
            if let Some(value) = convert::optional_string("value", value)? {
                builder = builder.value(value);
            }
            if !session.is_nil() {
                let session = EtcdSession::given(session)?;
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

/// `Lockyard::Etcd.holder(url, name)`: what the lock's current holder
/// stored (its value under a session, else its identity), or nil.
fn holder(ruby: &Ruby, url: Value, name: Value) -> Result<Option<String>, Error> {
    let url = convert::string("url", url).or_raise(ruby)?;
    let name = convert::string("name", name).or_raise(ruby)?;
    crate::nogvl::blocking(ruby, |_| lockyard::etcd::holder(&url, &name))
}
