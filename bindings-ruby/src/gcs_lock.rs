//! `Lockyard::GCS::Lock`, the native half. Its `logger:` option reaches
//! Ruby through `logs.rs`.

use std::time::Duration;

use lockyard::wait::InTime;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RHash, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::logs;
use crate::nogvl::NoGvl;
use crate::thread_watch;

#[magnus::wrap(class = "Lockyard::GCS::Lock", size)]
pub(crate) struct Lock(NoGvl<lockyard::gcs::Lock>);

pub(crate) fn define(ruby: &Ruby, gcs: RModule) -> Result<(), Error> {
    let class = gcs.define_class("Lock", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(Lock::build, 3))?;
    class.define_private_method("acquire", method!(Lock::acquire, 1))?;
    class.define_method("healthy?", method!(Lock::healthy, 0))?;
    class.define_private_method(
        "refresh_error_message",
        method!(Lock::last_refresh_error, 0),
    )?;
    class.define_method("try_lock", method!(Lock::try_lock, 0))?;
    class.define_method("unlock", method!(Lock::unlock, 0))?;
    class.define_method("abandon", method!(Lock::abandon, 0))?;
    class.define_method("check_health!", method!(Lock::check_health, 0))?;
    class.define_method("owned_according_to_server?", method!(Lock::owned, 0))?;
    class.define_method("locked_according_to_server?", method!(Lock::locked, 0))?;
    class.define_method(
        "owned_according_to_internal_state?",
        method!(Lock::owned_here, 0),
    )?;
    class.define_method(
        "locked_according_to_internal_state?",
        method!(Lock::locked_here, 0),
    )?;
    class.define_method("fencing_token", method!(Lock::fencing_token, 0))?;
    class.define_method("identity", method!(Lock::identity, 0))?;
    class.define_method("default_timeout", method!(Lock::default_timeout, 0))?;
    class.define_method("ttl", method!(Lock::ttl, 0))?;
    Ok(())
}

impl Lock {
    /// Called by `Lock.new` with its keywords already checked and
    /// translated into `options` (Symbol → value, nil for defaults).
    fn build(
        ruby: &Ruby,
        class: RClass,
        bucket_name: Value,
        path: Value,
        options: RHash,
    ) -> Result<Obj<Lock>, Error> {
        let get = |key: &str| -> Value {
            options
                .get(ruby.to_symbol(key))
                .unwrap_or_else(|| ruby.qnil().as_value())
        };
        let given = |key: &str| Some(get(key)).filter(|v| !v.is_nil());
        let build = || -> lockyard::Result<Lock> {
            let mut builder = lockyard::gcs::Lock::builder(
                convert::string("bucket_name", bucket_name)?,
                convert::string("path", path)?,
            )
            .timeout(convert::optional_seconds(ruby, "timeout", get("timeout"))?);
            if let Some(v) = given("thread_safe") {
                builder = builder.thread_safe(v.to_bool());
            }
            if let Some(v) = given("hold_per_instance") {
                builder = builder.hold_per_instance(v.to_bool());
            }
            if let Some(prefix) = convert::optional_string(
                "instance_identity_prefix",
                get("instance_identity_prefix"),
            )? {
                builder = builder.instance_identity_prefix(prefix);
            }
            if let Some(v) = given("ttl") {
                builder = builder.ttl(convert::seconds(ruby, "ttl", v)?);
            }
            if let Some(v) =
                convert::optional_seconds(ruby, "refresh_interval", get("refresh_interval"))?
            {
                builder = builder.refresh_interval(v);
            }
            if let Some(v) = given("max_refresh_fails") {
                builder = builder.max_refresh_fails(convert::count("max_refresh_fails", v)?);
            }
            if let Some(v) = given("backoff_min") {
                builder = builder.backoff_min(convert::seconds(ruby, "backoff_min", v)?);
            }
            if let Some(v) = given("backoff_max") {
                builder = builder.backoff_max(convert::seconds(ruby, "backoff_max", v)?);
            }
            if let Some(v) = given("backoff_multiplier") {
                builder =
                    builder.backoff_multiplier(convert::number(ruby, "backoff_multiplier", v)?);
            }
            for (key, set) in [
                (
                    "object_acl",
                    lockyard::gcs::LockBuilder::object_acl as fn(_, String) -> _,
                ),
                (
                    "credentials_json",
                    lockyard::gcs::LockBuilder::credentials_json,
                ),
                ("emulator_host", lockyard::gcs::LockBuilder::emulator_host),
                ("endpoint", lockyard::gcs::LockBuilder::endpoint),
                ("user_project", lockyard::gcs::LockBuilder::user_project),
            ] {
                if let Some(value) = convert::optional_string(key, get(key))? {
                    builder = set(builder, value);
                }
            }
            if let Some(file) = convert::optional_string("credentials", get("credentials_file"))? {
                builder = builder.credentials_file(file);
            }
            if let Some(v) = given("request_timeout") {
                builder = builder.request_timeout(convert::seconds(ruby, "timeout", v)?);
            }
            if let Some(logger) = given("logger_number") {
                builder = builder.log_sink(logs::sink(convert::count("logger", logger)?.into()));
            }
            Ok(Lock(NoGvl::new(builder.build()?)))
        };
        let lock = build().or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(lock, class))
    }

    fn acquire(ruby: &Ruby, rb_self: &Self, timeout: Value) -> Result<bool, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        let acquired = rb_self
            .0
            .until(ruby, deadline, |lock, deadline, interrupted| {
                lock.acquire_interruptibly(deadline, interrupted)
                    .map(|()| true)
            });
        thread_watch::granted(ruby, acquired)
    }

    fn try_lock(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        let acquired = rb_self.0.blocking(ruby, |lock, interrupted| {
            lock.acquire_interruptibly(Duration::ZERO, interrupted)
                .in_time()
        });
        thread_watch::granted(ruby, acquired)
    }

    fn unlock(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.0.blocking(ruby, |lock, interrupted| {
            lock.release_interruptibly(interrupted)
        })
    }

    fn abandon(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.0.blocking(ruby, |lock, _| Ok(lock.abandon()))
    }

    fn healthy(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self
            .0
            .nonblocking(ruby, |lock| lock.held_and_healthy())
            .or_raise(ruby)
    }

    fn check_health(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self
            .0
            .nonblocking(ruby, |lock| lock.check_health())
            .or_raise(ruby)
    }

    fn last_refresh_error(ruby: &Ruby, rb_self: &Self) -> Option<String> {
        rb_self
            .0
            .nonblocking(ruby, |lock| lock.last_refresh_error())
    }

    fn owned(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.0.blocking(ruby, |lock, _| lock.owned())
    }

    fn locked(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.0.blocking(ruby, |lock, _| lock.locked())
    }

    fn owned_here(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self
            .0
            .nonblocking(ruby, |lock| lock.owned_according_to_internal_state())
    }

    fn locked_here(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self
            .0
            .nonblocking(ruby, |lock| lock.locked_according_to_internal_state())
    }

    fn fencing_token(ruby: &Ruby, rb_self: &Self) -> Option<u64> {
        rb_self.0.nonblocking(ruby, |lock| lock.fencing_token())
    }

    fn identity(ruby: &Ruby, rb_self: &Self) -> String {
        rb_self.0.nonblocking(ruby, |lock| lock.identity())
    }

    fn default_timeout(ruby: &Ruby, rb_self: &Self) -> Option<f64> {
        rb_self
            .0
            .nonblocking(ruby, |lock| lock.default_timeout())
            .map(|t| t.as_secs_f64())
    }

    fn ttl(ruby: &Ruby, rb_self: &Self) -> f64 {
        rb_self.0.nonblocking(ruby, |lock| lock.ttl()).as_secs_f64()
    }
}

impl Drop for Lock {
    /// Run by Ruby's garbage collector: releases in the background, so a
    /// collection never waits on the bucket.
    fn drop(&mut self) {
        self.0.freeing().release_all_in_background();
    }
}
