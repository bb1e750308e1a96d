//! `Lockyard::Redis::Claim`: the one step of `each_exclusive` that decides
//! anything, the core's `claim`, which tries a name's lock once under the
//! session. `lib/lockyard/redis.rb` only walks the names and ends each
//! task's block.

use magnus::{function, method, prelude::*, Error, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::session::Session;
use crate::thread_watch;

/// A task `each_exclusive` won: its lock, held by this Fiber until `leave`.
#[magnus::wrap(class = "Lockyard::Redis::Claim", size)]
pub(crate) struct Claim {
    core: NoGvl<lockyard::redis::Claim>,
}

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    let class = redis.define_class("Claim", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("take", function!(Claim::take, 3))?;
    class.define_method("leave", method!(Claim::leave, 0))?;
    Ok(())
}

impl Claim {
    /// Tries the lock `name` once under `session`: the claim if won, nil
    /// if another worker holds it.
    fn take(ruby: &Ruby, url: Value, name: Value, session: Value) -> Result<Option<Claim>, Error> {
        let url = convert::string("url", url).or_raise(ruby)?;
        let name = convert::string("name", name).or_raise(ruby)?;
        let session = Session::given(session).or_raise(ruby)?;
        let claimed = session.core.blocking(ruby, |session, interrupted| {
            lockyard::redis::claim(&url, &name, session, interrupted)
        })?;
        thread_watch::granted(ruby, Ok(claimed.is_some()))?;
        Ok(claimed.map(|claim| Claim {
            core: NoGvl::new(claim),
        }))
    }

    /// Ends the task's block: releases the lock, unless it is a parent
    /// process's, inherited by a fork inside the block.
    fn leave(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |claim, _| claim.leave())
    }
}

impl Drop for Claim {
    /// Run by Ruby's garbage collector, with the GVL held (an enumerator
    /// abandoned inside a task's block): the lock is released in the
    /// background, so a collection never waits on Redis.
    fn drop(&mut self) {
        self.core.freeing().release_in_background();
    }
}
