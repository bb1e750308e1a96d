//! `Lockyard::ThreadWatch`, the native half: what a Ruby Thread that dies
//! still holds is released, as Ruby unlocks a dead Thread's `Mutex`es. Each
//! grant ties the granted Fiber to its Thread in core and makes sure the
//! watcher (`lib/lockyard/thread_watch.rb`, one Ruby thread per process,
//! running only while something is held) is running; the watcher asks core
//! which Threads hold something and reports the dead ones, whose holds core
//! gives back in the background.

use magnus::{function, prelude::*, Error, RModule, Ruby, Value};

use crate::nogvl::current_fiber;

pub(crate) fn define(lockyard: RModule) -> Result<(), Error> {
    let watch = lockyard.define_module("ThreadWatch")?;
    watch.define_singleton_method("owners_holding", function!(owners_holding, 0))?;
    watch.define_singleton_method("owner_ended", function!(owner_ended, 1))?;
    watch.define_singleton_method("watcher_failed", function!(watcher_failed, 0))?;
    Ok(())
}

/// Passes an acquisition's outcome through; after a grant, ties the
/// calling Fiber to its Thread and starts the watcher if it is not running.
/// A watcher that cannot be started (`Thread.new` refused, as in an exiting
/// program) is started by the next grant, and said so in a warning, not
/// raised: the caller must learn it holds the lock. Only an interrupt that
/// lands meanwhile (Thread#kill, the program's exit, Timeout) is raised,
/// as it would be a moment later: swallowed, a killed thread never ends.
pub(crate) fn granted(ruby: &Ruby, acquired: Result<bool, Error>) -> Result<bool, Error> {
    let acquired = acquired?;
    if acquired {
        let thread = ruby.thread_current();
        let owner: u64 = thread.funcall("object_id", ())?;
        lockyard::owners::note_owner(current_fiber(ruby), owner);
        if lockyard::owners::watcher_needed() {
            if let Err(e) = start_watcher(ruby) {
                lockyard::owners::watcher_failed();
                if !e.is_kind_of(ruby.exception_standard_error()) {
                    return Err(e);
                }
                let message = format!("lockyard: the thread watcher did not start: {e}");
                let _: Value = ruby.module_kernel().funcall("warn", (message,))?;
            }
        }
    }
    Ok(acquired)
}

/// `Lockyard::ThreadWatch.start`: `Thread.new`, which a trap handler may
/// call (unlike `Mutex#synchronize`).
fn start_watcher(ruby: &Ruby) -> Result<(), Error> {
    let watch: RModule = ruby
        .class_object()
        .const_get::<_, RModule>("Lockyard")?
        .const_get("ThreadWatch")?;
    let _: Value = watch.funcall("start", ())?;
    Ok(())
}

/// The object ids of the Threads whose fibers hold something.
fn owners_holding() -> Vec<u64> {
    lockyard::owners::owners_holding()
}

/// The Thread with object id `owner` has died: what it held is released
/// in the background. What was held, for the watcher's warning.
fn owner_ended(owner: u64) -> Vec<String> {
    lockyard::owners::owner_ended(owner)
}

/// The watcher ended by an exception (killed, raised into): the next grant
/// starts another.
fn watcher_failed() {
    lockyard::owners::watcher_failed();
}
