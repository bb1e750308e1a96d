//! `Lockyard::Redis::WaitGroup`, the native half. Keyword arguments (nil
//! for the core's default), `synchronize` and its `Slot` are in
//! `lib/lockyard/redis/wait_group.rb`.

use lockyard::wait::InTime;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, RObject, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;

#[magnus::wrap(class = "Lockyard::Redis::WaitGroup", size)]
pub(crate) struct WaitGroup {
    name: String,
    limit: u32,
    core: NoGvl<lockyard::redis::WaitGroup>,
}

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    let class = redis.define_class("WaitGroup", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(WaitGroup::build, 7))?;
    class.define_private_method("take", method!(WaitGroup::take, 2))?;
    class.define_method("done", method!(WaitGroup::done, 1))?;
    class.define_method("adopt", method!(WaitGroup::adopt, 1))?;
    class.define_private_method("leave", method!(WaitGroup::leave, 1))?;
    class.define_private_method("wait_idle", method!(WaitGroup::wait_idle, 1))?;
    class.define_method("count", method!(WaitGroup::count, 0))?;
    class.define_method("healthy?", method!(WaitGroup::healthy, 1))?;
    class.define_method("check_health!", method!(WaitGroup::check_health, 1))?;
    class.define_method("fencing_token", method!(WaitGroup::fencing_token, 1))?;
    class.define_method("name", method!(WaitGroup::name, 0))?;
    class.define_method("limit", method!(WaitGroup::limit, 0))?;
    Ok(())
}

impl WaitGroup {
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
    ) -> Result<Obj<WaitGroup>, Error> {
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
            Ok(WaitGroup {
                core: NoGvl::new(builder.build()?),
                name,
                limit,
            })
        };
        let group = build().or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(group, class))
    }

    /// Takes a slot, waiting up to `timeout` seconds (nil: forever), and
    /// returns its token. With a `slot` object, takes it for
    /// `synchronize`'s block and stores the token in the slot's `@token`
    /// before Ruby can raise an interrupt: the block's ensure then finds
    /// every slot it must free.
    fn take(ruby: &Ruby, rb_self: &Self, timeout: Value, slot: Value) -> Result<String, Error> {
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

    fn done(ruby: &Ruby, rb_self: &Self, token: Value) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self.core.blocking(ruby, |group, _| group.done(&token))
    }

    fn adopt(ruby: &Ruby, rb_self: &Self, token: Value) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self.core.blocking(ruby, |group, _| group.adopt(&token))
    }

    /// Ends `synchronize`'s block: frees the slot unless it is a parent
    /// process's, inherited by a fork inside the block.
    fn leave(ruby: &Ruby, rb_self: &Self, token: Value) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self.core.blocking(ruby, |group, _| group.leave(&token))
    }

    /// Waits up to `timeout` seconds (nil: forever) until no slot is held.
    fn wait_idle(ruby: &Ruby, rb_self: &Self, timeout: Value) -> Result<bool, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        rb_self
            .core
            .until(ruby, deadline, |group, deadline, interrupted| {
                group.wait_interruptibly(deadline, interrupted).in_time()
            })
    }

    fn count(ruby: &Ruby, rb_self: &Self) -> Result<u32, Error> {
        rb_self.core.blocking(ruby, |group, _| group.count())
    }

    fn healthy(ruby: &Ruby, rb_self: &Self, token: Value) -> Result<bool, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        Ok(rb_self
            .core
            .nonblocking(ruby, |group| group.healthy(&token)))
    }

    fn check_health(ruby: &Ruby, rb_self: &Self, token: Value) -> Result<(), Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        rb_self
            .core
            .nonblocking(ruby, |group| group.check_health(&token))
            .or_raise(ruby)
    }

    fn fencing_token(ruby: &Ruby, rb_self: &Self, token: Value) -> Result<Option<u64>, Error> {
        let token = convert::string("token", token).or_raise(ruby)?;
        Ok(rb_self
            .core
            .nonblocking(ruby, |group| group.fencing_token(&token)))
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn limit(&self) -> u32 {
        self.limit
    }
}

impl Drop for WaitGroup {
    /// Run by Ruby's garbage collector: frees the slots of open blocks in
    /// the background, so a collection never waits on Redis.
    fn drop(&mut self) {
        self.core.freeing().release_blocks_in_background();
    }
}
