//! `Lockyard::Redis::Election` and `Lockyard::Etcd::Election` with their
//! `Observer`s, the native halves: the core's elections share every method
//! name, so [`election_class!`] declares both. `campaign`'s keywords and
//! `observe`'s block are in `lib/lockyard/election.rb`.

use std::sync::Mutex;

use lockyard::wait::lock_within;

use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::session::{EtcdSession, Session};

/// A Ruby election class and its observer class over the core's
/// `lockyard::$backend::{Election, Observer}`, campaigning under the
/// session class `$session`.
macro_rules! election_class {
    ($election:ident, $observer:ident, $backend:ident, $session:ty,
     $election_name:literal, $observer_name:literal) => {
        #[magnus::wrap(class = $election_name, size)]
        pub(crate) struct $election {
            name: String,
            core: NoGvl<lockyard::$backend::Election>,
        }

        #[magnus::wrap(class = $observer_name, size)]
        pub(crate) struct $observer {
            core: NoGvl<Mutex<lockyard::$backend::Observer>>,
        }

        impl $election {
            fn define_in(ruby: &Ruby, module: RModule) -> Result<(), Error> {
                let class = module.define_class("Election", ruby.class_object())?;
                class.undef_default_alloc_func();
                class.define_singleton_method("build", method!($election::build, 3))?;
                class.define_private_method(
                    "campaign_within",
                    method!($election::campaign_within, 2),
                )?;
                class.define_method("resign", method!($election::resign, 0))?;
                class.define_method("leader", method!($election::leader, 0))?;
                class.define_method("leader?", method!($election::is_leader, 0))?;
                class.define_method("check_health!", method!($election::check_health, 0))?;
                class.define_method("fencing_token", method!($election::fencing_token, 0))?;
                class.define_method("term", method!($election::fencing_token, 0))?;
                class.define_method("name", method!($election::name, 0))?;
                class.define_private_method("observer", method!($election::observer, 0))?;
                let observer = module.define_class("Observer", ruby.class_object())?;
                observer.undef_default_alloc_func();
                observer.define_method("next_change", method!($observer::next_change, 1))?;
                Ok(())
            }

            /// Called by `Election.new` with its keywords; wraps as `class`.
            fn build(
                ruby: &Ruby,
                class: RClass,
                url: Value,
                name: Value,
                session: Value,
            ) -> Result<Obj<$election>, Error> {
                let url = convert::string("url", url).or_raise(ruby)?;
                let name = convert::string("name", name).or_raise(ruby)?;
                let session = <$session>::given(session).or_raise(ruby)?;
                let election = session
                    .core
                    .nonblocking(ruby, |session| session.election(&url, &name))
                    .or_raise(ruby)?;
                Ok(ruby.obj_wrap_as(
                    $election {
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

            fn observer(ruby: &Ruby, rb_self: &Self) -> $observer {
                $observer {
                    core: NoGvl::new(Mutex::new(
                        rb_self
                            .core
                            .nonblocking(ruby, |election| election.observe()),
                    )),
                }
            }
        }

        impl $observer {
            /// The next change as `[value or nil, fencing_token]`, or nil when
            /// `timeout` seconds (nil: forever) pass without one.
            fn next_change(
                ruby: &Ruby,
                rb_self: &Self,
                timeout: Value,
            ) -> Result<Option<(Option<String>, u64)>, Error> {
                let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
                let changes = &rb_self.core;
                let term = changes.until(ruby, deadline, |observer, deadline, interrupted| {
                    // Another thread may be reading this observer: wait for
                    // it within the same deadline, interruptibly.
                    let what = "an election's observer";
                    match lock_within(observer, deadline, interrupted, what)? {
                        Some(mut observer) => observer.next_change(deadline, interrupted),
                        None => Ok(None),
                    }
                })?;
                Ok(term.map(|term| (term.value, term.fencing_token)))
            }
        }

        impl Drop for $election {
            /// Run by Ruby's garbage collector: resigns in the background, so
            /// a collection never waits on the server.
            fn drop(&mut self) {
                self.core.freeing().resign_in_background();
            }
        }
    };
}

election_class!(
    Election,
    Observer,
    redis,
    Session,
    "Lockyard::Redis::Election",
    "Lockyard::Redis::Observer"
);
election_class!(
    EtcdElection,
    EtcdObserver,
    etcd,
    EtcdSession,
    "Lockyard::Etcd::Election",
    "Lockyard::Etcd::Observer"
);

pub(crate) fn define(ruby: &Ruby, redis: RModule) -> Result<(), Error> {
    Election::define_in(ruby, redis)
}

pub(crate) fn define_etcd(ruby: &Ruby, etcd: RModule) -> Result<(), Error> {
    EtcdElection::define_in(ruby, etcd)
}
