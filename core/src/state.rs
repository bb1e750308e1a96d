//! What operators see of a name (`lockyard status`): its holders, their
//! leases, its waiters. The same shape for every backend that has one.

use std::time::Duration;

/// A name's state as its server sees it, from `redis::inspect` or
/// `etcd::inspect`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// Live holders, the one whose lease ends first first.
    pub holders: Vec<HolderState>,
    /// Waiters still queued for the name.
    pub waiters: u32,
    /// What is left of a lost session's lock_delay (None if none runs).
    pub lock_delay: Option<Duration>,
    /// The slots of the name while anyone holds or waits for it: 1 for a
    /// lock or an election, a WaitGroup's limit otherwise.
    pub limit: Option<u32>,
}

/// One live holder in a [`LockState`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderState {
    /// Redis: the holder's request token (`<identity>#<random>` for a
    /// lock, a UUID for a WaitGroup slot); etcd: the identity stored in the
    /// holder's key.
    pub holder: String,
    /// The fencing token of its grant.
    pub fencing_token: u64,
    /// How long its lease lasts without another refresh (server clock).
    pub expires_in: Duration,
    /// The value stored with a grant under a session (None if none).
    pub value: Option<String>,
}

impl LockState {
    /// Whether anyone holds the name.
    pub fn held(&self) -> bool {
        !self.holders.is_empty()
    }
}

/// One change of leadership: a new leader's term begins (`value` is its
/// value) or a term ends (`value` is None: nobody leads until the next
/// term). `fencing_token` is the term's, strictly increasing across terms;
/// an end carries the token of the term it ends. An etcd observer whose
/// first look finds nobody leading reports token 0: no earlier term is
/// known there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub value: Option<String>,
    pub fencing_token: u64,
}
