//! Mutually exclusive workers (the source's job servers): each worker walks
//! the same task names and runs only the tasks whose lock it wins under its
//! session, skipping taken ones without waiting. One walk for every backend
//! with sessions; `redis::exclusive` and `etcd::exclusive` name its lock.

use std::time::Duration;

use crate::error::Result;
use crate::guard::ThreadLock;
use crate::identity::{as_holder_number, holder_number};
use crate::wait::{InTime, Interrupt, NEVER};

/// A per-thread lock that can be held under a session: what a [`Claim`]
/// holds. Sealed, as [`ThreadLock`] is.
pub trait SessionLock: ThreadLock + Sized {
    /// The backend's session.
    type Session;
    #[doc(hidden)]
    fn under(url: &str, name: &str, session: &Self::Session) -> Result<Self>;
    #[doc(hidden)]
    fn release_all_in_background(&self);
}

/// The iterator of `redis::exclusive` and `etcd::exclusive`: yields the
/// names whose lock it won, each as a [`Claim`].
pub struct Exclusive<'s, L: SessionLock, I> {
    url: String,
    names: I,
    session: &'s L::Session,
}

impl<'s, L: SessionLock, I> Exclusive<'s, L, I> {
    pub(crate) fn new<N>(url: &str, names: N, session: &'s L::Session) -> Self
    where
        N: IntoIterator<IntoIter = I>,
    {
        Exclusive {
            url: url.to_owned(),
            names: names.into_iter(),
            session,
        }
    }
}

impl<L: SessionLock, I> Iterator for Exclusive<'_, L, I>
where
    I: Iterator,
    I::Item: AsRef<str>,
{
    type Item = Result<Claim<L>>;

    fn next(&mut self) -> Option<Result<Claim<L>>> {
        self.names
            .by_ref()
            .find_map(|name| claim(&self.url, name.as_ref(), self.session, NEVER).transpose())
    }
}

/// One step of the walk, for a binding that walks the names itself: tries
/// `name`'s lock once under `session`, for the calling thread. A [`Claim`]
/// if won; Ok(None) if another worker holds it. `interrupted` ends a try
/// that goes unanswered (see `Lock::acquire_interruptibly`).
///
/// # Errors
/// [`crate::Error::Backend`] if the server cannot be reached,
/// [`crate::Error::LockUnhealthy`] if the session is lost,
/// [`crate::Error::Interrupted`] once `interrupted` answers true.
pub fn claim<L: SessionLock>(
    url: &str,
    name: &str,
    session: &L::Session,
    interrupted: Interrupt<'_>,
) -> Result<Option<Claim<L>>> {
    let lock = L::under(url, name, session)?;
    let won = lock
        .acquire_interruptibly(Duration::ZERO.into(), interrupted)
        .in_time()?;
    Ok(won.then(|| Claim {
        name: name.to_owned(),
        holder: holder_number(),
        fencing_token: lock.fencing_token().unwrap_or_default(),
        lock,
    }))
}

/// A task this worker won; its lock is released when the claim is dropped
/// (on any thread). Its token and health are the winner's, read on any
/// thread; only the winner's thread ends its block with [`Claim::leave`].
pub struct Claim<L: SessionLock> {
    name: String,
    /// The holder that won it (a thread, or a binding's `as_holder` key).
    holder: u64,
    fencing_token: u64,
    lock: L,
}

impl<L: SessionLock> Claim<L> {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The grant's fencing token.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Ends the task's block on the thread that won it, as a `with` or a
    /// block's `ensure` would: releases the lock, except in a process
    /// forked during the task, where the lock is the parent's and this does
    /// nothing (Ok(true)). Ok(false) when the lock had been lost meanwhile.
    ///
    /// # Errors
    /// [`crate::Error::NotLocked`] on another thread than the winner's (a
    /// block ends where it began), or once it was left.
    pub fn leave(&self) -> Result<bool> {
        self.lock.leave()
    }

    /// Releases the claim's lock in the background and returns at once: for
    /// a claim dropped where waiting on the server is not allowed (a garbage
    /// collector's finalizer). The drop then finds nothing left to release.
    pub fn release_in_background(&self) {
        self.lock.release_all_in_background();
    }

    /// The claim's health: its session's, and its key's.
    ///
    /// # Errors
    /// [`crate::Error::LockUnhealthy`] once the claim may be lost,
    /// [`crate::Error::NotLocked`] once it was left.
    pub fn check_health(&self) -> Result<()> {
        as_holder_number(self.holder, || self.lock.check_health())
    }
}

/// A backend's face of the walk: implements [`SessionLock`] for its lock
/// and session, and defines `exclusive`, `claim`, `Claim` and `Exclusive`
/// in the calling module, whose docs show `$url`.
macro_rules! backend_exclusive {
    ($lock:ty, $session:ty, $module:literal, $url:literal) => {
        impl $crate::exclusive::SessionLock for $lock {
            type Session = $session;
            fn under(url: &str, name: &str, session: &$session) -> $crate::Result<Self> {
                <$lock>::builder(url, name).session(session).build()
            }
            fn release_all_in_background(&self) {
                <$lock>::release_all_in_background(self)
            }
        }

        /// A task this worker won; see [`crate::exclusive::Claim`].
        pub type Claim = $crate::exclusive::Claim<$lock>;

        /// The iterator of [`exclusive`].
        pub type Exclusive<'s, I> = $crate::exclusive::Exclusive<'s, $lock, I>;

        /// Tries each name's lock once under `session` and yields only the
        /// ones won. A [`Claim`] holds its lock until dropped, so in a `for`
        /// loop each task's lock is released when the loop moves on, breaks
        /// or returns.
        ///
        /// ```no_run
        #[doc = concat!("use lockyard::", $module, "::{exclusive, Session};")]
        ///
        #[doc = concat!("let url = \"", $url, "\";")]
        /// let session = Session::builder(url).build()?;
        /// for claim in exclusive(url, ["task-1", "task-2"], &session) {
        ///     let claim = claim?;
        ///     println!("running {} (fencing token {})", claim.name(), claim.fencing_token());
        /// }
        /// # Ok::<(), lockyard::Error>(())
        /// ```
        pub fn exclusive<'s, I>(
            url: &str,
            names: I,
            session: &'s $session,
        ) -> Exclusive<'s, I::IntoIter>
        where
            I: IntoIterator,
            I::Item: AsRef<str>,
        {
            Exclusive::new(url, names, session)
        }

        /// One step of [`exclusive`] (see [`crate::exclusive::claim`]).
        ///
        /// # Errors
        /// Those of [`crate::exclusive::claim`].
        pub fn claim(
            url: &str,
            name: &str,
            session: &$session,
            interrupted: $crate::wait::Interrupt<'_>,
        ) -> $crate::Result<Option<Claim>> {
            $crate::exclusive::claim(url, name, session, interrupted)
        }
    };
}
pub(crate) use backend_exclusive;
