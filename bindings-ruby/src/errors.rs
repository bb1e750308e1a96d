//! Every core error becomes a Ruby exception here, and only here. The
//! classes are written in Ruby (`lib/lockyard/error.rb`) and looked up once.

use magnus::value::Lazy;
use magnus::{prelude::*, ExceptionClass, RModule, Ruby};

fn lookup(ruby: &Ruby, name: &str) -> ExceptionClass {
    ruby.class_object()
        .const_get::<_, RModule>("Lockyard")
        .and_then(|lockyard| lockyard.const_get(name))
        .unwrap_or_else(|e| {
            panic!("Lockyard::{name} is missing (lockyard/error.rb not loaded?): {e}")
        })
}

static ERROR: Lazy<ExceptionClass> = Lazy::new(|ruby| lookup(ruby, "Error"));
static TIMEOUT: Lazy<ExceptionClass> = Lazy::new(|ruby| lookup(ruby, "TimeoutError"));
static ALREADY_LOCKED: Lazy<ExceptionClass> = Lazy::new(|ruby| lookup(ruby, "AlreadyLockedError"));
static NOT_LOCKED: Lazy<ExceptionClass> = Lazy::new(|ruby| lookup(ruby, "NotLockedError"));
static LOCK_UNHEALTHY: Lazy<ExceptionClass> = Lazy::new(|ruby| lookup(ruby, "LockUnhealthyError"));
static CONFIG: Lazy<ExceptionClass> = Lazy::new(|ruby| lookup(ruby, "ConfigError"));
static BACKEND: Lazy<ExceptionClass> = Lazy::new(|ruby| lookup(ruby, "BackendError"));

/// The Ruby exception for a core error; the message is the core's.
pub(crate) fn to_ruby(ruby: &Ruby, error: lockyard::Error) -> magnus::Error {
    use lockyard::Error as E;
    let class = match &error {
        E::Timeout { .. } => &TIMEOUT,
        E::AlreadyLocked(_) => &ALREADY_LOCKED,
        E::NotLocked(_) => &NOT_LOCKED,
        E::LockUnhealthy { .. } => &LOCK_UNHEALTHY,
        E::Config(_) => &CONFIG,
        E::Backend { .. } => &BACKEND,
        // Interrupted never gets here: the GVL helper raises the pending
        // Ruby interrupt instead. Kinds added to core later land on the base.
        _ => &ERROR,
    };
    // Made now, not lazily where it is raised: making it runs Ruby code,
    // where an interrupt pending for this thread fires (Timeout.timeout's,
    // which throws rather than raises). That jump must then propagate
    // instead of the error; magnus, asked to make the exception later,
    // finds the jump and panics where no panic may unwind, which aborts
    // the process.
    match ruby.get_inner(class).new_instance((error.to_string(),)) {
        Ok(exception) => exception.into(),
        Err(jump) => jump,
    }
}

/// `result.or_raise(ruby)?`: a core result as a Ruby one.
pub(crate) trait OrRaise<T> {
    fn or_raise(self, ruby: &Ruby) -> Result<T, magnus::Error>;
}

impl<T> OrRaise<T> for lockyard::Result<T> {
    fn or_raise(self, ruby: &Ruby) -> Result<T, magnus::Error> {
        self.map_err(|error| to_ruby(ruby, error))
    }
}
