//! The native methods every per-thread lock class shares
//! (`Lockyard::Redis::Lock`, `Lockyard::Etcd::Lock`): [`per_thread_lock!`]
//! declares the wrapped class and them, so the classes differ only in
//! their `build` (the keywords they take).

/// Declares `$wrapper`, the Ruby class `$class` around the core lock
/// `$core`, with the shared methods (defined on the class by its
/// `define_shared`) and a drop that releases in the background.
macro_rules! per_thread_lock {
    ($wrapper:ident, $core:ty, $class:literal) => {
        #[magnus::wrap(class = $class, size)]
        pub(crate) struct $wrapper {
            name: String,
            core: $crate::nogvl::NoGvl<$core>,
        }

        impl $wrapper {
            fn define_shared(class: magnus::RClass) -> Result<(), magnus::Error> {
                use magnus::{method, Module};
                class.define_private_method("acquire", method!($wrapper::acquire, 1))?;
                class.define_method("try_lock", method!($wrapper::try_lock, 0))?;
                class.define_method("unlock", method!($wrapper::unlock, 0))?;
                class.define_private_method("leave", method!($wrapper::leave, 0))?;
                class.define_method("healthy?", method!($wrapper::healthy, 0))?;
                class.define_method("check_health!", method!($wrapper::check_health, 0))?;
                class.define_method("owned?", method!($wrapper::owned, 0))?;
                class.define_method("locked?", method!($wrapper::locked, 0))?;
                class.define_method("fencing_token", method!($wrapper::fencing_token, 0))?;
                class.define_method("name", method!($wrapper::name, 0))?;
                class.define_method("identity", method!($wrapper::identity, 0))?;
                class.define_method("default_timeout", method!($wrapper::default_timeout, 0))?;
                Ok(())
            }

            /// Waits up to `timeout` seconds (nil: forever); true once held,
            /// Lockyard::TimeoutError when the timeout runs out.
            fn acquire(
                ruby: &magnus::Ruby,
                rb_self: &Self,
                timeout: magnus::Value,
            ) -> Result<bool, magnus::Error> {
                use $crate::errors::OrRaise;
                let deadline = $crate::convert::deadline(ruby, timeout).or_raise(ruby)?;
                let acquired = rb_self
                    .core
                    .until(ruby, deadline, |lock, deadline, interrupted| {
                        lock.acquire_interruptibly(deadline, interrupted)
                            .map(|()| true)
                    });
                $crate::thread_watch::granted(ruby, acquired)
            }

            fn try_lock(ruby: &magnus::Ruby, rb_self: &Self) -> Result<bool, magnus::Error> {
                use lockyard::wait::InTime;
                let acquired = rb_self.core.blocking(ruby, |lock, interrupted| {
                    lock.acquire_interruptibly(std::time::Duration::ZERO, interrupted)
                        .in_time()
                });
                $crate::thread_watch::granted(ruby, acquired)
            }

            fn unlock(ruby: &magnus::Ruby, rb_self: &Self) -> Result<bool, magnus::Error> {
                rb_self.core.blocking(ruby, |lock, _| lock.release())
            }

            /// Ends a block that locked: unlocks unless the hold is a parent
            /// process's, inherited by a fork inside the block.
            fn leave(ruby: &magnus::Ruby, rb_self: &Self) -> Result<bool, magnus::Error> {
                rb_self.core.blocking(ruby, |lock, _| lock.leave())
            }

            fn healthy(ruby: &magnus::Ruby, rb_self: &Self) -> bool {
                rb_self.core.nonblocking(ruby, |lock| lock.healthy())
            }

            fn check_health(ruby: &magnus::Ruby, rb_self: &Self) -> Result<(), magnus::Error> {
                use $crate::errors::OrRaise;
                rb_self
                    .core
                    .nonblocking(ruby, |lock| lock.check_health())
                    .or_raise(ruby)
            }

            fn owned(ruby: &magnus::Ruby, rb_self: &Self) -> Result<bool, magnus::Error> {
                rb_self.core.blocking(ruby, |lock, _| lock.owned())
            }

            fn locked(ruby: &magnus::Ruby, rb_self: &Self) -> Result<bool, magnus::Error> {
                rb_self.core.blocking(ruby, |lock, _| lock.locked())
            }

            fn fencing_token(ruby: &magnus::Ruby, rb_self: &Self) -> Option<u64> {
                rb_self.core.nonblocking(ruby, |lock| lock.fencing_token())
            }

            fn name(&self) -> String {
                self.name.clone()
            }

            fn identity(ruby: &magnus::Ruby, rb_self: &Self) -> String {
                rb_self.core.nonblocking(ruby, |lock| lock.identity())
            }

            fn default_timeout(ruby: &magnus::Ruby, rb_self: &Self) -> Option<f64> {
                rb_self
                    .core
                    .nonblocking(ruby, |lock| lock.default_timeout())
                    .map(|timeout| timeout.as_secs_f64())
            }
        }

        impl Drop for $wrapper {
            /// Run by Ruby's garbage collector, with the GVL held: what the
            /// lock still holds is released in the background, so a
            /// collection never waits on the server.
            fn drop(&mut self) {
                self.core.freeing().release_all_in_background();
            }
        }
    };
}

pub(crate) use per_thread_lock;
