//! What [`NoGvl::nonblocking`](super::NoGvl::nonblocking) lets a binding
//! reach while it keeps the GVL: the local state of a core object (flags,
//! ids, tokens, settings), never a method that may ask the server. A
//! [`Local`] view forwards only the core methods listed below, each
//! documented in core to touch no server, so asking Redis with the GVL
//! held (`lock.locked()`, `session.destroy()`) does not compile: such a
//! call has to go through `blocking`. List a method here only if its core
//! documentation says it reads a flag, the clock or settings.

use std::time::Duration;

use lockyard::group::SlotGroup;
use lockyard::{etcd, gcs, quorum, redis, Result};

/// A core object seen by a call that keeps the GVL: only the methods below.
pub(crate) struct Local<'a, T>(&'a T);

impl<'a, T> Local<'a, T> {
    /// Only `NoGvl` hands out views, of the object it keeps.
    pub(super) fn new(inner: &'a T) -> Self {
        Local(inner)
    }
}

/// A Ruby object's free function (`Drop`, run by the garbage collector
/// with the GVL held, where nothing may call into Ruby) reaches its core
/// object through the same view, naming no holder: only what touches no
/// server while the GVL is held.
impl<T> super::NoGvl<T> {
    pub(crate) fn freeing(&mut self) -> Local<'_, T> {
        Local(&self.0)
    }
}

/// `local!(Core { fn name(args) -> Type; ... })`: `Local<Core>` gets each
/// listed method, calling the core method of the same name.
macro_rules! local {
    ($core:ty { $(fn $name:ident($($arg:ident: $arg_type:ty),*) -> $output:ty;)* }) => {
        impl Local<'_, $core> {
            $(
                pub(crate) fn $name(&self, $($arg: $arg_type),*) -> $output {
                    self.0.$name($($arg),*)
                }
            )*
        }
    };
}

local!(redis::Lock {
    fn release_all_in_background() -> ();
    fn healthy() -> bool;
    fn check_health() -> Result<()>;
    fn fencing_token() -> Option<u64>;
    fn identity() -> String;
    fn default_timeout() -> Option<Duration>;
});

local!(etcd::Lock {
    fn release_all_in_background() -> ();
    fn healthy() -> bool;
    fn check_health() -> Result<()>;
    fn fencing_token() -> Option<u64>;
    fn identity() -> String;
    fn default_timeout() -> Option<Duration>;
});

/// Both backends' claims (`lockyard::exclusive::Claim` of their lock).
macro_rules! claim_local {
    ($($core:ty),*) => {
        $(local!($core {
            fn release_in_background() -> ();
        });)*
    };
}

claim_local!(redis::Claim, etcd::Claim);

/// The sessions of both backends share these names.
macro_rules! session_local {
    ($($core:ty),*) => {
        $(local!($core {
            fn destroy_in_background() -> ();
            fn healthy() -> bool;
            fn check_health() -> Result<()>;
            fn id() -> &str;
            fn ttl() -> Duration;
            fn lock_delay() -> Duration;
            fn behavior() -> redis::Behavior;
        });)*
    };
}

session_local!(redis::Session, etcd::Session);

/// Binding a lock or an election to a session touches no server either,
/// in either backend (`$backend::{Session, LockBuilder, Election}`).
macro_rules! session_binding {
    ($($backend:ident),*) => {
        $(impl Local<'_, $backend::Session> {
            /// `builder`'s lock, to be held under this session.
            pub(crate) fn bind(&self, builder: $backend::LockBuilder) -> $backend::LockBuilder {
                builder.session(self.0)
            }
            /// The election `name`, campaigning under this session.
            pub(crate) fn election(&self, url: &str, name: &str) -> Result<$backend::Election> {
                $backend::Election::new(url, name, self.0)
            }
        })*
    };
}

session_binding!(redis, etcd);

local!(Box<dyn SlotGroup> {
    fn release_blocks_in_background() -> ();
    fn healthy(token: &str) -> bool;
    fn check_health(token: &str) -> Result<()>;
    fn fencing_token(token: &str) -> Option<u64>;
});

/// The elections of both backends share these names
/// (`$backend::{Election, Observer}`).
macro_rules! election_local {
    ($($backend:ident),*) => {
        $(local!($backend::Election {
            fn resign_in_background() -> ();
            fn is_leader() -> bool;
            fn check_health() -> Result<()>;
            fn fencing_token() -> Option<u64>;
            fn observe() -> $backend::Observer;
        });)*
    };
}

election_local!(redis, etcd);

local!(quorum::RwLock {
    fn release_all_in_background() -> ();
    fn held() -> bool;
    fn healthy() -> bool;
    fn check_health() -> Result<()>;
    fn nodes() -> &[String];
    fn default_timeout() -> Option<Duration>;
});

local!(gcs::Lock {
    fn release_all_in_background() -> ();
    fn held_and_healthy() -> Result<bool>;
    fn check_health() -> Result<()>;
    fn last_refresh_error() -> Option<String>;
    fn owned_according_to_internal_state() -> bool;
    fn locked_according_to_internal_state() -> bool;
    fn fencing_token() -> Option<u64>;
    fn identity() -> String;
    fn default_timeout() -> Option<Duration>;
    fn ttl() -> Duration;
});
