//! The wait groups' native half, `Lockyard::Redis::WaitGroup` and
//! `Lockyard::Etcd::WaitGroup`: one [`Group`] over either core group, each
//! class a wrapper that differs only in its `build`. Keyword arguments
//! (nil for the core's default), `synchronize` and its `Slot` are in
//! `lib/lockyard/redis/wait_group.rb`.

use std::ops::Deref;

use lockyard::group::SlotGroup;
use lockyard::wait::InTime;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, RObject, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;

/// A core wait group of either backend.
pub(crate) struct Group {
    name: String,
    limit: u32,
    core: NoGvl<Box<dyn SlotGroup>>,
}

#[magnus::wrap(class = "Lockyard::Redis::WaitGroup", size)]
pub(crate) struct RedisWaitGroup(Group);

#[magnus::wrap(class = "Lockyard::Etcd::WaitGroup", size)]
pub(crate) struct EtcdWaitGroup(Group);

impl Deref for RedisWaitGroup {
    type Target = Group;
    fn deref(&self) -> &Group {
        &self.0
    }
}

impl Deref for EtcdWaitGroup {
    type Target = Group;
    fn deref(&self) -> &Group {
        &self.0
    }
}

/// Defines the class `WaitGroup` of type `$type` under `$module`, with
/// the methods both groups share (magnus needs each type spelled out).
macro_rules! define_class {
    ($ruby:expr, $module:expr, $type:ty) => {{
        let class = $module.define_class("WaitGroup", $ruby.class_object())?;
        class.undef_default_alloc_func();
        class.define_private_method("take", method!(Group::take::<$type>, 2))?;
        class.define_method("done", method!(Group::done::<$type>, 1))?;
        class.define_method("adopt", method!(Group::adopt::<$type>, 1))?;
        class.define_private_method("leave", method!(Group::leave::<$type>, 1))?;
        class.define_private_method("wait_idle", method!(Group::wait_idle::<$type>, 1))?;
        class.define_method("count", method!(Group::count::<$type>, 0))?;
        class.define_method("healthy?", method!(Group::healthy::<$type>, 1))?;
        class.define_method("check_health!", method!(Group::check_health::<$type>, 1))?;
        class.define_method("fencing_token", method!(Group::fencing_token::<$type>, 1))?;
        class.define_method("name", method!(Group::name::<$type>, 0))?;
        class.define_method("limit", method!(Group::limit::<$type>, 0))?;
        class
    }};
}

pub(crate) fn define(ruby: &Ruby, redis: RModule, etcd: RModule) -> Result<(), Error> {
    let class = define_class!(ruby, redis, RedisWaitGroup);
    class.define_singleton_method("build", method!(RedisWaitGroup::build, 7))?;
    let class = define_class!(ruby, etcd, EtcdWaitGroup);
    class.define_singleton_method("build", method!(EtcdWaitGroup::build, 5))?;
    Ok(())
}

impl RedisWaitGroup {
    /// Called by `WaitGroup.new`, which has already checked the keywords;
    /// wraps the group as an instance of `class`, so subclasses construct
    /// themselves.
    #[allow(
        clippy::too_many_arguments,
        reason = "one positional argument per keyword of WaitGroup.new"
    )]
    fn build(
        ruby: &Ruby,
        class: RClass,
        url: Value,
        name: Value,
        limit: Value,
        ttl: Value,
        refresh_interval: Value,
        max_refresh_fails: Value,
        connect_timeout: Value,
    ) -> Result<Obj<RedisWaitGroup>, Error> {
        let build = || {
            let name = convert::string("name", name)?;
            let limit = convert::count("limit", limit)?;
            let builder = convert::lease_options(
                ruby,
                lockyard::redis::WaitGroup::builder(convert::string("url", url)?, &name, limit),
                ttl,
                refresh_interval,
                max_refresh_fails,
                connect_timeout,
            )?;
            Ok(Group::new(name, limit, builder.build()?))
        };
        let group = build().or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(RedisWaitGroup(group), class))
    }
}

impl EtcdWaitGroup {
    /// Called by `WaitGroup.new`, as for the Redis group.
    fn build(
        ruby: &Ruby,
        class: RClass,
        url: Value,
        name: Value,
        limit: Value,
        ttl: Value,
        connect_timeout: Value,
    ) -> Result<Obj<EtcdWaitGroup>, Error> {
        let build = || {
            let name = convert::string("name", name)?;
            let limit = convert::count("limit", limit)?;
            let mut builder =
                lockyard::etcd::WaitGroup::builder(convert::string("url", url)?, &name, limit);
            if let Some(ttl) = convert::optional_seconds(ruby, "ttl", ttl)? {
                builder = builder.ttl(ttl);
            }
            if let Some(wait) = convert::optional_seconds(ruby, "connect_timeout", connect_timeout)?
            {
                builder = builder.connect_timeout(wait);
            }
            Ok(Group::new(name, limit, builder.build()?))
        };
        let group = build().or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(EtcdWaitGroup(group), class))
    }
}

impl Group {
    fn new(name: String, limit: u32, core: impl SlotGroup + 'static) -> Group {
        Group {
            name,
            limit,
            core: NoGvl::new(Box::new(core)),
        }
    }

    /// Takes a slot, waiting up to `timeout` seconds (nil: forever), and
    /// returns its token. With a `slot` object, takes it for
    /// `synchronize`'s block and stores the token in the slot's `@token`
    /// before Ruby can raise an interrupt: the block's ensure then finds
    /// every slot it must free.
    fn take<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        timeout: Value,
        slot: Value,
    ) -> Result<String, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        let Some(slot) = RObject::from_value(slot) else {
            return rb_self
                .core
                .until(ruby, deadline, |group, deadline, interrupted| {
                    group.add(deadline, interrupted)
                });
        };
        let token = rb_self
            .core
            .until(ruby, deadline, |group, deadline, interrupted| {
                group.enter(deadline, interrupted)
            })?;
        slot.ivar_set("@token", token.as_str())?;
        Ok(token)
    }

    fn done<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        token: Value,
    ) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self.core.blocking(ruby, |group, _| group.done(&token))
    }

    fn adopt<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        token: Value,
    ) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self.core.blocking(ruby, |group, _| group.adopt(&token))
    }

    /// Ends `synchronize`'s block: frees the slot unless it is a parent
    /// process's, inherited by a fork inside the block.
    fn leave<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        token: Value,
    ) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self.core.blocking(ruby, |group, _| group.leave(&token))
    }

    /// Waits up to `timeout` seconds (nil: forever) until no slot is held.
    fn wait_idle<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        timeout: Value,
    ) -> Result<bool, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        rb_self
            .core
            .until(ruby, deadline, |group, deadline, interrupted| {
                group.wait_interruptibly(deadline, interrupted).in_time()
            })
    }

    fn count<T: Deref<Target = Group>>(ruby: &Ruby, rb_self: &T) -> Result<u32, Error> {
        rb_self.core.blocking(ruby, |group, _| group.count())
    }

    fn healthy<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        token: Value,
    ) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        Ok(rb_self
            .core
            .nonblocking(ruby, |group| group.healthy(&token)))
    }

    fn check_health<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        token: Value,
    ) -> Result<(), Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self
            .core
            .nonblocking(ruby, |group| group.check_health(&token))
            .or_raise(ruby)
    }

    fn fencing_token<T: Deref<Target = Group>>(
        ruby: &Ruby,
        rb_self: &T,
        token: Value,
    ) -> Result<Option<u64>, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        Ok(rb_self
            .core
            .nonblocking(ruby, |group| group.fencing_token(&token)))
    }

    fn name<T: Deref<Target = Group>>(rb_self: &T) -> String {
        rb_self.name.clone()
    }

    fn limit<T: Deref<Target = Group>>(rb_self: &T) -> u32 {
        rb_self.limit
    }
}

impl Drop for Group {
    /// Run by Ruby's garbage collector: frees the slots of open blocks in
    /// the background, so a collection never waits on Redis.
    fn drop(&mut self) {
        self.core.freeing().release_blocks_in_background();
    }
}
