//! Ruby arguments to core values. A value of the wrong type is a bad
//! argument like any other: `Lockyard::ConfigError`, raised before anything
//! touches the network.

use lockyard::redis::LeaseBuilder;
use std::time::Duration;

use lockyard::{Deadline, Error, Result};
use magnus::{prelude::*, Integer, RArray, RString, Ruby, TryConvert, Value};

/// Seconds given as an Integer or a Float.
pub(crate) fn seconds(ruby: &Ruby, what: &str, value: Value) -> Result<Duration> {
    let expected = "a number of seconds (Integer or Float)";
    if !value.is_kind_of(ruby.class_numeric()) {
        return Err(wrong_type(what, expected, value));
    }
    // Complex is Numeric too, but has no value in seconds.
    let number = f64::try_convert(value).map_err(|_| wrong_type(what, expected, value))?;
    lockyard::redis::seconds(what, number)
}

/// Seconds, or nil for "no limit" / "the default".
pub(crate) fn optional_seconds(ruby: &Ruby, what: &str, value: Value) -> Result<Option<Duration>> {
    if value.is_nil() {
        return Ok(None);
    }
    seconds(ruby, what, value).map(Some)
}

/// The deadline of a wait of `value` seconds (within the core's limit,
/// `lockyard::MAX_WAIT`; nil: forever), fixed before the wait starts: a
/// wait resumed after an interrupt that raised nothing keeps it.
pub(crate) fn deadline(ruby: &Ruby, value: Value) -> Result<Deadline> {
    Deadline::after(optional_seconds(ruby, "timeout", value)?).check()
}

pub(crate) fn string(what: &str, value: Value) -> Result<String> {
    RString::from_value(value)
        .ok_or_else(|| wrong_type(what, "a String", value))?
        .to_string()
        .map_err(|e| Error::Config(format!("{what}: {e}")))
}

/// An Array of Strings.
pub(crate) fn strings(what: &str, value: Value) -> Result<Vec<String>> {
    let array =
        RArray::from_value(value).ok_or_else(|| wrong_type(what, "an Array of Strings", value))?;
    array.into_iter().map(|item| string(what, item)).collect()
}

pub(crate) fn optional_string(what: &str, value: Value) -> Result<Option<String>> {
    if value.is_nil() {
        return Ok(None);
    }
    string(what, value).map(Some)
}

pub(crate) fn count(what: &str, value: Value) -> Result<u32> {
    Integer::from_value(value)
        .and_then(|number| number.to_u32().ok())
        .ok_or_else(|| wrong_type(what, "an Integer from 0 to 4294967295", value))
}

/// A count, or nil for the default.
pub(crate) fn optional_count(what: &str, value: Value) -> Result<Option<u32>> {
    if value.is_nil() {
        return Ok(None);
    }
    count(what, value).map(Some)
}

/// The lease options of every Redis primitive, checked alike for `Lock`,
/// `WaitGroup` and `RwLock`; each one nil keeps the core builder's default.
pub(crate) fn lease_options<B: LeaseBuilder>(
    ruby: &Ruby,
    mut builder: B,
    ttl: Value,
    refresh_interval: Value,
    max_refresh_fails: Value,
    connect_timeout: Value,
) -> Result<B> {
    if let Some(ttl) = optional_seconds(ruby, "ttl", ttl)? {
        builder = builder.ttl(ttl);
    }
    if let Some(every) = optional_seconds(ruby, "refresh_interval", refresh_interval)? {
        builder = builder.refresh_interval(every);
    }
    if let Some(fails) = optional_count("max_refresh_fails", max_refresh_fails)? {
        builder = builder.max_refresh_fails(fails);
    }
    if let Some(timeout) = optional_seconds(ruby, "connect_timeout", connect_timeout)? {
        builder = builder.connect_timeout(timeout);
    }
    Ok(builder)
}

fn wrong_type(what: &str, expected: &str, value: Value) -> Error {
    Error::Config(format!(
        "{what} must be {expected}, got {}",
        value.inspect()
    ))
}

/// A plain number (Integer or Float), such as a multiplier.
pub(crate) fn number(ruby: &Ruby, what: &str, value: Value) -> Result<f64> {
    if !value.is_kind_of(ruby.class_numeric()) {
        return Err(wrong_type(what, "a number", value));
    }
    f64::try_convert(value).map_err(|_| wrong_type(what, "a real number", value))
}
