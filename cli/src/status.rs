//! `lockyard status` and `lockyard release --force`: for operators.

use std::time::Duration;

use lockyard::redis::{self, LockState};
use serde_json::json;

use crate::backend::Backend;
use crate::exit::Failure;

/// Prints the state of `name`; exit status 0 if held, 1 if free.
pub fn status(backend: &Backend, name: &str, as_json: bool) -> Result<i32, Failure> {
    let Backend::Redis(url) = backend else {
        return Err(not_yet("status", backend));
    };
    let state = redis::inspect(url, name)?;
    if as_json {
        println!("{}", to_json(name, &state));
    } else {
        print!("{}", to_text(name, &state));
    }
    Ok(if state.held() { 0 } else { 1 })
}

/// Removes every holder of `name`.
pub fn release(backend: &Backend, name: &str, force: bool) -> Result<i32, Failure> {
    if !force {
        return Err(Failure::usage(format!(
            "release removes every holder of {name:?}, whoever holds it, and stops their commands; \
             it needs --force (a `lockyard lock` releases its own lock when its command exits)"
        )));
    }
    let Backend::Redis(url) = backend else {
        return Err(not_yet("release", backend));
    };
    let removed = redis::force_release(url, name)?;
    eprintln!("lockyard: removed {removed} holder(s) of {name:?}");
    Ok(0)
}

fn not_yet(what: &str, backend: &Backend) -> Failure {
    let kind = match backend {
        Backend::Quorum(_) => "a quorum of Redis servers",
        Backend::Gcs { .. } => "GCS",
        Backend::Redis(_) => "Redis",
    };
    Failure::usage(format!("`lockyard {what}` does not support {kind} yet"))
}

fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn to_json(name: &str, state: &LockState) -> serde_json::Value {
    let holders: Vec<_> = state
        .holders
        .iter()
        .map(|h| {
            json!({
                "holder": h.holder,
                "fencing_token": h.fencing_token,
                "expires_in_ms": millis(h.expires_in),
                "value": h.value,
            })
        })
        .collect();
    json!({
        "name": name,
        "held": state.held(),
        "holders": holders,
        "waiters": state.waiters,
        "lock_delay_ms": state.lock_delay.map(millis),
        "limit": state.limit,
    })
}

fn to_text(name: &str, state: &LockState) -> String {
    let mut text = match (state.held(), state.limit) {
        (false, _) => format!("{name}: free\n"),
        (true, Some(limit)) if limit > 1 => {
            format!("{name}: {} of {limit} slots held\n", state.holders.len())
        }
        (true, _) => format!("{name}: held\n"),
    };
    for h in &state.holders {
        text += &format!(
            "  holder {}  fencing token {}  lease {:.1}s left{}\n",
            h.holder,
            h.fencing_token,
            h.expires_in.as_secs_f64(),
            h.value
                .as_deref()
                .map(|v| format!("  value {v}"))
                .unwrap_or_default(),
        );
    }
    text += &format!("  waiters: {}\n", state.waiters);
    if let Some(delay) = state.lock_delay {
        text += &format!("  lock_delay: {:.1}s left\n", delay.as_secs_f64());
    }
    text
}
