//! Mutually exclusive workers on Redis: [`crate::exclusive`] with this
//! backend's lock and session.

use super::lock::Lock;
use super::session::Session;

crate::exclusive::backend_exclusive!(Lock, Session, "redis", "redis://127.0.0.1:6379/0");
