//! Mutually exclusive workers on etcd: [`crate::exclusive`] with this
//! backend's lock and session.

use super::lock::Lock;
use super::session::Session;

crate::exclusive::backend_exclusive!(Lock, Session, "etcd", "etcd://127.0.0.1:2379");
