//! [`Hold`] for each primitive the command can run under.

use lockyard::group::SlotGroup;
use lockyard::redis::LockState;
use lockyard::{etcd, gcs, quorum, redis, Deadline, Interrupt, Result};

use crate::hold::Hold;

impl Hold for redis::Lock {
    fn acquire(&mut self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<()> {
        self.acquire_interruptibly(deadline, interrupted)
    }
    fn healthy(&self) -> bool {
        redis::Lock::healthy(self)
    }
    fn fencing_token(&self) -> Option<u64> {
        redis::Lock::fencing_token(self)
    }
    fn release(&mut self) -> Result<bool> {
        redis::Lock::release(self)
    }
}

impl Hold for etcd::Lock {
    fn acquire(&mut self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<()> {
        self.acquire_interruptibly(deadline, interrupted)
    }
    fn healthy(&self) -> bool {
        etcd::Lock::healthy(self)
    }
    fn fencing_token(&self) -> Option<u64> {
        etcd::Lock::fencing_token(self)
    }
    fn release(&mut self) -> Result<bool> {
        etcd::Lock::release(self)
    }
}

impl Hold for gcs::Lock {
    fn acquire(&mut self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<()> {
        self.acquire_interruptibly(deadline, interrupted)
    }
    fn healthy(&self) -> bool {
        gcs::Lock::healthy(self)
    }
    fn fencing_token(&self) -> Option<u64> {
        gcs::Lock::fencing_token(self)
    }
    fn release(&mut self) -> Result<bool> {
        gcs::Lock::release(self)
    }
}

/// A slot of a WaitGroup of either backend (`lockyard lock --limit N`).
pub struct Slot {
    pub group: Box<dyn SlotGroup>,
    pub token: Option<String>,
}

impl Hold for Slot {
    fn acquire(&mut self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<()> {
        self.token = Some(self.group.add(deadline, interrupted)?);
        Ok(())
    }
    fn healthy(&self) -> bool {
        self.token.as_deref().is_some_and(|t| self.group.healthy(t))
    }
    fn fencing_token(&self) -> Option<u64> {
        self.group.fencing_token(self.token.as_deref()?)
    }
    fn release(&mut self) -> Result<bool> {
        match self.token.take() {
            Some(token) => self.group.done(&token),
            None => Ok(false),
        }
    }
}

/// The quorum RwLock, for writing or (`--read`) for reading.
pub struct QuorumLock {
    pub lock: quorum::RwLock,
    pub read: bool,
}

impl Hold for QuorumLock {
    fn acquire(&mut self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<()> {
        match self.read {
            true => self.lock.acquire_read_interruptibly(deadline, interrupted),
            false => self.lock.acquire_write_interruptibly(deadline, interrupted),
        }
    }
    fn healthy(&self) -> bool {
        self.lock.healthy()
    }
    /// Readers have none. A write lock's token is recorded on a quorum on
    /// first use; if that fails the lock may be lost, which the health
    /// check then reports.
    fn fencing_token(&self) -> Option<u64> {
        self.lock.fencing_token().ok().flatten()
    }
    fn release(&mut self) -> Result<bool> {
        self.lock.release()
    }
}

/// Leadership of an election, under its own session (`lockyard elect`).
pub struct Leadership<E, S> {
    pub election: E,
    pub session: S,
    pub value: String,
}

/// [`Hold`] for the leadership of a backend's election: the elections and
/// sessions of every backend share their method names.
macro_rules! leadership {
    ($backend:ident) => {
        impl Hold for Leadership<$backend::Election, $backend::Session> {
            fn acquire(&mut self, deadline: Deadline, interrupted: Interrupt<'_>) -> Result<()> {
                self.election
                    .campaign_interruptibly(&self.value, deadline, interrupted)
            }
            fn healthy(&self) -> bool {
                self.election.is_leader()
            }
            fn fencing_token(&self) -> Option<u64> {
                self.election.fencing_token()
            }
            /// Resigns, so the next campaigner takes over at once, and ends
            /// the session, which nothing else uses.
            fn release(&mut self) -> Result<bool> {
                let resigned = self.election.resign();
                self.session.destroy()?;
                resigned
            }
        }
    };
}

leadership!(redis);
leadership!(etcd);

/// Who holds a Redis name, for the line shown while waiting.
pub fn describe_redis(url: &str, name: &str) -> Option<String> {
    describe(&redis::inspect(url, name).ok()?)
}

/// Who holds the etcd lock `name`, for the line shown while waiting.
pub fn describe_etcd(url: &str, name: &str) -> Option<String> {
    describe(&etcd::inspect(url, name).ok()?)
}

fn describe(state: &LockState) -> Option<String> {
    let Some(first) = state.holders.first() else {
        return Some("being handed over".to_owned());
    };
    let others = match state.holders.len() {
        1 => String::new(),
        n => format!(" and {} others", n - 1),
    };
    Some(format!(
        "held by {}{others} (fencing token {}, lease {:.1}s left), {} waiting",
        first.value.as_deref().unwrap_or(&first.holder),
        first.fencing_token,
        first.expires_in.as_secs_f64(),
        state.waiters,
    ))
}
