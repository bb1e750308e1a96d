//! Mutually exclusive workers (the source's job servers): each worker walks
//! the same task names and runs only the tasks whose lock it wins under its
//! session, skipping taken ones without waiting.

use std::time::Duration;

use super::lock::Lock;
use super::session::Session;
use crate::error::Result;
use crate::wait::{InTime, Interrupt, NEVER};

/// Tries each name's lock once under `session` and yields only the ones
/// won. A [`Claim`] holds its lock until dropped, so in a `for` loop each
/// task's lock is released when the loop moves on, breaks or returns.
///
/// ```no_run
/// use lockyard::redis::{exclusive, Session};
///
/// let url = "redis://127.0.0.1:6379/0";
/// let session = Session::builder(url).build()?;
/// for claim in exclusive(url, ["task-1", "task-2"], &session) {
///     let claim = claim?;
///     println!("running {} (fencing token {})", claim.name(), claim.fencing_token());
/// }
/// # Ok::<(), lockyard::Error>(())
/// ```
pub fn exclusive<'s, I>(url: &str, names: I, session: &'s Session) -> Exclusive<'s, I::IntoIter>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    Exclusive {
        url: url.to_owned(),
        names: names.into_iter(),
        session,
    }
}

/// The iterator of [`exclusive`].
pub struct Exclusive<'s, I> {
    url: String,
    names: I,
    session: &'s Session,
}

impl<I> Iterator for Exclusive<'_, I>
where
    I: Iterator,
    I::Item: AsRef<str>,
{
    type Item = Result<Claim>;

    fn next(&mut self) -> Option<Result<Claim>> {
        self.names
            .by_ref()
            .find_map(|name| claim(&self.url, name.as_ref(), self.session, NEVER).transpose())
    }
}

/// One step of [`exclusive`], for a binding that walks the names itself:
/// tries `name`'s lock once under `session`, for the calling thread. A
/// [`Claim`] if won; Ok(None) if another worker holds it. `interrupted`
/// ends a try that goes unanswered (see `Lock::acquire_interruptibly`).
///
/// # Errors
/// [`crate::Error::Backend`] if Redis cannot be reached,
/// [`crate::Error::LockUnhealthy`] if the session is lost,
/// [`crate::Error::Interrupted`] once `interrupted` answers true.
pub fn claim(
    url: &str,
    name: &str,
    session: &Session,
    interrupted: Interrupt<'_>,
) -> Result<Option<Claim>> {
    let lock = Lock::builder(url, name).session(session).build()?;
    let won = lock
        .acquire_interruptibly(Duration::ZERO, interrupted)
        .in_time()?;
    Ok(won.then(|| Claim {
        name: name.to_owned(),
        lock,
    }))
}

/// A task this worker won; its lock is released when the claim is dropped.
/// Dropping it on another thread than the one that won it leaves the lock
/// to the session (freed when the session ends).
pub struct Claim {
    name: String,
    lock: Lock,
}

impl Claim {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The grant's fencing token.
    pub fn fencing_token(&self) -> u64 {
        self.lock.fencing_token().unwrap_or_default()
    }

    /// Ends the task's block on the thread that won it, as a `with` or a
    /// block's `ensure` would: releases the lock, except in a process
    /// forked during the task, where the lock is the parent's and this does
    /// nothing (Ok(true)). Ok(false) when the lock had been lost meanwhile.
    ///
    /// # Errors
    /// [`crate::Error::NotLocked`] on another thread than the winner's.
    pub fn leave(&self) -> Result<bool> {
        self.lock.leave()
    }

    /// Releases the claim's lock in the background and returns at once: for
    /// a claim dropped where waiting on Redis is not allowed (a garbage
    /// collector's finalizer). The drop then finds nothing left to release.
    pub fn release_in_background(&self) {
        self.lock.release_all_in_background();
    }

    /// The session's health, which is the claim's.
    ///
    /// # Errors
    /// [`crate::Error::LockUnhealthy`] once the claim may be lost.
    pub fn check_health(&self) -> Result<()> {
        self.lock.check_health()
    }
}
