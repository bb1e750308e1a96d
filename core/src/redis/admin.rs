//! Operator tools for a name on Redis: look at who holds it and who
//! waits ([`inspect`]), and break the glass ([`force_release`]). They take
//! a URL and a name, not a lock object, because the caller is usually not
//! a holder (`lockyard status`, `lockyard release --force`).

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::keys::Keys;
use super::route::Route;
use super::scripts::{prepare, script};
use super::server::{server, COMMAND_TIMEOUT};
use crate::error::{Error, Result};
use crate::lease::DEFAULT_CONNECT_TIMEOUT;
pub use crate::state::{HolderState, LockState};

static STATE: LazyLock<Script> = LazyLock::new(|| script!("state.lua"));
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| script!("force_release.lua"));

/// Who holds `name` on the Redis server at `url`, how long their leases
/// last, how many wait, and what is left of a running lock_delay. Writes
/// nothing.
///
/// # Errors
/// [`Error::Config`] for a bad name or URL, [`Error::Backend`] if Redis
/// cannot be reached.
pub fn inspect(url: &str, name: &str) -> Result<LockState> {
    let (route, keys) = target(url, name)?;
    let reply: Vec<String> = route.run("inspect", COMMAND_TIMEOUT, |conn| {
        prepare(&STATE, &keys, 1, conn.fence_base()).invoke(conn)
    })?;
    parse_state(&reply).ok_or_else(|| {
        Error::backend(
            &route.server().name,
            "inspect",
            "unexpected reply from the state script",
        )
    })
}

/// Removes every holder of `name` on the Redis server at `url`, whoever
/// holds it, and lifts a running lock_delay; returns how many holders were
/// removed. For an operator breaking the glass on a lock whose holder
/// hangs: the former holders turn unhealthy at their next refresh (so
/// `lockyard lock` stops their command), waiters are admitted in order,
/// and the next grant still gets a larger fencing token.
///
/// # Errors
/// [`Error::Config`] for a bad name or URL, [`Error::Backend`] if Redis
/// cannot be reached.
pub fn force_release(url: &str, name: &str) -> Result<u32> {
    let (route, keys) = target(url, name)?;
    route.run("force_release", COMMAND_TIMEOUT, |conn| {
        prepare(&FORCE_RELEASE, &keys, 1, conn.fence_base()).invoke::<u32>(conn)
    })
}

fn target(url: &str, name: &str) -> Result<(Route, Keys)> {
    let keys = Keys::new(name)?;
    Ok((Route::new(server(url, DEFAULT_CONNECT_TIMEOUT)?), keys))
}

fn parse_state(reply: &[String]) -> Option<LockState> {
    let [now_ms, delay_ms, waiters, shape, holders @ ..] = reply else {
        return None;
    };
    let now_ms: u64 = now_ms.parse().ok()?;
    let delay_ms: u64 = delay_ms.parse().ok()?;
    if holders.len() % 4 != 0 {
        return None;
    }
    let holders = holders
        .chunks(4)
        .map(|h| {
            let deadline_ms: u64 = h[1].parse().ok()?;
            Some(HolderState {
                holder: h[0].clone(),
                fencing_token: h[2].parse().ok()?,
                expires_in: Duration::from_millis(deadline_ms.saturating_sub(now_ms)),
                value: Some(h[3].clone()).filter(|v| !v.is_empty()),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(LockState {
        holders,
        waiters: waiters.parse().ok()?,
        lock_delay: (delay_ms > 0).then(|| Duration::from_millis(delay_ms)),
        limit: shape
            .rsplit(' ')
            .next()
            .and_then(|limit| limit.parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_free_name_has_no_holders() {
        let state = parse_state(&strings(&["1000", "0", "0", ""])).unwrap();
        assert!(!state.held());
        assert_eq!(
            (state.waiters, state.lock_delay, state.limit),
            (0, None, None)
        );
    }

    #[test]
    fn holders_carry_their_lease_left_and_value() {
        let reply = strings(&[
            "1000", "250", "2", "2 3", "a#1", "31000", "7", "", "b#2", "41000", "9", "worker-3",
        ]);
        let state = parse_state(&reply).unwrap();
        assert_eq!(state.holders.len(), 2);
        assert_eq!(state.holders[0].expires_in, Duration::from_secs(30));
        assert_eq!(state.holders[0].value, None);
        assert_eq!(state.holders[1].fencing_token, 9);
        assert_eq!(state.holders[1].value.as_deref(), Some("worker-3"));
        assert_eq!(state.lock_delay, Some(Duration::from_millis(250)));
        assert_eq!((state.waiters, state.limit), (2, Some(3)));
    }

    #[test]
    fn a_truncated_reply_is_rejected() {
        assert_eq!(parse_state(&strings(&["1000", "0"])), None);
        assert_eq!(parse_state(&strings(&["1000", "0", "0", "", "a#1"])), None);
    }
}
