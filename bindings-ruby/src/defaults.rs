//! `Lockyard.core_defaults` (private): the core builders' option defaults,
//! by class. The YARD docs in `lib/` state them in words;
//! `test/defaults_test.rb` holds those to these.

use magnus::{function, prelude::*, Error, IntoValue, RHash, RModule, Ruby};

use lockyard::gcs::LockBuilder as GcsLockBuilder;
use lockyard::lease::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_REFRESH_FAILS, DEFAULT_TTL};
use lockyard::redis::{Behavior, SessionBuilder};

pub(crate) fn define(lockyard: RModule) -> Result<(), Error> {
    lockyard.define_singleton_method("core_defaults", function!(core_defaults, 0))
}

/// `{"Lockyard::Redis::Lock" => {ttl: 30.0, ...}, ...}`: every keyword
/// whose nil stands for a core default, with that default.
fn core_defaults(ruby: &Ruby) -> Result<RHash, Error> {
    let options = |pairs: &[(&str, magnus::Value)]| -> Result<RHash, Error> {
        let hash = ruby.hash_new();
        for (key, value) in pairs {
            hash.aset(ruby.to_symbol(key), *value)?;
        }
        Ok(hash)
    };
    let seconds = |duration: std::time::Duration| duration.as_secs_f64().into_value_with(ruby);
    let lease = [
        ("ttl", seconds(DEFAULT_TTL)),
        (
            "max_refresh_fails",
            DEFAULT_MAX_REFRESH_FAILS.into_value_with(ruby),
        ),
        ("connect_timeout", seconds(DEFAULT_CONNECT_TIMEOUT)),
    ];
    let by_class = ruby.hash_new();
    for class in [
        "Lockyard::Redis::Lock",
        "Lockyard::Redis::WaitGroup",
        "Lockyard::Quorum::RwLock",
    ] {
        by_class.aset(class, options(&lease)?)?;
    }
    let session = [
        ("ttl", seconds(SessionBuilder::DEFAULT_TTL)),
        (
            "behavior",
            Behavior::default().as_str().into_value_with(ruby),
        ),
        ("lock_delay", seconds(SessionBuilder::DEFAULT_LOCK_DELAY)),
        ("connect_timeout", seconds(DEFAULT_CONNECT_TIMEOUT)),
    ];
    by_class.aset("Lockyard::Redis::Session", options(&session)?)?;
    let gcs = [
        (
            "thread_safe",
            GcsLockBuilder::DEFAULT_THREAD_SAFE.into_value_with(ruby),
        ),
        (
            "hold_per_instance",
            GcsLockBuilder::DEFAULT_HOLD_PER_INSTANCE.into_value_with(ruby),
        ),
        ("ttl", seconds(GcsLockBuilder::DEFAULT_TTL)),
        (
            "max_refresh_fails",
            DEFAULT_MAX_REFRESH_FAILS.into_value_with(ruby),
        ),
        ("backoff_min", seconds(GcsLockBuilder::DEFAULT_BACKOFF_MIN)),
        ("backoff_max", seconds(GcsLockBuilder::DEFAULT_BACKOFF_MAX)),
        (
            "backoff_multiplier",
            GcsLockBuilder::DEFAULT_BACKOFF_MULTIPLIER.into_value_with(ruby),
        ),
    ];
    by_class.aset("Lockyard::GCS::Lock", options(&gcs)?)?;
    Ok(by_class)
}
