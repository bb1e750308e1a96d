//! The Lua scripts, hashed once and sent by SHA (redis-rs falls back to
//! loading a script the server does not know). Each one is the prelude's
//! first lines, its body's fast path (the lines before `-- [rules]`, if
//! any), the rest of the prelude, the rules over the full records, then the
//! rest of its body: a fast path runs before the helpers exist and spells
//! out what it needs of them (see the prelude for what that saves).

use std::sync::LazyLock;

use redis::{Cmd, Script, ScriptInvocation};

use super::keys::Keys;

const PRELUDE: &str = include_str!("scripts/prelude.lua");
const RULES: &str = include_str!("scripts/rules.lua");
const FAST_PATH_GOES: &str = "-- [fast path]\n";
const FAST_PATH_ENDS: &str = "-- [rules]\n";

/// The script whose body is `body` (see the module's doc).
pub(crate) fn assemble(body: &str) -> Script {
    Script::new(&source(body))
}

/// The text of the script whose body is `body`, exactly as it is sent:
/// for tests that run the scripts on their own.
#[doc(hidden)]
pub fn source(body: &str) -> String {
    let (fast_path, rest) = body.split_once(FAST_PATH_ENDS).unwrap_or(("", body));
    let (head, prelude) = PRELUDE
        .split_once(FAST_PATH_GOES)
        .expect("prelude.lua marks where a fast path goes");
    format!("{head}{fast_path}{prelude}{RULES}{rest}")
}

macro_rules! script {
    ($file:literal) => {
        $crate::redis::scripts::assemble(include_str!(concat!("scripts/", $file)))
    };
}
pub(crate) use script;

pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) refresh: Script,
    pub(crate) adopt: Script,
    pub(crate) cancel: Script,
    pub(crate) inspect: Script,
    pub(crate) watch: Script,
    pub(crate) holder: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: script!("acquire.lua"),
    release: script!("release.lua"),
    refresh: script!("refresh.lua"),
    adopt: script!("adopt.lua"),
    cancel: script!("cancel.lua"),
    inspect: script!("inspect.lua"),
    watch: script!("watch.lua"),
    holder: script!("holder.lua"),
});

/// An invocation with the keys and the arguments every script shares
/// (KEYS[1] the name's key prefix, KEYS[2] its holders key, ARGV[1] limit,
/// ARGV[2] the fence base of the node the connection reaches); the caller
/// appends its own.
pub(crate) fn prepare<'a>(
    script: &'a Script,
    keys: &Keys,
    limit: u32,
    fence_base: u64,
) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    let [prefix, holders] = keys.declared();
    invocation
        .key(prefix)
        .key(holders)
        .arg(limit)
        .arg(fence_base);
    invocation
}

/// [`prepare`] as a plain EVALSHA command, for a pipeline (which does not
/// load a script the server lacks: its sender does).
pub(crate) fn evalsha(script: &Script, keys: &Keys, limit: u32, fence_base: u64) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash())
        .arg(2)
        .arg(&keys.declared()[..])
        .arg(limit)
        .arg(fence_base);
    cmd
}
