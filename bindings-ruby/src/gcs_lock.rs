//! `Lockyard::GCS::Lock`, the native half, and `Lockyard::GCS::LogQueue`,
//! through which the lock's log records reach the `logger` option: the
//! core logs from its runtime thread, which must never call into Ruby, so
//! records wait in a queue that a Ruby thread (lib/lockyard/gcs.rb) drains.

use lockyard::Interrupt;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use lockyard::wait::InTime;
use magnus::{method, prelude::*, typed_data::Obj, Error, RClass, RHash, RModule, Ruby, Value};

use crate::convert;
use crate::errors::OrRaise;
use crate::nogvl::NoGvl;
use crate::thread_watch;

/// Past this many unforwarded records, new ones are dropped.
const LOG_CAPACITY: usize = 1024;

#[derive(Default)]
struct Records {
    queue: Mutex<VecDeque<(log::Level, String)>>,
    arrived: Condvar,
}

impl Records {
    fn push(&self, level: log::Level, message: &str) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.len() < LOG_CAPACITY {
            queue.push_back((level, message.to_owned()));
            self.arrived.notify_one();
        }
    }

    /// Waits up to `timeout` for records; Interrupted when Ruby asks.
    fn take(
        &self,
        timeout: Duration,
        interrupted: Interrupt<'_>,
    ) -> lockyard::Result<Vec<(u8, String)>> {
        let until = Instant::now() + timeout;
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        while queue.is_empty() {
            if interrupted() {
                return Err(lockyard::Error::Interrupted("log records".into()));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            queue = self
                .arrived
                .wait_timeout(queue, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(queue
            .drain(..)
            .map(|(level, message)| (ruby_level(level), message))
            .collect())
    }
}

/// Ruby's `Logger::Severity` number for a level.
fn ruby_level(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 2,
        log::Level::Info => 1,
        log::Level::Debug | log::Level::Trace => 0,
    }
}

#[magnus::wrap(class = "Lockyard::GCS::LogQueue", size)]
pub(crate) struct LogQueue(NoGvl<Arc<Records>>);

impl LogQueue {
    /// `[[severity, message], ...]`, waiting up to `timeout` seconds for some.
    fn take(ruby: &Ruby, rb_self: &Self, timeout: f64) -> Result<Vec<(u8, String)>, Error> {
        let timeout = Duration::try_from_secs_f64(timeout.clamp(0.0, 3600.0)).unwrap_or_default();
        rb_self.0.blocking(ruby, |records, interrupted| {
            records.take(timeout, interrupted)
        })
    }
}

#[magnus::wrap(class = "Lockyard::GCS::Lock", size)]
pub(crate) struct Lock {
    core: NoGvl<lockyard::gcs::Lock>,
    log: Option<Arc<Records>>,
}

pub(crate) fn define(ruby: &Ruby, gcs: RModule) -> Result<(), Error> {
    let queue = gcs.define_class("LogQueue", ruby.class_object())?;
    queue.undef_default_alloc_func();
    queue.define_method("take", method!(LogQueue::take, 1))?;
    let class = gcs.define_class("Lock", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("build", method!(Lock::build, 3))?;
    class.define_private_method("acquire", method!(Lock::acquire, 1))?;
    class.define_private_method("log_queue", method!(Lock::log_queue, 0))?;
    class.define_private_method("native_healthy?", method!(Lock::healthy, 0))?;
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
        let wants_log = given("log").is_some_and(|v| v.to_bool());
        let log = wants_log.then(|| Arc::new(Records::default()));
        let build = || -> lockyard::Result<Lock> {
            let mut builder = lockyard::gcs::Lock::builder(
                convert::string("bucket_name", bucket_name)?,
                convert::string("path", path)?,
            )
            .timeout(convert::optional_seconds(ruby, "timeout", get("timeout"))?);
            if let Some(v) = given("thread_safe") {
                builder = builder.thread_safe(v.to_bool());
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
            if let Some(records) = &log {
                let records = records.clone();
                builder = builder.log_sink(Arc::new(move |level, message: &str| {
                    records.push(level, message)
                }));
            }
            Ok(Lock {
                core: NoGvl::new(builder.build()?),
                log: log.clone(),
            })
        };
        let lock = build().or_raise(ruby)?;
        Ok(ruby.obj_wrap_as(lock, class))
    }

    fn log_queue(&self) -> Option<LogQueue> {
        self.log
            .clone()
            .map(|records| LogQueue(NoGvl::new(records)))
    }

    fn acquire(ruby: &Ruby, rb_self: &Self, timeout: Value) -> Result<bool, Error> {
        let deadline = convert::deadline(ruby, timeout).or_raise(ruby)?;
        let acquired = rb_self
            .core
            .until(ruby, deadline, |lock, deadline, interrupted| {
                lock.acquire_interruptibly(deadline, interrupted)
                    .map(|()| true)
            });
        thread_watch::granted(ruby, acquired)
    }

    fn try_lock(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        let acquired = rb_self.core.blocking(ruby, |lock, interrupted| {
            lock.acquire_interruptibly(Duration::ZERO, interrupted)
                .in_time()
        });
        thread_watch::granted(ruby, acquired)
    }

    fn unlock(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, interrupted| {
            lock.release_interruptibly(interrupted)
        })
    }

    fn abandon(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| Ok(lock.abandon()))
    }

    fn healthy(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self.core.nonblocking(ruby, |lock| lock.healthy())
    }

    fn check_health(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.check_health())
            .or_raise(ruby)
    }

    fn last_refresh_error(ruby: &Ruby, rb_self: &Self) -> Option<String> {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.last_refresh_error())
    }

    fn owned(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.owned())
    }

    fn locked(ruby: &Ruby, rb_self: &Self) -> Result<bool, Error> {
        rb_self.core.blocking(ruby, |lock, _| lock.locked())
    }

    fn owned_here(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.owned_according_to_internal_state())
    }

    fn locked_here(ruby: &Ruby, rb_self: &Self) -> bool {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.locked_according_to_internal_state())
    }

    fn fencing_token(ruby: &Ruby, rb_self: &Self) -> Option<u64> {
        rb_self.core.nonblocking(ruby, |lock| lock.fencing_token())
    }

    fn identity(ruby: &Ruby, rb_self: &Self) -> String {
        rb_self.core.nonblocking(ruby, |lock| lock.identity())
    }

    fn default_timeout(ruby: &Ruby, rb_self: &Self) -> Option<f64> {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.default_timeout())
            .map(|t| t.as_secs_f64())
    }

    fn ttl(ruby: &Ruby, rb_self: &Self) -> f64 {
        rb_self
            .core
            .nonblocking(ruby, |lock| lock.ttl())
            .as_secs_f64()
    }
}

impl Drop for Lock {
    /// Run by Ruby's garbage collector: releases in the background, so a
    /// collection never waits on the bucket.
    fn drop(&mut self) {
        self.core.freeing().release_all_in_background();
    }
}
