//! `lockyard status` and `lockyard release --force`: for operators.

use std::time::Duration;

use lockyard::quorum::{self, NodeState};
use lockyard::redis::{self, LockState};
use lockyard::{etcd, gcs};
use serde_json::json;

use crate::backend::Backend;
use crate::exit::Failure;
use crate::output::{out, out_part, say};

/// Prints the state of `name`; exit status 0 if held, 1 if free.
pub fn status(backend: &Backend, name: &str, as_json: bool) -> Result<i32, Failure> {
    let state = match backend {
        Backend::Redis(url) => redis::inspect(url, name)?,
        Backend::Etcd(url) => etcd::inspect(url, name)?,
        Backend::Quorum(urls) => return quorum_status(urls, name, as_json),
        Backend::Gcs { bucket, prefix } => {
            return gcs_status(&gcs_lock(bucket, prefix, name)?, name, as_json)
        }
    };
    if as_json {
        out!("{}", to_json(name, &state));
    } else {
        out_part!("{}", to_text(name, &state));
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
    match backend {
        Backend::Redis(url) => {
            let removed = redis::force_release(url, name)?;
            say!("lockyard: removed {removed} holder(s) of {name:?}");
        }
        Backend::Etcd(url) => {
            let removed = etcd::force_release(url, name)?;
            say!("lockyard: removed {removed} holder(s) of {name:?}");
        }
        Backend::Quorum(urls) => {
            let cleared = quorum::force_release(urls, name)?;
            say!("lockyard: removed the grants of {name:?} on {cleared} node(s)");
        }
        Backend::Gcs { bucket, prefix } => {
            let removed = gcs_lock(bucket, prefix, name)?.force_release()?;
            let what = if removed { "deleted" } else { "found no" };
            say!("lockyard: {what} lock object for {name:?}");
        }
    }
    Ok(0)
}

fn gcs_lock(bucket: &str, prefix: &str, name: &str) -> Result<gcs::Lock, Failure> {
    Ok(gcs::Lock::builder(bucket, Backend::object(prefix, name)).build()?)
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

/// Each node's view; held when any node has a live grant.
fn quorum_status(urls: &[String], name: &str, as_json: bool) -> Result<i32, Failure> {
    let nodes = quorum::inspect(urls, name)?;
    if nodes.iter().all(|node| node.error.is_some()) {
        return Err(Failure {
            status: crate::exit::UNAVAILABLE,
            message: format!(
                "no node answered: {}",
                nodes[0].error.as_deref().unwrap_or("")
            ),
        });
    }
    let held = nodes.iter().any(NodeState::held);
    if as_json {
        out!("{}", quorum_json(name, &nodes));
    } else {
        out!("{name}: {}", if held { "held" } else { "free" });
        for node in &nodes {
            let view = match &node.error {
                Some(error) => format!("unreachable ({error})"),
                None => {
                    let mut grants: Vec<String> = node
                        .writer
                        .iter()
                        .map(|w| {
                            format!(
                                "writer {} ({:.1}s left)",
                                w.holder,
                                w.expires_in.as_secs_f64()
                            )
                        })
                        .collect();
                    grants.extend(node.readers.iter().map(|r| {
                        format!(
                            "reader {} ({:.1}s left)",
                            r.holder,
                            r.expires_in.as_secs_f64()
                        )
                    }));
                    if node.writer_waiting {
                        grants.push("a writer waiting".to_owned());
                    }
                    match grants.is_empty() {
                        true => "free".to_owned(),
                        false => grants.join(", "),
                    }
                }
            };
            out!("  {}: {view}", node.node);
        }
    }
    Ok(if held { 0 } else { 1 })
}

/// Holders are the grants seen on any node (the shortest lease left
/// among the nodes that have it); a quorum grant carries no per-holder
/// fencing token on the nodes, so `fencing_token` is null.
fn quorum_json(name: &str, nodes: &[NodeState]) -> serde_json::Value {
    let mut holders: Vec<(String, &str, Duration)> = Vec::new();
    let grants = nodes.iter().flat_map(|node| {
        let writer = node.writer.iter().map(|g| (g, "write"));
        writer.chain(node.readers.iter().map(|g| (g, "read")))
    });
    for (grant, mode) in grants {
        match holders
            .iter_mut()
            .find(|(holder, _, _)| *holder == grant.holder)
        {
            Some(seen) => seen.2 = seen.2.min(grant.expires_in),
            None => holders.push((grant.holder.clone(), mode, grant.expires_in)),
        }
    }
    json!({
        "name": name,
        "held": !holders.is_empty(),
        "holders": holders.iter().map(|(holder, mode, left)| json!({
            "holder": holder,
            "mode": mode,
            "fencing_token": null,
            "expires_in_ms": millis(*left),
        })).collect::<Vec<_>>(),
        // Quorum waiters poll rather than queue; a writer's waiting mark is
        // all the nodes know of them.
        "waiters": usize::from(nodes.iter().any(|node| node.writer_waiting)),
        "nodes": nodes.iter().map(|node| json!({
            "node": node.node,
            "error": node.error,
            "writer": node.writer.as_ref().map(|w| json!({"holder": w.holder, "expires_in_ms": millis(w.expires_in)})),
            "readers": node.readers.iter().map(|r| json!({"holder": r.holder, "expires_in_ms": millis(r.expires_in)})).collect::<Vec<_>>(),
            "writer_waiting": node.writer_waiting,
        })).collect::<Vec<_>>(),
    })
}

/// The lock object's identity, generation (the fencing token) and expiry.
/// GCS keeps no queue: waiters are not known.
fn gcs_status(lock: &gcs::Lock, name: &str, as_json: bool) -> Result<i32, Failure> {
    let object = lock.object_state()?;
    if as_json {
        let holders: Vec<_> = object
            .iter()
            .map(|o| {
                json!({
                    "holder": o.identity,
                    "fencing_token": o.generation,
                    "expires_in_ms": o.expires_in.map(millis),
                    "generation": o.generation,
                    "metageneration": o.metageneration,
                    "expires_at": o.expires_at,
                })
            })
            .collect();
        out!(
            "{}",
            json!({"name": name, "held": object.is_some(), "holders": holders, "waiters": null})
        );
    } else {
        match &object {
            None => out!("{name}: free"),
            Some(o) => out!(
                "{name}: held\n  holder {}  generation (fencing token) {}  metageneration {}  {}",
                o.identity.as_deref().unwrap_or("(no identity)"),
                o.generation,
                o.metageneration,
                match o.expires_in {
                    Some(left) if left.is_zero() => "stale".to_owned(),
                    Some(left) => format!("lease {:.1}s left", left.as_secs_f64()),
                    None => "no expiry written".to_owned(),
                }
            ),
        }
    }
    Ok(if object.is_some() { 0 } else { 1 })
}
