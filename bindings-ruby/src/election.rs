//! `Lockyard::Redis::Election` and its `Observer`, the native halves;
//! `campaign`'s keywords and `observe`'s block are in `lib/lockyard/redis.rb`.

use std::sync::Mutex;

use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::session::Session;

#[magnus::wrap(class = "Lockyard::Redis::Election", size)]
pub(crate) struct Election {
    name: String,
    core: NoGvl<lockyard::redis::Election>,
}

#[magnus::wrap(class = "Lockyard::Redis::Observer", size)]
pub(crate) struct Observer {
    core: NoGvl<Mutex<lockyard::redis::Observer>>,
}

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    let class = redis.define_class("Election", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(Election::build, 3))?;
    class.define_private_method("campaign_within", method!(Election::campaign_within, 2))?;
    class.define_method("resign", method!(Election::resign, 0))?;
    class.define_method("leader", method!(Election::leader, 0))?;
    class.define_method("leader?", method!(Election::is_leader, 0))?;
    class.define_method("check_health!", method!(Election::check_health, 0))?;
    class.define_method("fencing_token", method!(Election::fencing_token, 0))?;
    class.define_method("term", method!(Election::fencing_token, 0))?;
    class.define_method("name", method!(Election::name, 0))?;
    class.define_private_method("observer", method!(Election::observer, 0))?;
    let observer = redis.define_class("Observer", ruby.class_object())?;
    observer.undef_default_alloc_func();
    observer.define_method("next_change", method!(Observer::next_change, 1))?;
    Ok(())
}

impl Election {
    /// Called by `Election.new` with its keywords; wraps as `class`.
    fn build(
        ruby: &Ruby,
        class: RClass,
        url: Value,
        name: Value,
        session: Value,
    ) -> Result<Obj<Election>, Error> {
        let url = convert::string("url", url).or_raise(ruby)?;
        let name = convert::string("name", name).or_raise(ruby)?;
        let session = Session::given(session).or_raise(ruby)?;
        let election = session
            .core
            .nonblocking(ruby, |session| session.election(&url, &name))
            .or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(
            Election {
                name,
                core: NoGvl::new(election),
            },
            class,
        ))
    }

    /// Waits up to `timeout` seconds (nil: forever); true once leader,
    /// Lockyard::TimeoutError when the timeout runs out.
    fn campaign_within(
        ruby: &Ruby,
        rb_self: &Self,
        value: Value,
        timeout: Value,
    ) -> Result<bool, Error> {
        let value = convert::string("value", value).or_raise(ruby)?;
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        rb_self
            .core
            .until(ruby, deadline, |election, deadline, interrupted| {
                election
                    .campaign_interruptibly(&value, deadline, interrupted)
                    .map(|()| true)
            })
    }

    fn resign(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |election, _| election.resign())
    }

    fn leader(ruby: &Ruby, rb_self: &Self) -> Result<Option<String>, Error> {
        rb_self.core.blocking(ruby, |election, _| election.leader())
    }

    fn is_leader(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self
            .core
            .nonblocking(ruby, |election| election.is_leader())
    }

    fn check_health(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self
            .core
            .nonblocking(ruby, |election| election.check_health())
            .or_raise(ruby)
    }

    fn fencing_token(ruby: &Ruby, rb_self: &Self) -> Option<u64> {
        rb_self
            .core
            .nonblocking(ruby, |election| election.fencing_token())
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn observer(ruby: &Ruby, rb_self: &Self) -> Observer {
        Observer {
            core: NoGvl::new(Mutex::new(
                rb_self
                    .core
                    .nonblocking(ruby, |election| election.observe()),
            )),
        }
    }
}

impl Observer {
    /// The next change as `[value or nil, fencing_token]`, or nil when
    /// `timeout` seconds (nil: forever) pass without one.
    fn next_change(
        ruby: &Ruby,
        rb_self: &Self,
        timeout: Value,
    ) -> Result<Option<(Option<String>, u64)>, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        let term = rb_self
            .core
            .until(ruby, deadline, |observer, deadline, interrupted| {
                let mut observer = observer.lock().unwrap_or_else(|e| e.into_inner());
                observer.next_change(deadline, interrupted)
            })?;
        Ok(term.map(|term| (term.value, term.fencing_token)))
    }
}

impl Drop for Election {
    /// Run by Ruby's garbage collector: resigns in the background, so a
    /// collection never waits on Redis.
    fn drop(&mut self) {
        self.core.freeing().resign_in_background();
    }
}
