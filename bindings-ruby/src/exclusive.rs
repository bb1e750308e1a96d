//! `Lockyard::Redis.claim` and `Lockyard::Etcd.claim` with their `Claim`s:
//! the one step of `each_exclusive` that decides anything, the core's
//! `claim`, which tries a name's lock once under the session. Both
//! backends' `claim` and `Claim` share their names, so [`claim_class!`]
//! declares both. `lib/lockyard/exclusive.rb` only walks the names and
//! ends each task's block.

use magnus::{function, method, prelude::*, Error, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::session::{EtcdSession, Session};
use crate::thread_watch;

/// The Ruby class `$ruby_name` of a task won by `lockyard::$backend::claim`
/// under the session class `$session`.
macro_rules! claim_class {
    ($class:ident, $backend:ident, $session:ty, $ruby_name:literal) => {
        /// A task `each_exclusive` won: its lock, held by this Fiber until `leave`.
        #[magnus::wrap(class = $ruby_name, size)]
        pub(crate) struct $class {
            core: NoGvl<lockyard::$backend::Claim>,
        }

        impl $class {
            /// Defines the class `Claim` and the module function `claim`,
            /// which the Ruby side makes private.
            fn define_in(ruby: &Ruby, module: RModule) -> Result<(), Error> {
                let class = module.define_class("Claim", ruby.class_object())?;
                class.undef_default_alloc_func();
                class.define_method("leave", method!($class::leave, 0))?;
                module.define_singleton_method("claim", function!($class::take, 3))?;
                Ok(())
            }

            /// Tries the lock `name` once under `session`: the claim if won,
            /// nil if another worker holds it.
            fn take(
                ruby: &Ruby,
                url: Value,
                name: Value,
                session: Value,
            ) -> Result<Option<$class>, Error> {
                let url = convert::string("url", url).or_raise(ruby)?;
                let name = convert::string("name", name).or_raise(ruby)?;
                let session = <$session>::given(session).or_raise(ruby)?;
                let claimed = session.core.blocking(ruby, |session, interrupted| {
                    lockyard::$backend::claim(&url, &name, session, interrupted)
                })?;
                thread_watch::granted(ruby, Ok(claimed.is_some()))?;
                Ok(claimed.map(|claim| $class {
                    core: NoGvl::new(claim),
                }))
            }

            /// Ends the task's block: releases the lock, unless it is a
            /// parent process's, inherited by a fork inside the block.
            fn leave(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
                rb_self.core.blocking(ruby, |claim, _| claim.leave())
            }
        }

        impl Drop for $class {
            /// Run by Ruby's garbage collector, with the GVL held (an
            /// enumerator abandoned inside a task's block): the lock is
            /// released in the background, so a collection never waits on
            /// the server.
            fn drop(&mut self) {
                self.core.freeing().release_in_background();
            }
        }
    };
}

claim_class!(Claim, redis, Session, "Lockyard::Redis::Claim");
claim_class!(EtcdClaim, etcd, EtcdSession, "Lockyard::Etcd::Claim");

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    Claim::define_in(ruby, redis)
}

pub(crate) fn define_etcd(ruby: &Ruby, etcd: RModule) -> Result<(), Error> {
    EtcdClaim::define_in(ruby, etcd)
}
